// RUN: mt-opt %s -split-input-file -mt-recompute="granularity=full layers=3" -verify-diagnostics

// expected-error@+1 {{mt-recompute: no backward pass (run mt-autodiff first)}}
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error@+1 {{mt-recompute: 3 layers asked for, the model has 1}}
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %g = mt.gelu %x {mt.layer = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  %one = arith.constant dense<1.0> : tensor<4xf32>
  %d = mt.gelu_grad %one, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %s = mt.add %d, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %s : tensor<4xf32>
}

