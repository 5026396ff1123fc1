// RUN: mt-opt %s -mt-unfuse-attention -mt-autodiff -mt-recompute="granularity=selective" | FileCheck %s

// Selective recomputation needs no layers: any core attention is recomputed.
// CHECK-LABEL: func.func @train_step
// Only the probabilities are computed again (the output is kept): QKᵀ costs
// 2·B·s²·h = 2·2·4²·8 GEMM FLOPs.
// CHECK-SAME: mt.recompute_gemm_flops = 512 : i64
// CHECK: %[[P:.*]] = mt.attention_probs %[[QKV:[^ ]*]]
// CHECK: %[[ATT:.*]] = mt.attention_context %[[P]], %[[QKV]]
// CHECK: mt.cross_entropy %[[ATT]]
// CHECK: mt.cross_entropy_grad
// CHECK-NEXT: %[[AGAIN:.*]] = mt.attention_probs %[[QKV]]
// CHECK-NEXT: mt.attention_context_grad {{.*}}, %[[AGAIN]], %[[QKV]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x4x24xf32>
  %o = mt.attention %qkv {causal, heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %o, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
