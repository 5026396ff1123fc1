// RUN: mt-opt %s -split-input-file -mt-expand -verify-diagnostics

module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-note@+1 {{first definition here}}
    %a = mt.param "w" ones : tensor<4xf32>
    // expected-error@+1 {{parameter 'w' is defined twice}}
    %b = mt.param "w" zeros : tensor<4xf32>
    %s = mt.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %s : tensor<4xf32>
  }
}

// -----

// Unrolled layers must not collide with a parameter of the same path.
module {
  func.func private @block(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error@+1 {{parameter 'h.1.w' is defined twice}}
    %w = mt.param "w" ones : tensor<4xf32>
    %s = mt.add %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %s : tensor<4xf32>
  }
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-note@+1 {{first definition here}}
    %w = mt.param "h.1.w" ones : tensor<4xf32>
    %x1 = mt.add %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %y = mt.repeat 2 @block(%x1) {prefix = "h"} : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

module {
  func.func private @a(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error@+1 {{block @b repeats itself through mt.repeat}}
    %y = mt.repeat 2 @b(%x) {prefix = "b"} : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func private @b(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = mt.repeat 2 @a(%x) {prefix = "a"} : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = mt.repeat 2 @a(%x) {prefix = "o"} : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// A stream written inside a repeated block would give every layer the same mask.
module {
  func.func private @block(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error@+2 {{dropout stream 0 is used twice; leave streams to mt-expand}}
    // expected-note@+1 {{first use here}}
    %d = mt.dropout %x {rate = 1.0e-01 : f64, stream = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
    return %d : tensor<4xf32>
  }
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = mt.repeat 2 @block(%x) {prefix = "h"} : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
