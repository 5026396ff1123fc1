// RUN: mt-opt %s -split-input-file -mt-fuse-bias-grad | FileCheck %s
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-autodiff -mt-fuse-bias-grad -mt-fuse-grad-accumulation | FileCheck %s --check-prefix=STEP --implicit-check-not=mt.bias_grad
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-tensor-parallel="tp=2" -mt-autodiff -mt-fuse-bias-grad | FileCheck %s --check-prefix=TP --implicit-check-not=mt.bias_grad
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-tensor-parallel="tp=2 sequence-parallel=true" -mt-autodiff -mt-fuse-bias-grad | FileCheck %s --check-prefix=SP --implicit-check-not=mt.bias_grad

// A weight gradient and a bias gradient of the same dy become one op with both results,
// with their placement; their readers read its results. Here in the later one's place:
// the weight gradient's input is defined after the bias gradient.
// CHECK-LABEL: func.func @pair
// CHECK-NEXT: %[[DX:.*]] = mt.linear_grad_input %arg0, %arg2
// CHECK-NEXT: %[[X:.*]] = mt.add %arg1, %arg1
// CHECK-NEXT: %[[DW:.*]], %[[DB:.*]] = mt.linear_grad_weight_bias %arg0, %[[X]] {mt.layer = 3 : i64} : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> (tensor<5x4xf32>, tensor<5xf32>)
// CHECK-NEXT: mt.param_grad "w", %[[DW]]
// CHECK-NEXT: mt.param_grad "b", %[[DB]]
// CHECK-NEXT: return %[[DX]]
// CHECK-NOT: mt.bias_grad
func.func @pair(%dy: tensor<2x3x5xf32>, %x0: tensor<2x3x4xf32>, %w: tensor<5x4xf32>) -> tensor<2x3x4xf32> {
  %db = mt.bias_grad %dy {mt.layer = 3 : i64} : (tensor<2x3x5xf32>) -> tensor<5xf32>
  %dx = mt.linear_grad_input %dy, %w {mt.layer = 3 : i64} : (tensor<2x3x5xf32>, tensor<5x4xf32>) -> tensor<2x3x4xf32>
  %x = mt.add %x0, %x0 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %dw = mt.linear_grad_weight %dy, %x {mt.layer = 3 : i64} : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<5x4xf32>
  mt.param_grad "w", %dw : tensor<5x4xf32>
  mt.param_grad "b", %db : tensor<5xf32>
  return %dx : tensor<2x3x4xf32>
}

// -----

// In the earlier one's place, where the later one's operands are defined by then: the
// bias gradient's reader comes before the weight gradient (as under tensor parallelism,
// where a row-parallel linear's bias is added after the all-reduce). Pairs that already
// accumulate fuse too, in the accumulator type.
// CHECK-LABEL: func.func @order
// CHECK-NEXT: %[[DW:.*]], %[[DB:.*]] = mt.linear_grad_weight_bias %arg0, %arg1 {accumulate} : (tensor<2x3x5xbf16>, tensor<2x3x4xbf16>) -> (tensor<5x4xf32>, tensor<5xf32>)
// CHECK-NEXT: mt.param_grad "b", %[[DB]]
// CHECK-NEXT: mt.linear_grad_input
// CHECK-NEXT: mt.param_grad "w", %[[DW]]
func.func @order(%dy: tensor<2x3x5xbf16>, %x: tensor<2x3x4xbf16>, %w: tensor<5x4xbf16>) -> tensor<2x3x4xbf16> {
  %db = mt.bias_grad %dy {accumulate} : (tensor<2x3x5xbf16>) -> tensor<5xf32>
  mt.param_grad "b", %db : tensor<5xf32>
  %dx = mt.linear_grad_input %dy, %w : (tensor<2x3x5xbf16>, tensor<5x4xbf16>) -> tensor<2x3x4xbf16>
  %dw = mt.linear_grad_weight %dy, %x {accumulate} : (tensor<2x3x5xbf16>, tensor<2x3x4xbf16>) -> tensor<5x4xf32>
  mt.param_grad "w", %dw : tensor<5x4xf32>
  return %dx : tensor<2x3x4xbf16>
}

// -----

