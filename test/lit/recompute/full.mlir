// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=1 seq-length=8" -mt-autodiff -mt-recompute="granularity=full" | FileCheck %s

// Full recomputation, one layer at a time: before layer 1's backward, its forward runs
// again from its stored input (the output of layer 0's last add), and the backward
// reads only the copies. Copies backward does not need (the MLP's output projection)
// are left out.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: mt.recompute_gemm_flops =
// CHECK: mt.param "h.0.mlp.proj.bias"
// CHECK: %[[X1:.*]] = mt.add {{.*}}mt.layer = 0
// CHECK-NEXT: mt.param "h.1.ln_1.weight"
// CHECK: %[[QKV1:.*]] = mt.linear {{.*}}mt.layer = 1 {{.*}} -> tensor<1x8x192xf32>
// CHECK: mt.cross_entropy_grad
// CHECK: %[[LN1C:.*]] = mt.layer_norm %[[X1]], {{.*}}mt.layer = 1
// CHECK-NEXT: %[[QKV1C:.*]] = mt.linear %[[LN1C]]
// CHECK-NEXT: %[[ATT1C:.*]] = mt.attention %[[QKV1C]]
// CHECK-NOT: mt.attention_grad {{.*}}, %[[QKV1]],
// The MLP output's dropout gradient draws its mask again from the stream rather than
// recomputing the projection only to get the mask.
// CHECK: mt.dropout_grad %{{[a-z_0-9]+}} {rate = 1.000000e-01 : f64, stream = {{[0-9]+}} : i64} : (tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
// CHECK: mt.attention_grad {{.*}}, %[[QKV1C]], %[[ATT1C]]
// CHECK: mt.linear_grad_weight {{.*}}, %[[LN1C]]
// Then layer 0, recomputed from the stored output of the embeddings.
// CHECK: mt.layer_norm {{.*}}mt.layer = 0
// CHECK: return
