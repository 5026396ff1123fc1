// RUN: mt-opt %s -mt-tensor-parallel="tp=2" | FileCheck %s

// Grouped-query attention (4 query heads, 2 key/value heads of 4 dims) after rotary
// embeddings: the QKV projection is column-parallel, so each rank holds whole groups,
// and the rotation and the attention see that rank's 2 query heads and 1 key/value head.
// CHECK-LABEL: func.func @rope
// CHECK: mt.param "qkv.weight" normal(2.000000e-02) {global_shape = array<i64: 32, 8>, shard_dim = 0 : i64} : tensor<16x8xf32>
// CHECK: %[[QKV:.*]] = mt.linear {{.*}} -> tensor<2x4x16xf32>
// CHECK: %[[R:.*]] = mt.rotary %[[QKV]] {heads = 2 : i64, kv_heads = 1 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[A:.*]] = mt.attention %[[R]] {causal, head_parallel, heads = 2 : i64, kv_heads = 1 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[O:.*]] = mt.linear %[[A]], %{{.*}} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK: shard.all_reduce %[[O]]
func.func @rope(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %w = mt.param "qkv.weight" normal(2.0e-02) : tensor<32x8xf32>
  %qkv = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %r = mt.rotary %qkv {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %a = mt.attention %r {causal, heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x32xf32>) -> tensor<2x4x16xf32>
  %wo = mt.param "out.weight" normal(2.0e-02) : tensor<8x16xf32>
  %o = mt.linear %a, %wo : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}
