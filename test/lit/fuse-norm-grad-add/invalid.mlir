// RUN: mt-opt %s -split-input-file -verify-diagnostics

// A norm gradient's residual gradient has the input gradient's shape and type.
func.func @shape(%dy: tensor<6x4xf32>, %x: tensor<6x4xf32>, %w: tensor<4xf32>, %acc: tensor<6x5xf32>) {
  // expected-error@+2 {{mt.layer_norm_grad: residual_grad tensor<6x5xf32> and grad tensor<6x4xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.layer_norm_grad' op failed to infer returned types}}
  %dx, %dw, %db = mt.layer_norm_grad %dy, %x, %w, %acc : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<4xf32>, tensor<6x5xf32>) -> (tensor<6x4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @type(%dy: tensor<6x4xbf16>, %x: tensor<6x4xbf16>, %w: tensor<4xbf16>, %acc: tensor<6x4xf32>) {
  // expected-error@+2 {{mt.rms_norm_grad: residual_grad tensor<6x4xf32> and grad tensor<6x4xbf16> must have the same shape and element type}}
  // expected-error@+1 {{'mt.rms_norm_grad' op failed to infer returned types}}
  %dx, %dw = mt.rms_norm_grad %dy, %x, %w, %acc : (tensor<6x4xbf16>, tensor<6x4xbf16>, tensor<4xbf16>, tensor<6x4xf32>) -> (tensor<6x4xbf16>, tensor<4xbf16>)
  return
}
