// RUN: mt-opt %s -split-input-file -verify-diagnostics

// What the fused op refuses: its operands' shapes, the bias, and the dropout's rules.
func.func @residual(%x: tensor<2x3x4xf32>, %res: tensor<2x3x5xf32>) {
  // expected-error@+2 {{mt.bias_dropout_add: input tensor<2x3x4xf32> and residual tensor<2x3x5xf32> must have the same shape}}
  // expected-error@+1 {{'mt.bias_dropout_add' op failed to infer returned types}}
  %y = mt.bias_dropout_add %x, %res {rate = 0.1 : f64, stream = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3x5xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @bias(%x: tensor<2x3x4xf32>, %res: tensor<2x3x4xf32>, %b: tensor<3xf32>) {
  // expected-error@+2 {{mt.bias_dropout_add: bias tensor<3xf32> must be [4] of the element type of input tensor<2x3x4xf32>}}
  // expected-error@+1 {{'mt.bias_dropout_add' op failed to infer returned types}}
  %y = mt.bias_dropout_add %x, %res, %b {rate = 0.1 : f64, stream = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<3xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @rate(%x: tensor<2x3x4xf32>, %res: tensor<2x3x4xf32>) {
  // expected-error@+1 {{'mt.bias_dropout_add' op rate 1.000000e+00 must lie in [0, 1)}}
  %y = mt.bias_dropout_add %x, %res {rate = 1.0 : f64, stream = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return
}
