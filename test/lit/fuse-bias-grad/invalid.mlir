// RUN: mt-opt %s -split-input-file -verify-diagnostics

// What the fused op refuses: operands that disagree, the wrong result types, and
// accumulated gradients read by anything but one mt.param_grad each.
func.func @leading(%dy: tensor<2x16x8xf32>, %x: tensor<2x8x4xf32>) {
  // expected-error@+2 {{mt.linear_grad_weight_bias: grad tensor<2x16x8xf32> and input tensor<2x8x4xf32> must agree in all but the last dimension}}
  // expected-error@+1 {{'mt.linear_grad_weight_bias' op failed to infer returned types}}
  %dw, %db = mt.linear_grad_weight_bias %dy, %x : (tensor<2x16x8xf32>, tensor<2x8x4xf32>) -> (tensor<8x4xf32>, tensor<8xf32>)
  return
}

// -----

func.func @element_type(%dy: tensor<6x8xf32>, %x: tensor<6x4xf16>) {
  // expected-error@+2 {{mt.linear_grad_weight_bias: grad tensor<6x8xf32> and input tensor<6x4xf16> differ in element type}}
  // expected-error@+1 {{'mt.linear_grad_weight_bias' op failed to infer returned types}}
  %dw, %db = mt.linear_grad_weight_bias %dy, %x : (tensor<6x8xf32>, tensor<6x4xf16>) -> (tensor<8x4xf32>, tensor<8xf32>)
  return
}

// -----

func.func @bias_shape(%dy: tensor<6x8xf32>, %x: tensor<6x4xf32>) {
  // expected-error@+2 {{'mt.linear_grad_weight_bias' op inferred type(s) 'tensor<8x4xf32>', 'tensor<8xf32>' are incompatible with return type(s) of operation 'tensor<8x4xf32>', 'tensor<4xf32>'}}
  // expected-error@+1 {{'mt.linear_grad_weight_bias' op failed to infer returned types}}
  %dw, %db = mt.linear_grad_weight_bias %dy, %x : (tensor<6x8xf32>, tensor<6x4xf32>) -> (tensor<8x4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @accumulated_type(%dy: tensor<6x8xbf16>, %x: tensor<6x4xbf16>) {
  // expected-error@+2 {{'mt.linear_grad_weight_bias' op inferred type(s) 'tensor<8x4xf32>', 'tensor<8xf32>' are incompatible with return type(s) of operation 'tensor<8x4xbf16>', 'tensor<8xbf16>'}}
  // expected-error@+1 {{'mt.linear_grad_weight_bias' op failed to infer returned types}}
  %dw, %db = mt.linear_grad_weight_bias %dy, %x {accumulate} : (tensor<6x8xbf16>, tensor<6x4xbf16>) -> (tensor<8x4xbf16>, tensor<8xbf16>)
  mt.param_grad "w", %dw : tensor<8x4xbf16>
  mt.param_grad "b", %db : tensor<8xbf16>
  return
}

// -----

func.func @bias_read_elsewhere(%dy: tensor<6x8xf32>, %x: tensor<6x4xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'mt.linear_grad_weight_bias' op accumulates, so its weight gradient #1 must be read by one mt.param_grad alone}}
  %dw, %db = mt.linear_grad_weight_bias %dy, %x {accumulate} : (tensor<6x8xf32>, tensor<6x4xf32>) -> (tensor<8x4xf32>, tensor<8xf32>)
  mt.param_grad "w", %dw : tensor<8x4xf32>
  mt.param_grad "b", %db : tensor<8xf32>
  return %db : tensor<8xf32>
}
