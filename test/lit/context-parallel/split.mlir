// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-context-parallel="cp=2 dp=3" | FileCheck %s
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-context-parallel="cp=2" -mt-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-context-parallel="cp=2 tp=2" -mt-tensor-parallel="tp=2 cp=2 sequence-parallel=true" | FileCheck %s --check-prefix=TPSP
// RUN: mt-opt %models/llama-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-context-parallel="cp=4" | FileCheck %s --check-prefix=ROPE
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-context-parallel="cp=2 comm-type=p2p" -mt-autodiff | FileCheck %s --check-prefix=RING --implicit-check-not=shard.all_gather --implicit-check-not=mt.context_order

// gpt-tiny's 32 positions over cp = 2: each rank holds 16 of every sequence, chunks r
// and 3 − r of 4; every activation follows, and attention reads the whole sequence.
// CHECK: shard.grid @grid(shape = 3x2x1)
// CHECK: func.func @forward(%{{.*}}: tensor<2x16xi32>, %{{.*}}: tensor<2x16xi32>)
// CHECK: mt.position_embedding {{.*}}{context_parallel = 2 : i64} : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x64xf32>
// CHECK: %[[QKV:.*]] = mt.linear {{.*}} -> tensor<2x16x192xf32>
// CHECK: %[[ALL:.*]] = shard.all_gather %[[QKV]] on @grid grid_axes = [1] gather_axis = 0 {mt.layer = 0 : i64} : tensor<2x16x192xf32> -> tensor<4x16x192xf32>
// CHECK: %[[SEQ:.*]] = mt.context_order %[[ALL]] {context_parallel = 2 : i64, mt.layer = 0 : i64} : (tensor<4x16x192xf32>) -> tensor<2x32x192xf32>
// CHECK: mt.attention %[[SEQ]] {{.*}}context_parallel = 2 : i64{{.*}} : (tensor<2x32x192xf32>) -> tensor<2x16x64xf32>
// CHECK: mt.cross_entropy {{.*}} : (tensor<2x16x{{[0-9]+}}xf32>, tensor<2x16xi32>) -> tensor<f32>

// Backward: attention's gradient covers the whole sequence; the order's inverse and a
// reduce-scatter over the context-parallel axis sum each rank's share of it.
// GRAD-LABEL: func.func @train_step
// GRAD: %[[D:.*]] = mt.attention_grad {{.*}}context_parallel = 2 : i64{{.*}} -> tensor<2x32x192xf32>
// GRAD-NEXT: %[[BACK:.*]] = mt.context_order %[[D]] {context_parallel = 2 : i64, inverse} : (tensor<2x32x192xf32>) -> tensor<4x16x192xf32>
// GRAD-NEXT: shard.reduce_scatter %[[BACK]] on @grid grid_axes = [1] scatter_axis = 0 : tensor<4x16x192xf32> -> tensor<2x16x192xf32>

// With tensor and sequence parallelism: the stream holds 16 / 2 = 8 positions; the qkv
// linear is still column-parallel (its heads split) behind the gather.
// TPSP: shard.grid @grid(shape = 1x2x2)
// TPSP: mt.position_embedding {{.*}}{context_parallel = 2 : i64, sequence_parallel} : (tensor<2x8x64xf32>
// TPSP: shard.all_gather %{{.*}} on @grid grid_axes = [2] gather_axis = 1 {{.*}}: tensor<2x8x64xf32> -> tensor<2x16x64xf32>
// TPSP: %[[QKV:.*]] = mt.linear {{.*}} -> tensor<2x16x96xf32>
// TPSP: shard.all_gather %[[QKV]] on @grid grid_axes = [1] gather_axis = 0 {{.*}}: tensor<2x16x96xf32> -> tensor<4x16x96xf32>
// TPSP: mt.attention {{.*}}context_parallel = 2 : i64, {{.*}}head_parallel{{.*}} : (tensor<2x32x96xf32>) -> tensor<2x16x32xf32>
// TPSP: mt.dropout {{.*}}context_parallel = 2 : i64{{.*}}sequence_parallel{{.*}} : (tensor<2x8x64xf32>)

// LLaMA: rotary turns each rank's rows at their own positions, before the gather.
// ROPE: mt.rotary {{.*}}context_parallel = 4 : i64{{.*}} : (tensor<2x8x128xf32>) -> tensor<2x8x128xf32>
// ROPE-NEXT: shard.all_gather {{.*}} : tensor<2x8x128xf32> -> tensor<8x8x128xf32>
// ROPE-NEXT: mt.context_order {{.*}} : (tensor<8x8x128xf32>) -> tensor<2x32x128xf32>
// ROPE-NEXT: mt.attention {{.*}} : (tensor<2x32x128xf32>) -> tensor<2x8x64xf32>

// comm-type=p2p: attention keeps its share of the QKV and its rows' statistics, marked
// `ring` (the runtime brings the other shares round); no gather, no order.
// RING-LABEL: func.func @train_step
// RING: %{{.*}}, %[[STATS:.*]] = mt.attention %{{.*}} {{.*}}context_parallel = 2 : i64{{.*}}keep_stats{{.*}}ring{{.*}} : (tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x4x16xf32>)
// RING: mt.attention_grad {{.*}}context_parallel = 2 : i64{{.*}}ring{{.*}} -> tensor<2x16x192xf32>
