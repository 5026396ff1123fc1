// RUN: mt-opt %s -split-input-file -verify-diagnostics

// An op that accumulates hands each weight gradient to one mt.param_grad alone.
func.func @read_elsewhere(%dy: tensor<6x5xf32>, %x: tensor<6x4xf32>) -> tensor<5x4xf32> {
  // expected-error@+1 {{'mt.linear_grad_weight' op accumulates, so its weight gradient #0 must be read by one mt.param_grad alone}}
  %dw = mt.linear_grad_weight %dy, %x {accumulate} : (tensor<6x5xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
  mt.param_grad "w", %dw : tensor<5x4xf32>
  return %dw : tensor<5x4xf32>
}

// -----

func.func @bias_unread(%dy: tensor<6x4xf32>, %x: tensor<6x4xf32>, %g: tensor<4xf32>) -> tensor<6x4xf32> {
  // expected-error@+1 {{'mt.layer_norm_grad' op accumulates, so its weight gradient #2 must be read by one mt.param_grad alone}}
  %dx, %dg, %db = mt.layer_norm_grad %dy, %x, %g {accumulate} : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<4xf32>) -> (tensor<6x4xf32>, tensor<4xf32>, tensor<4xf32>)
  mt.param_grad "ln.weight", %dg : tensor<4xf32>
  return %dx : tensor<6x4xf32>
}

// -----

// Accumulated gradients are in the accumulator type: bf16 is refused as the declared type.
func.func @type(%dy: tensor<6x5xbf16>) {
  // expected-error@+2 {{'mt.bias_grad' op inferred type(s) 'tensor<5xf32>' are incompatible with return type(s) of operation 'tensor<5xbf16>'}}
  // expected-error@+1 {{'mt.bias_grad' op failed to infer returned types}}
  %db = mt.bias_grad %dy {accumulate} : (tensor<6x5xbf16>) -> tensor<5xbf16>
  mt.param_grad "b", %db : tensor<5xbf16>
  return
}
