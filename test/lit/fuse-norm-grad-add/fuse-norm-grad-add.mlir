// RUN: mt-opt %s -split-input-file -mt-fuse-norm-grad-add | FileCheck %s
// RUN: mt-opt %models/llama-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-autodiff -mt-fuse-norm-grad-add | FileCheck %s --check-prefix=STEP

// The add of a norm's input gradient and a gradient defined before the norm's gradient
// becomes the norm gradient's fourth operand; the add's readers read the norm's result.
// CHECK-LABEL: func.func @pair
// CHECK-NEXT: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = mt.layer_norm_grad %arg0, %arg1, %arg2, %arg3 {mt.layer = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK-NEXT: %[[DR:.*]], %[[DG:.*]] = mt.rms_norm_grad %arg0, %[[DX]], %arg2, %[[DX]] : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>)
// CHECK-NEXT: return %[[DR]], %[[DW]], %[[DB]], %[[DG]]
func.func @pair(%dy: tensor<2x3x4xf32>, %x: tensor<2x3x4xf32>, %w: tensor<4xf32>, %acc: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %dx, %dw, %db = mt.layer_norm_grad %dy, %x, %w {mt.layer = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
  %s = mt.add %acc, %dx {mt.layer = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %dr, %dg = mt.rms_norm_grad %dy, %s, %w : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>)
  %t = mt.add %dr, %s : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %t, %dw, %db, %dg : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Left as they are: an input gradient something else reads too, a summand defined after
// the norm's gradient, one added to itself, and a pair placed apart.
// CHECK-LABEL: func.func @apart
// CHECK-COUNT-4: mt.add
// CHECK-NOT: tensor<4xf32>, tensor<6x4xf32>) ->
func.func @apart(%dy: tensor<6x4xf32>, %x: tensor<6x4xf32>, %w: tensor<4xf32>, %acc: tensor<6x4xf32>) -> (tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>) {
  %d1, %g1 = mt.rms_norm_grad %dy, %x, %w : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<4xf32>) -> (tensor<6x4xf32>, tensor<4xf32>)
  %s1 = mt.add %acc, %d1 : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>
  %d2, %g2 = mt.rms_norm_grad %dy, %x, %w : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<4xf32>) -> (tensor<6x4xf32>, tensor<4xf32>)
  %late = mt.gelu %acc : (tensor<6x4xf32>) -> tensor<6x4xf32>
  %s2 = mt.add %late, %d2 : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>
  %d3, %g3 = mt.rms_norm_grad %dy, %x, %w : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<4xf32>) -> (tensor<6x4xf32>, tensor<4xf32>)
  %s3 = mt.add %d3, %d3 : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>
  %d4, %g4 = mt.rms_norm_grad %dy, %x, %w {mt.layer = 0 : i64} : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<4xf32>) -> (tensor<6x4xf32>, tensor<4xf32>)
  %s4 = mt.add %acc, %d4 {mt.layer = 1 : i64} : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>
  return %s1, %d1, %s2, %s3, %s4 : tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>
}

// In a whole LLaMA step the final norm's gradient, first in backward, has nothing to
// sum (its input reaches the loss through it alone); each layer's two norms then sum the
// residual stream's gradient.
// STEP-LABEL: func.func @train_step
// STEP: mt.rms_norm_grad {{[^:]*}}: (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) ->
// STEP-COUNT-4: mt.rms_norm_grad {{[^:]*}}: (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xf32>)
// STEP-NOT: mt.rms_norm_grad
