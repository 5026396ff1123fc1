// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-tensor-parallel="tp=2" -mt-autodiff | FileCheck %s --check-prefix=TP
// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-tensor-parallel="tp=2 sequence-parallel=true" -mt-autodiff | FileCheck %s --check-prefix=SP --implicit-check-not=shard.all_reduce

// Exactly two all-reduces per layer forward (after the attention projection and after
// the MLP) and two backward (the gradients of the two tp_copy), in gpt-tiny's two
// layers; plus the embedding's forward all-reduce and the output layer's backward one.
// TP-LABEL: func.func @train_step
// TP-COUNT-5: shard.all_reduce
// TP-NOT: shard.all_reduce
// TP: mt.cross_entropy_merge
// TP-COUNT-5: shard.all_reduce
// TP-NOT: shard.all_reduce
// TP: return

// Sequence parallelism: each all-reduce becomes an all-gather entering the region and a
// reduce-scatter leaving it; the stream between holds 32/2 = 16 positions per rank.
// SP-LABEL: func.func @train_step
// SP: mt.embedding {{.*}}{vocab_parallel}
// SP-NEXT: shard.reduce_scatter %{{.*}} on @grid grid_axes = [2] scatter_axis = 1 : tensor<2x32x64xf32> -> tensor<2x16x64xf32>
// SP: mt.position_embedding {{.*}}{sequence_parallel} : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x64xf32>
// SP: mt.dropout {{.*}}sequence_parallel
// SP: mt.param "h.0.ln_1.weight" ones {mt.layer = 0 : i64, tp_grad_reduce}
// SP: mt.layer_norm {{.*}} -> tensor<2x16x64xf32>
// SP: shard.all_gather %{{.*}} on @grid grid_axes = [2] gather_axis = 1 {{.*}}: tensor<2x16x64xf32> -> tensor<2x32x64xf32>
// SP: mt.attention
// SP: mt.param "h.0.attn.proj.bias" zeros {mt.layer = 0 : i64, tp_grad_reduce}
// SP: shard.reduce_scatter {{.*}} scatter_axis = 1 {{.*}}: tensor<2x32x64xf32> -> tensor<2x16x64xf32>
// SP: mt.cross_entropy_merge
// Backward: the gradient of each all-gather is a reduce-scatter, and the other way round.
// SP: shard.reduce_scatter {{.*}} scatter_axis = 1 : tensor<2x32x64xf32> -> tensor<2x16x64xf32>
// SP: shard.all_gather {{.*}} gather_axis = 1 : tensor<2x16x64xf32> -> tensor<2x32x64xf32>
// SP: return
