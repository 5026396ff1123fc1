// RUN: mt-opt %s -split-input-file -mt-fuse-epilogues | FileCheck %s
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-autodiff -mt-recompute="granularity=full" -mt-fuse-epilogues | FileCheck %s --check-prefix=STEP

// A linear read by one GELU, and by GELU's gradient as its input, becomes one op with
// both results, in the linear's place; the input gradient of the next linear, read only
// by GELU's gradient as its incoming gradient, takes the gradient into its epilogue.
// CHECK-LABEL: func.func @pair
// CHECK-NEXT: %[[PRE:.*]], %[[A:.*]] = mt.linear_gelu %arg0, %arg1, %arg2 {mt.layer = 3 : i64} : (tensor<2x3x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = mt.linear %[[A]], %arg3
// CHECK-NEXT: %[[DH:.*]] = mt.linear_grad_input_gelu %arg4, %arg3, %[[PRE]] {mt.layer = 3 : i64} : (tensor<2x3x5xf32>, tensor<5x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
// CHECK-NEXT: return %[[Y]], %[[DH]]
// CHECK-NOT: mt.gelu
func.func @pair(%x: tensor<2x3x4xf32>, %w1: tensor<8x4xf32>, %b1: tensor<8xf32>, %w2: tensor<5x8xf32>, %dy: tensor<2x3x5xf32>) -> (tensor<2x3x5xf32>, tensor<2x3x8xf32>) {
  %h = mt.linear %x, %w1, %b1 {mt.layer = 3 : i64} : (tensor<2x3x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %a = mt.gelu %h {mt.layer = 3 : i64} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %y = mt.linear %a, %w2 : (tensor<2x3x8xf32>, tensor<5x8xf32>) -> tensor<2x3x5xf32>
  %da = mt.linear_grad_input %dy, %w2 {mt.layer = 3 : i64} : (tensor<2x3x5xf32>, tensor<5x8xf32>) -> tensor<2x3x8xf32>
  %dh = mt.gelu_grad %da, %h {mt.layer = 3 : i64} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y, %dh : tensor<2x3x5xf32>, tensor<2x3x8xf32>
}

// -----

// Left as they are: a pre-activation something else reads, a product something else
// reads, a GELU gradient that reads the product as its input, and pairs placed apart
// (another layer, or one of them recomputed).
// CHECK-LABEL: func.func @apart
// CHECK-NEXT: mt.linear %arg0
// CHECK-NEXT: mt.gelu
// CHECK-NEXT: mt.add
// CHECK-NEXT: mt.linear %arg0
// CHECK-NEXT: mt.gelu
// CHECK-NEXT: mt.linear %arg0
// CHECK-NEXT: mt.gelu
// CHECK-NEXT: mt.linear_grad_input
// CHECK-NEXT: mt.gelu_grad
// CHECK-NEXT: mt.add
// CHECK-NEXT: mt.linear_grad_input
// CHECK-NEXT: mt.gelu_grad
// CHECK-NEXT: mt.linear_grad_input
// CHECK-NEXT: mt.gelu_grad
// CHECK-NOT: _gelu
func.func @apart(%x: tensor<2x3x4xf32>, %w1: tensor<8x4xf32>, %dy: tensor<2x3x8xf32>, %w2: tensor<8x8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
  %h1 = mt.linear %x, %w1 : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
  %a1 = mt.gelu %h1 : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %s1 = mt.add %h1, %a1 : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %h2 = mt.linear %x, %w1 {mt.layer = 0 : i64} : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
  %a2 = mt.gelu %h2 {mt.layer = 1 : i64} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %h3 = mt.linear %x, %w1 {mt.recomputed} : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
  %a3 = mt.gelu %h3 : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %d1 = mt.linear_grad_input %dy, %w2 : (tensor<2x3x8xf32>, tensor<8x8xf32>) -> tensor<2x3x8xf32>
  %g1 = mt.gelu_grad %d1, %h1 : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %s2 = mt.add %d1, %g1 : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %d2 = mt.linear_grad_input %dy, %w2 : (tensor<2x3x8xf32>, tensor<8x8xf32>) -> tensor<2x3x8xf32>
  %g2 = mt.gelu_grad %dy, %d2 : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %d3 = mt.linear_grad_input %dy, %w2 {mt.layer = 0 : i64} : (tensor<2x3x8xf32>, tensor<8x8xf32>) -> tensor<2x3x8xf32>
  %g3 = mt.gelu_grad %d3, %h2 {mt.layer = 1 : i64} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %s1, %a2, %a3, %s2, %g2, %g3 : tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>
}

// In a whole training step with full recomputation, each layer's forward and its
// recomputed copy are fused, and so is its backward; no GELU is left.
// STEP-LABEL: func.func @train_step
// STEP-COUNT-2: mt.linear_gelu {{.*}}mt.layer = {{[01]}} : i64} : (tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32>) -> (tensor<2x8x256xf32>, tensor<2x8x256xf32>)
// STEP: mt.linear_gelu {{.*}}mt.recomputed
// STEP: mt.linear_grad_input_gelu {{.*}} : (tensor<2x8x64xf32>, tensor<64x256xf32>, tensor<2x8x256xf32>) -> tensor<2x8x256xf32>
// STEP: mt.linear_gelu {{.*}}mt.recomputed
// STEP: mt.linear_grad_input_gelu
// STEP-NOT: mt.gelu
// STEP-NOT: mt.linear_gelu
