// RUN: mt-opt %s -split-input-file -mt-fuse-grad-accumulation | FileCheck %s
// RUN: mt-opt %s -split-input-file -mt-fuse-grad-accumulation -mt-memory-plan="alignment=64" | FileCheck %s --check-prefix=PLAN
// RUN: mt-opt %models/llama-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8 precision=bf16" -mt-autodiff -mt-fuse-grad-accumulation | FileCheck %s --check-prefix=STEP

// Each weight gradient read by one mt.param_grad alone is added into the parameter's
// gradient by its op, in the accumulator type: f32 under bf16.
// CHECK-LABEL: func.func @bf16
// CHECK: %[[DW:.*]] = mt.linear_grad_weight %arg0, %arg1 {accumulate} : (tensor<2x3x5xbf16>, tensor<2x3x4xbf16>) -> tensor<5x4xf32>
// CHECK-NEXT: %[[DB:.*]] = mt.bias_grad %arg0 {accumulate} : (tensor<2x3x5xbf16>) -> tensor<5xf32>
// CHECK-NEXT: %[[DX:.*]], %[[DG:.*]], %[[DBETA:.*]] = mt.layer_norm_grad %arg1, %arg1, %arg2 {accumulate} : (tensor<2x3x4xbf16>, tensor<2x3x4xbf16>, tensor<4xbf16>) -> (tensor<2x3x4xbf16>, tensor<4xf32>, tensor<4xf32>)
// CHECK-NEXT: %[[DX2:.*]], %[[DR:.*]] = mt.rms_norm_grad %arg1, %arg1, %arg2 {accumulate} : (tensor<2x3x4xbf16>, tensor<2x3x4xbf16>, tensor<4xbf16>) -> (tensor<2x3x4xbf16>, tensor<4xf32>)
// CHECK-NEXT: mt.param_grad "w", %[[DW]] : tensor<5x4xf32>
// CHECK-NEXT: mt.param_grad "b", %[[DB]] : tensor<5xf32>
// CHECK-NEXT: mt.param_grad "ln.weight", %[[DG]] : tensor<4xf32>
// CHECK-NEXT: mt.param_grad "ln.bias", %[[DBETA]] : tensor<4xf32>
// CHECK-NEXT: mt.param_grad "rms.weight", %[[DR]] : tensor<4xf32>
// CHECK-NEXT: return %[[DX]], %[[DX2]]
func.func @bf16(%dy: tensor<2x3x5xbf16>, %x: tensor<2x3x4xbf16>, %g: tensor<4xbf16>) -> (tensor<2x3x4xbf16>, tensor<2x3x4xbf16>) {
  %w = mt.param "w" normal(0.02) : tensor<5x4xbf16>
  %b = mt.param "b" zeros : tensor<5xbf16>
  %lw = mt.param "ln.weight" ones : tensor<4xbf16>
  %lb = mt.param "ln.bias" zeros : tensor<4xbf16>
  %rw = mt.param "rms.weight" ones : tensor<4xbf16>
  %dw = mt.linear_grad_weight %dy, %x : (tensor<2x3x5xbf16>, tensor<2x3x4xbf16>) -> tensor<5x4xbf16>
  %db = mt.bias_grad %dy : (tensor<2x3x5xbf16>) -> tensor<5xbf16>
  %dx, %dg, %dbeta = mt.layer_norm_grad %x, %x, %g : (tensor<2x3x4xbf16>, tensor<2x3x4xbf16>, tensor<4xbf16>) -> (tensor<2x3x4xbf16>, tensor<4xbf16>, tensor<4xbf16>)
  %dx2, %dr = mt.rms_norm_grad %x, %x, %g : (tensor<2x3x4xbf16>, tensor<2x3x4xbf16>, tensor<4xbf16>) -> (tensor<2x3x4xbf16>, tensor<4xbf16>)
  mt.param_grad "w", %dw : tensor<5x4xbf16>
  mt.param_grad "b", %db : tensor<5xbf16>
  mt.param_grad "ln.weight", %dg : tensor<4xbf16>
  mt.param_grad "ln.bias", %dbeta : tensor<4xbf16>
  mt.param_grad "rms.weight", %dr : tensor<4xbf16>
  return %dx, %dx2 : tensor<2x3x4xbf16>, tensor<2x3x4xbf16>
}

// The weight gradients take no arena space: their offsets are -1, and the arena holds
// the arguments and the two input gradients alone (the first where dy was).
// PLAN-LABEL: func.func @bf16
// PLAN-SAME: mt.arena_bytes = 240 : i64, mt.arg_offsets = array<i64: 0, 64, 128>
// PLAN: mt.linear_grad_weight {{.*}}mt.offsets = array<i64: -1>
// PLAN-NEXT: mt.bias_grad {{.*}}mt.offsets = array<i64: -1>
// PLAN-NEXT: mt.layer_norm_grad {{.*}}mt.offsets = array<i64: 0, -1, -1>
// PLAN-NEXT: mt.rms_norm_grad {{.*}}mt.offsets = array<i64: 192, -1>

// -----

// In f32 the types stay as they are.
// CHECK-LABEL: func.func @f32
// CHECK-NEXT: mt.linear_grad_weight %arg0, %arg1 {accumulate} : (tensor<6x5xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
func.func @f32(%dy: tensor<6x5xf32>, %x: tensor<6x4xf32>) {
  %dw = mt.linear_grad_weight %dy, %x : (tensor<6x5xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
  mt.param_grad "w", %dw : tensor<5x4xf32>
  return
}

// -----

// Left as they are: a weight gradient summed with another before its mt.param_grad, one
// returned, and a layer norm whose bias gradient (but not its weight's) goes elsewhere.
// CHECK-LABEL: func.func @apart
// CHECK-NOT: accumulate
// CHECK: return
func.func @apart(%dy: tensor<6x5xf32>, %x: tensor<6x4xf32>, %g: tensor<4xf32>) -> (tensor<5x4xf32>, tensor<4xf32>) {
  %d1 = mt.linear_grad_weight %dy, %x : (tensor<6x5xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
  %d2 = mt.linear_grad_weight %dy, %x : (tensor<6x5xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
  %s = mt.add %d1, %d2 : (tensor<5x4xf32>, tensor<5x4xf32>) -> tensor<5x4xf32>
  mt.param_grad "w", %s : tensor<5x4xf32>
  %d3 = mt.linear_grad_weight %dy, %x : (tensor<6x5xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
  mt.param_grad "w", %d3 : tensor<5x4xf32>
  %dx, %dg, %dbeta = mt.layer_norm_grad %x, %x, %g : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<4xf32>) -> (tensor<6x4xf32>, tensor<4xf32>, tensor<4xf32>)
  mt.param_grad "ln.weight", %dg : tensor<4xf32>
  return %d3, %dbeta : tensor<5x4xf32>, tensor<4xf32>
}

// In a whole bf16 LLaMA step every weight gradient accumulates (the tied-free head, the
// norms, each projection), and none is left for an unfused mt.param_grad to add, except
// the embedding's.
// STEP-LABEL: func.func @train_step
// STEP-NOT: mt.linear_grad_weight {{[^{]*}}{mt
// STEP-NOT: mt.linear_grad_weight {{[^{]*}}:
// STEP-NOT: mt.rms_norm_grad {{[^{]*}}{mt
// STEP-NOT: mt.rms_norm_grad {{[^{]*}}:
// STEP: mt.embedding_grad
// STEP-NEXT: mt.param_grad "embed_tokens.weight", {{.*}} : tensor<{{.*}}xbf16>
