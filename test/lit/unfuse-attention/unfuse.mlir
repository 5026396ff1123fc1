// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-unfuse-attention | FileCheck %s
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=8" -mt-tensor-parallel="tp=2" -mt-unfuse-attention | FileCheck %s --check-prefix=TP

// Each fused attention becomes probabilities [B, heads, S, S] -> their dropout (the
// attention's rate and stream) -> the product with V, in the attention's layer.
// CHECK-LABEL: func.func @forward
// CHECK: %[[QKV:.*]] = mt.linear {{.*}} -> tensor<2x8x192xf32>
// CHECK-NEXT: %[[P:.*]] = mt.attention_probs %[[QKV]] {causal, heads = 4 : i64, mt.layer = 0 : i64} : (tensor<2x8x192xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[PD:.*]] = mt.dropout %[[P]] {mt.layer = 0 : i64, rate = 1.000000e-01 : f64, stream = {{[0-9]+}} : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT: %{{.*}} = mt.attention_context %[[PD]], %[[QKV]] {mt.layer = 0 : i64} : (tensor<2x4x8x8xf32>, tensor<2x8x192xf32>) -> tensor<2x8x64xf32>
// CHECK-NEXT: mt.param "h.0.attn.proj.weight"
// CHECK-NOT: mt.attention %

// Under tensor parallelism each rank holds a block of the heads: the dropout draws its
// mask at the global head indices (its dimension 1 is sharded).
// TP: mt.attention_probs {{.*}} -> tensor<2x2x8x8xf32>
// TP-NEXT: mt.dropout {{.*}} {mt.layer = 0 : i64, rate = 1.000000e-01 : f64, sequence_parallel, stream = {{[0-9]+}} : i64} : (tensor<2x2x8x8xf32>)
// TP-NEXT: mt.attention_context {{.*}} -> tensor<2x8x32xf32>
