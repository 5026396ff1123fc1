// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=1 seq-length=8" -mt-unfuse-attention -mt-autodiff -mt-recompute="granularity=selective" | FileCheck %s

// Selective recomputation: the core attention's probabilities, their dropout (the same
// mask: same stream) and the product with V are computed again from the stored QKV
// just before their backward, so no s×s tensor lives from forward to backward; the
// attention's output, which the projection keeps anyway, is not recomputed.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[QKV:.*]] = mt.linear {{.*}} -> tensor<1x8x192xf32>
// CHECK: %[[P:.*]] = mt.attention_probs %[[QKV]]
// CHECK: %[[PD:.*]], %{{.*}} = mt.dropout %[[P]] {keep_mask, mt.layer = 0 : i64, rate = 1.000000e-01 : f64, stream = [[S:[0-9]+]] : i64}
// CHECK: %[[ATT:.*]] = mt.attention_context %[[PD]], %[[QKV]]
// CHECK: mt.linear %[[ATT]]
// CHECK: mt.cross_entropy_grad
// CHECK: mt.linear_grad_weight {{.*}}, %[[ATT]]
// The copies say so (an estimator costs them as recomputation).
// CHECK: %[[P2:.*]] = mt.attention_probs %[[QKV]] {{{.*}}mt.recomputed}
// CHECK-NEXT: %[[PD2:.*]], %[[M2:.*]] = mt.dropout %[[P2]] {keep_mask, mt.layer = 0 : i64, mt.recomputed, rate = 1.000000e-01 : f64, stream = [[S]] : i64}
// CHECK-NEXT: mt.attention_context_grad {{.*}}, %[[PD2]], %[[QKV]]
// CHECK-NEXT: mt.dropout_grad {{.*}}, %[[M2]]
// CHECK-NEXT: mt.attention_probs_grad {{.*}}, %[[P2]], %[[QKV]]
