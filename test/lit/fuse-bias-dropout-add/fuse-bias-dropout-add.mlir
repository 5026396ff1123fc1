// RUN: mt-opt %s -split-input-file -mt-fuse-bias-dropout-add | FileCheck %s
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-tensor-parallel="tp=2 sequence-parallel=true" -mt-autodiff -mt-fuse-bias-dropout-add | FileCheck %s --check-prefix=STEP

// A dropout whose result only an add reads becomes, with the add and the bias add in
// front of it, one op at the add's place, keeping the dropout's mask, rate, stream and
// placement; the mask's reader reads the fused op's.
// CHECK-LABEL: func.func @branch
// CHECK-NEXT: %[[Y:.*]], %[[MASK:.*]] = mt.bias_dropout_add %arg0, %arg1, %arg2 {keep_mask, mt.layer = 1 : i64, rate = 1.000000e-01 : f64, sequence_parallel, stream = 3 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xi8>)
// CHECK-NEXT: %[[G:.*]] = mt.dropout_grad %arg3, %[[MASK]]
// CHECK-NEXT: return %[[Y]], %[[G]]
func.func @branch(%x: tensor<2x3x4xf32>, %res: tensor<2x3x4xf32>, %b: tensor<4xf32>, %dy: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %h = mt.bias_add %x, %b {mt.layer = 1 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %d, %m = mt.dropout %h {keep_mask, mt.layer = 1 : i64, rate = 0.1 : f64, sequence_parallel, stream = 3 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xi8>)
  %y = mt.add %res, %d {mt.layer = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %g = mt.dropout_grad %dy, %m {rate = 0.1 : f64} : (tensor<2x3x4xf32>, tensor<2x3x4xi8>) -> tensor<2x3x4xf32>
  return %y, %g : tensor<2x3x4xf32>, tensor<2x3x4xf32>
}

// -----

// Without a bias (the linear's own, in its epilogue), without a mask (recomputation draws
// it again), and with the dropped value as the add's first operand.
// CHECK-LABEL: func.func @plain
// CHECK-NEXT: %[[Y:.*]] = mt.bias_dropout_add %arg0, %arg1 {rate = 2.000000e-01 : f64, stream = 0 : i64} : (tensor<2x3x4xbf16>, tensor<2x3x4xbf16>) -> tensor<2x3x4xbf16>
// CHECK-NEXT: return %[[Y]]
func.func @plain(%x: tensor<2x3x4xbf16>, %res: tensor<2x3x4xbf16>) -> tensor<2x3x4xbf16> {
  %d = mt.dropout %x {rate = 0.2 : f64, stream = 0 : i64} : (tensor<2x3x4xbf16>) -> tensor<2x3x4xbf16>
  %y = mt.add %d, %res : (tensor<2x3x4xbf16>, tensor<2x3x4xbf16>) -> tensor<2x3x4xbf16>
  return %y : tensor<2x3x4xbf16>
}

// -----

// Left as they are: a dropped value something else reads too, one added to itself, a
// pair placed apart, and a dropout whose mask is read before the add. A bias add read
// by another op stays, and the fused op takes its result.
// CHECK-LABEL: func.func @apart
// CHECK-COUNT-4: mt.dropout %
// CHECK-NOT: bias_dropout_add
// CHECK: %[[H:.*]] = mt.bias_add
// CHECK-NEXT: %[[Y:.*]] = mt.bias_dropout_add %[[H]], %arg1 {
// CHECK-NEXT: return
func.func @apart(%x: tensor<2x3x4xf32>, %res: tensor<2x3x4xf32>, %b: tensor<4xf32>, %dy: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %d1 = mt.dropout %x {rate = 0.1 : f64, stream = 0 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %y1 = mt.add %res, %d1 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %d2 = mt.dropout %x {rate = 0.1 : f64, stream = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %y2 = mt.add %d2, %d2 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %d3 = mt.dropout %x {mt.recomputed, rate = 0.1 : f64, stream = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %y3 = mt.add %res, %d3 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %d4, %m4 = mt.dropout %x {keep_mask, rate = 0.1 : f64, stream = 3 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xi8>)
  %g4 = mt.dropout_grad %dy, %m4 {rate = 0.1 : f64} : (tensor<2x3x4xf32>, tensor<2x3x4xi8>) -> tensor<2x3x4xf32>
  %y4 = mt.add %res, %d4 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %h = mt.bias_add %x, %b : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %d5 = mt.dropout %h {rate = 0.1 : f64, stream = 4 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %y5 = mt.add %res, %d5 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %y1, %d1, %y2, %y3, %g4, %y4, %y5, %h : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
}

// Under tensor and sequence parallelism every residual branch of gpt-tiny (two layers,
// two branches each) takes its row-parallel linear's bias into the fused op; the
// embedding's dropout, which no add reads, stays.
// STEP-LABEL: func.func @train_step
// STEP: mt.dropout %
// STEP-COUNT-4: mt.bias_dropout_add {{.*}}keep_mask{{.*}}sequence_parallel{{.*}} : (tensor<2x4x64xf32>, tensor<2x4x64xf32>, tensor<64xf32>) -> (tensor<2x4x64xf32>, tensor<2x4x64xi8>)
// STEP-NOT: mt.bias_add
// STEP-NOT: mt.dropout %