// Left as they are: a reader of the earlier one's result before the later one, whose
// input is defined after the earlier one; pairs placed apart (another layer, one of them
// recomputed); one that accumulates and one that does not; two weight gradients of one
// dy; different dy.
// CHECK-LABEL: func.func @apart
// CHECK-NOT: mt.linear_grad_weight_bias
// CHECK: return
func.func @apart(%dy: tensor<2x3x5xf32>, %dy2: tensor<2x3x5xf32>, %dy3: tensor<2x3x5xf32>, %x0: tensor<2x3x4xf32>, %x2: tensor<2x3x4xf32>) -> tensor<5xf32> {
  %db0 = mt.bias_grad %dy : (tensor<2x3x5xf32>) -> tensor<5xf32>
  %s = mt.add %db0, %db0 : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
  %x = mt.add %x0, %x0 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %dw0 = mt.linear_grad_weight %dy, %x : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<5x4xf32>
  mt.param_grad "w0", %dw0 : tensor<5x4xf32>
  %dw1 = mt.linear_grad_weight %dy2, %x {mt.layer = 1 : i64} : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<5x4xf32>
  %db1 = mt.bias_grad %dy2 {mt.layer = 2 : i64} : (tensor<2x3x5xf32>) -> tensor<5xf32>
  mt.param_grad "w1", %dw1 : tensor<5x4xf32>
  mt.param_grad "b1", %db1 : tensor<5xf32>
  %dw2 = mt.linear_grad_weight %dy3, %x2 {mt.layer = 2 : i64, mt.recomputed} : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<5x4xf32>
  %db2 = mt.bias_grad %dy3 {mt.layer = 2 : i64} : (tensor<2x3x5xf32>) -> tensor<5xf32>
  mt.param_grad "w2", %dw2 : tensor<5x4xf32>
  mt.param_grad "b2", %db2 : tensor<5xf32>
  return %s : tensor<5xf32>
}

// -----

// CHECK-LABEL: func.func @mixed
// CHECK-NOT: mt.linear_grad_weight_bias
// CHECK: return
func.func @mixed(%dy: tensor<2x3x5xbf16>, %x: tensor<2x3x4xbf16>) -> tensor<5x4xbf16> {
  %dw = mt.linear_grad_weight %dy, %x : (tensor<2x3x5xbf16>, tensor<2x3x4xbf16>) -> tensor<5x4xbf16>
  %db = mt.bias_grad %dy {accumulate} : (tensor<2x3x5xbf16>) -> tensor<5xf32>
  mt.param_grad "b", %db : tensor<5xf32>
  return %dw : tensor<5x4xbf16>
}

// -----

// CHECK-LABEL: func.func @shared
// CHECK-NOT: mt.linear_grad_weight_bias
// CHECK: return
func.func @shared(%dy: tensor<2x3x5xf32>, %x: tensor<2x3x4xf32>) -> tensor<5xf32> {
  %dw = mt.linear_grad_weight %dy, %x : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<5x4xf32>
  %db = mt.bias_grad %dy : (tensor<2x3x5xf32>) -> tensor<5xf32>
  mt.param_grad "w", %dw : tensor<5x4xf32>
  mt.param_grad "b", %db : tensor<5xf32>
  %s = mt.add %db, %db : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
  return %s : tensor<5xf32>
}

// -----

// CHECK-LABEL: func.func @twice
// CHECK-NOT: mt.linear_grad_weight_bias
// CHECK: return
func.func @twice(%dy: tensor<2x3x5xf32>, %x: tensor<2x3x4xf32>, %x2: tensor<2x3x4xf32>) {
  %dw = mt.linear_grad_weight %dy, %x : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<5x4xf32>
  %dw2 = mt.linear_grad_weight %dy, %x2 : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<5x4xf32>
  %db = mt.bias_grad %dy : (tensor<2x3x5xf32>) -> tensor<5xf32>
  mt.param_grad "w", %dw : tensor<5x4xf32>
  mt.param_grad "w2", %dw2 : tensor<5x4xf32>
  mt.param_grad "b", %db : tensor<5xf32>
  return
}

// In GPT's step the LM head has no bias and keeps its weight gradient; every other
// linear (per layer the QKV, the attention's output, and the MLP's two) gets one fused
// op, which then accumulates both gradients.
// STEP-LABEL: func.func @train_step
// STEP: mt.linear_grad_weight %{{.*}} {accumulate
// STEP-COUNT-8: mt.linear_grad_weight_bias %{{.*}} {accumulate
// STEP-NOT: mt.linear_grad_weight

// Under tensor parallelism the column-parallel linears' biases are split with their
// outputs and fuse with their weight gradients; so do the row-parallel linears' (their
// dy is the whole output's gradient on every rank).
// TP-LABEL: func.func @train_step
// TP-COUNT-8: mt.linear_grad_weight_bias
// TP-NOT: mt.linear_grad_weight_bias
// With sequence parallelism the row-parallel linears' bias gradients sum this rank's block
// of the sequence, their weight gradients the gathered dy: those pairs stay apart.
// SP-LABEL: func.func @train_step
// SP-COUNT-4: mt.bias_grad
