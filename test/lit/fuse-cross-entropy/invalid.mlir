// RUN: mt-opt %s -split-input-file -mt-fuse-cross-entropy -verify-diagnostics

// What the fused op refuses: the pair's rules, named by the fused op.
func.func @loss_grad_not_scalar(%dl: tensor<2xf32>, %logits: tensor<2x16x256xf32>, %t: tensor<2x16xi32>) {
  // expected-error@+2 {{mt.cross_entropy_with_grad: loss_grad tensor<2xf32> must be a scalar}}
  // expected-error@+1 {{'mt.cross_entropy_with_grad' op failed to infer returned types}}
  %0:2 = mt.cross_entropy_with_grad %dl, %logits, %t : (tensor<2xf32>, tensor<2x16x256xf32>, tensor<2x16xi32>) -> (tensor<f32>, tensor<2x16x256xf32>)
  return
}

// -----

func.func @loss_grad_type(%dl: tensor<bf16>, %logits: tensor<2x16x256xbf16>, %t: tensor<2x16xi32>) {
  // expected-error@+2 {{mt.cross_entropy_with_grad: loss_grad tensor<bf16> must be in the loss's type for logits tensor<2x16x256xbf16>}}
  // expected-error@+1 {{'mt.cross_entropy_with_grad' op failed to infer returned types}}
  %0:2 = mt.cross_entropy_with_grad %dl, %logits, %t : (tensor<bf16>, tensor<2x16x256xbf16>, tensor<2x16xi32>) -> (tensor<f32>, tensor<2x16x256xbf16>)
  return
}

// -----

func.func @targets(%dl: tensor<f32>, %logits: tensor<2x16x256xf32>, %t: tensor<2x8xi32>) {
  // expected-error@+2 {{mt.cross_entropy_with_grad: logits tensor<2x16x256xf32> and targets tensor<2x8xi32> must be [..., V] and [...]}}
  // expected-error@+1 {{'mt.cross_entropy_with_grad' op failed to infer returned types}}
  %0:2 = mt.cross_entropy_with_grad %dl, %logits, %t : (tensor<f32>, tensor<2x16x256xf32>, tensor<2x8xi32>) -> (tensor<f32>, tensor<2x16x256xf32>)
  return
}

// -----

func.func @num_classes(%dl: tensor<f32>, %logits: tensor<2x16x256xf32>, %t: tensor<2x16xi32>) {
  // expected-error@+2 {{mt.cross_entropy_with_grad: num_classes 300 exceeds the 256 logits of tensor<2x16x256xf32>}}
  // expected-error@+1 {{'mt.cross_entropy_with_grad' op failed to infer returned types}}
  %0:2 = mt.cross_entropy_with_grad %dl, %logits, %t {num_classes = 300 : i64} : (tensor<f32>, tensor<2x16x256xf32>, tensor<2x16xi32>) -> (tensor<f32>, tensor<2x16x256xf32>)
  return
}

// -----

func.func @declared_gradient(%dl: tensor<f32>, %logits: tensor<2x16x256xf32>, %t: tensor<2x16xi32>) {
  // expected-error@+2 {{'mt.cross_entropy_with_grad' op inferred type(s) 'tensor<f32>', 'tensor<2x16x256xf32>' are incompatible with return type(s) of operation 'tensor<f32>', 'tensor<2x16x256xbf16>'}}
  // expected-error@+1 {{'mt.cross_entropy_with_grad' op failed to infer returned types}}
  %0:2 = mt.cross_entropy_with_grad %dl, %logits, %t : (tensor<f32>, tensor<2x16x256xf32>, tensor<2x16xi32>) -> (tensor<f32>, tensor<2x16x256xbf16>)
  return
}
