// RUN: mt-opt %s -mt-tensor-parallel="tp=2" | FileCheck %s
// RUN: mt-opt %models/qwen3-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-tensor-parallel="tp=2 sequence-parallel=true" | FileCheck %s --check-prefix=SP

// Qwen3's normalised heads (4 query heads, 2 key/value heads of 4 dims): each rank holds
// whole groups, so qk_norm sees that rank's 2 query heads and 1 key/value head, and its
// weights, which every head shares, stay whole on every rank with their gradients summed
// over the group (tp_grad_reduce), with sequence parallelism and without.
// SP: mt.param "layers.0.self_attn.q_norm.weight" ones {mt.layer = 0 : i64, tp_grad_reduce} : tensor<16xf32>
// SP: mt.param "layers.0.self_attn.k_norm.weight" ones {mt.layer = 0 : i64, tp_grad_reduce} : tensor<16xf32>
// SP: mt.qk_norm {{.*}} {epsilon = {{.*}}, heads = 4 : i64, kv_heads = 2 : i64, mt.layer = 0 : i64} : (tensor<2x32x128xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x32x128xf32>
// CHECK-LABEL: func.func @qwen3
// CHECK: %[[WQ:.*]] = mt.param "q_norm.weight" ones {tp_grad_reduce} : tensor<4xf32>
// CHECK: %[[WK:.*]] = mt.param "k_norm.weight" ones {tp_grad_reduce} : tensor<4xf32>
// CHECK: %[[QKV:.*]] = mt.linear {{.*}} -> tensor<2x4x16xf32>
// CHECK: %[[N:.*]] = mt.qk_norm %[[QKV]], %[[WQ]], %[[WK]] {epsilon = {{.*}} : f64, heads = 2 : i64, kv_heads = 1 : i64} : (tensor<2x4x16xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[R:.*]] = mt.rotary %[[N]] {heads = 2 : i64, kv_heads = 1 : i64}
// CHECK: mt.attention %[[R]] {causal, head_parallel, heads = 2 : i64, kv_heads = 1 : i64}
func.func @qwen3(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %wq = mt.param "q_norm.weight" ones : tensor<4xf32>
  %wk = mt.param "k_norm.weight" ones : tensor<4xf32>
  %w = mt.param "qkv.weight" normal(2.0e-02) : tensor<32x8xf32>
  %qkv = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %n = mt.qk_norm %qkv, %wq, %wk {heads = 4 : i64, kv_heads = 2 : i64, epsilon = 1.0e-06 : f64} : (tensor<2x4x32xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x32xf32>
  %r = mt.rotary %n {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %a = mt.attention %r {causal, heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x32xf32>) -> tensor<2x4x16xf32>
  %wo = mt.param "out.weight" normal(2.0e-02) : tensor<8x16xf32>
  %o = mt.linear %a, %wo : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}
