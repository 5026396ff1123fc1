// RUN: mt-opt %s -split-input-file -mt-autodiff -verify-diagnostics

// expected-error@+1 {{mt-autodiff: no function @forward to differentiate}}
module {
  func.func @loss(%x: tensor<f32>) -> tensor<f32> {
    return %x : tensor<f32>
  }
}

// -----

module {
  // expected-error@+1 {{mt-autodiff: the loss must be a float scalar tensor, got 'tensor<4xf32>'}}
  func.func @forward() -> tensor<4xf32> {
    %x = mt.param "x" ones : tensor<4xf32>
    return %x : tensor<4xf32>
  }
}

// -----

// The repeated block has to be unrolled (mt-expand) before it can be differentiated.
module {
  func.func private @block(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
    return %x : tensor<2x4x8xf32>
  }
  func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
    %x = mt.param "x" normal(1.0) : tensor<2x4x8xf32>
    // expected-error@+1 {{'mt.repeat' op has no gradient rule, but its result reaches the loss}}
    %y = mt.repeat 2 @block(%x) {prefix = "h"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
