// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=1 seq-length=8" -mt-autodiff -mt-recompute="granularity=selective" | FileCheck %s

// Selective recomputation: the core attention's output is computed again from the
// stored QKV just before its backward; the forward's copy dies after the projection.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[QKV:.*]] = mt.linear {{.*}} -> tensor<1x8x192xf32>
// CHECK: %[[ATT:.*]] = mt.attention %[[QKV]]
// CHECK: mt.linear %[[ATT]]
// CHECK: mt.cross_entropy_grad
// CHECK: %[[AGAIN:.*]] = mt.attention %[[QKV]]
// CHECK-NOT: mt.attention_grad {{.*}}, %[[QKV]], %[[ATT]]
// CHECK: mt.linear_grad_weight {{.*}}, %[[AGAIN]]
// CHECK: mt.attention_grad {{.*}}, %[[QKV]], %[[AGAIN]]
