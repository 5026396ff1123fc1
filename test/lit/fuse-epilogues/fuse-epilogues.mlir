// RUN: mt-opt %s -split-input-file -mt-fuse-epilogues | FileCheck %s
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-autodiff -mt-recompute="granularity=full" -mt-fuse-epilogues | FileCheck %s --check-prefix=STEP
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-pipeline-assign="stages=2" -mt-autodiff -mt-pipeline-partition -mt-fuse-epilogues | FileCheck %s --check-prefix=PP

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

// The exact GELU stays as it is: cuBLASLt's epilogues compute the tanh form only.
// CHECK-LABEL: func.func @exact
// CHECK-NEXT: mt.linear %arg0, %arg1, %arg2 :
// CHECK-NEXT: mt.gelu %{{.*}} {approximate = "none"}
// CHECK: mt.linear_grad_input %arg4, %arg3 :
// CHECK-NEXT: mt.gelu_grad %{{.*}}, %{{.*}} {approximate = "none"}
// CHECK-NOT: _gelu
func.func @exact(%x: tensor<2x3x4xf32>, %w1: tensor<8x4xf32>, %b1: tensor<8xf32>, %w2: tensor<5x8xf32>, %dy: tensor<2x3x5xf32>) -> (tensor<2x3x5xf32>, tensor<2x3x8xf32>) {
  %h = mt.linear %x, %w1, %b1 : (tensor<2x3x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %a = mt.gelu %h {approximate = "none"} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %y = mt.linear %a, %w2 : (tensor<2x3x8xf32>, tensor<5x8xf32>) -> tensor<2x3x5xf32>
  %da = mt.linear_grad_input %dy, %w2 : (tensor<2x3x5xf32>, tensor<5x8xf32>) -> tensor<2x3x8xf32>
  %dh = mt.gelu_grad %da, %h {approximate = "none"} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y, %dh : tensor<2x3x5xf32>, tensor<2x3x8xf32>
}

// -----

// Any other reader of the pre-activation (here a pipeline stage's return, which stashes
// it for backward, and an add) reads the fused op's first result.
// CHECK-LABEL: func.func @stash
// CHECK-NEXT: %[[PRE:.*]], %[[A:.*]] = mt.linear_gelu %arg0, %arg1 :
// CHECK-NEXT: %[[S:.*]] = mt.add %[[PRE]], %[[A]]
// CHECK-NEXT: return %[[A]], %[[PRE]], %[[S]]
func.func @stash(%x: tensor<2x3x4xf32>, %w1: tensor<8x4xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
  %h = mt.linear %x, %w1 : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
  %a = mt.gelu %h : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %s = mt.add %h, %a : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %a, %h, %s : tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>
}

// -----

// Left as they are: a linear two GELUs read, a product something else reads, a GELU
// gradient that reads the product as its input, and pairs placed apart (another layer,
// or one of them recomputed).
// CHECK-LABEL: func.func @apart
// CHECK-NEXT: mt.linear %arg0
// CHECK-NEXT: mt.gelu
// CHECK-NEXT: mt.gelu
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
  %s1 = mt.gelu %h1 : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
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

// Under a pipeline each stage's forward fuses, stashing the pre-activation for its
// backward, which fuses with the stash it receives.
// PP-LABEL: func.func @forward_0
// PP: %[[PRE:.*]], %{{.*}} = mt.linear_gelu
// PP: return {{.*}}%[[PRE]]
// PP-LABEL: func.func @backward_0
// PP: mt.linear_grad_input_gelu
// PP-LABEL: func.func @forward_1
// PP: mt.linear_gelu
// PP-LABEL: func.func @backward_1
// PP: mt.linear_grad_input_gelu
// PP-NOT: mt.gelu
