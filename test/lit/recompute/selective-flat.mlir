// RUN: mt-opt %s -mt-autodiff -mt-recompute="granularity=selective" | FileCheck %s

// Selective recomputation needs no layers: any core attention is recomputed.
// CHECK-LABEL: func.func @train_step
// Its copy costs 4·B·s²·h = 4·2·4²·8 GEMM FLOPs.
// CHECK-SAME: mt.recompute_gemm_flops = 1024 : i64
// CHECK: %[[ATT:.*]] = mt.attention %[[QKV:[^ ]*]]
// CHECK: mt.cross_entropy %[[ATT]]
// CHECK: %[[AGAIN:.*]] = mt.attention %[[QKV]]
// CHECK-NEXT: mt.cross_entropy_grad {{.*}}, %[[AGAIN]]
// CHECK-NEXT: mt.attention_grad {{.*}}, %[[QKV]], %[[AGAIN]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x4x24xf32>
  %o = mt.attention %qkv {causal, heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %o, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
