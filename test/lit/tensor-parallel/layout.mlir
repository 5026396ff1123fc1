// RUN: mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-tensor-parallel="tp=2 dp=4" | FileCheck %s

// Megatron's layout of gpt-tiny (hidden 64, 4 heads, vocabulary 512) on tp=2: local
// shard shapes, whole heads per rank, vocabulary-parallel embedding and loss.
// CHECK: shard.grid @grid(shape = 4x1x2)
// CHECK-LABEL: func.func @forward
// CHECK: %[[WTE:.*]] = mt.param "wte" normal(2.000000e-02) {global_shape = array<i64: 512, 64>, shard_dim = 0 : i64} : tensor<256x64xf32>
// CHECK: %[[EMB:.*]] = mt.embedding %[[WTE]], %arg0 {vocab_parallel} : (tensor<256x64xf32>, tensor<2x32xi32>) -> tensor<2x32x64xf32>
// CHECK: %[[X:.*]] = shard.all_reduce %[[EMB]] on @grid grid_axes = [2] : tensor<2x32x64xf32> -> tensor<2x32x64xf32>
// CHECK: mt.position_embedding %[[X]]
// Column-parallel QKV: rows (whole heads) split; its input enters the region by tp_copy.
// CHECK: %[[H1:.*]] = mt.layer_norm
// CHECK: %[[WQKV:.*]] = mt.param "h.0.attn.qkv.weight" normal(2.000000e-02) {global_shape = array<i64: 192, 64>, mt.layer = 0 : i64, shard_dim = 0 : i64} : tensor<96x64xf32>
// CHECK: %[[BQKV:.*]] = mt.param "h.0.attn.qkv.bias" zeros {global_shape = array<i64: 192>, mt.layer = 0 : i64, shard_dim = 0 : i64} : tensor<96xf32>
// CHECK: %[[IN:.*]] = mt.tp_copy %[[H1]] {grid = @grid, grid_axis = 2 : i64, mt.layer = 0 : i64}
// CHECK: %[[QKV:.*]] = mt.linear %[[IN]], %[[WQKV]], %[[BQKV]] {{.*}} -> tensor<2x32x96xf32>
// CHECK: %[[ATT:.*]] = mt.attention %[[QKV]] {causal, dropout = 1.000000e-01 : f64, head_parallel, heads = 2 : i64, mt.layer = 0 : i64, stream = 1 : i64} : (tensor<2x32x96xf32>) -> tensor<2x32x32xf32>
// Row-parallel projection: columns split, partial sums all-reduced, the bias added once.
// CHECK: %[[WO:.*]] = mt.param "h.0.attn.proj.weight" {{.*}}{global_shape = array<i64: 64, 64>, mt.layer = 0 : i64, shard_dim = 1 : i64} : tensor<64x32xf32>
// CHECK: %[[BO:.*]] = mt.param "h.0.attn.proj.bias" zeros {mt.layer = 0 : i64} : tensor<64xf32>
// CHECK: %[[PART:.*]] = mt.linear %[[ATT]], %[[WO]] {mt.layer = 0 : i64} : (tensor<2x32x32xf32>, tensor<64x32xf32>) -> tensor<2x32x64xf32>
// CHECK: %[[SUM:.*]] = shard.all_reduce %[[PART]] on @grid grid_axes = [2]
// CHECK: mt.bias_add %[[SUM]], %[[BO]]
// The MLP: fc column-parallel, GELU local, proj row-parallel.
// CHECK: mt.param "h.0.mlp.fc.weight" {{.*}}shard_dim = 0 : i64} : tensor<128x64xf32>
// CHECK: mt.gelu {{.*}} : (tensor<2x32x128xf32>) -> tensor<2x32x128xf32>
// CHECK: mt.param "h.0.mlp.proj.weight" {{.*}}shard_dim = 1 : i64} : tensor<64x128xf32>
// CHECK: shard.all_reduce
// The tied output layer is vocabulary-parallel; the loss merges every shard's statistics.
// CHECK: mt.param "ln_f.bias"
// CHECK: %[[Y:.*]] = mt.tp_copy
// CHECK: %[[LOGITS:.*]] = mt.linear %[[Y]], %[[WTE]] : (tensor<2x32x64xf32>, tensor<256x64xf32>) -> tensor<2x32x256xf32>
// CHECK: %[[STATS:.*]] = mt.cross_entropy_stats %[[LOGITS]], %arg1 {num_classes = 512 : i64} : {{.*}} -> tensor<3x64xf32>
// CHECK: %[[ALL:.*]] = shard.all_gather %[[STATS]] on @grid grid_axes = [2] gather_axis = 0 : tensor<3x64xf32> -> tensor<6x64xf32>
// CHECK: %[[LOSS:.*]] = mt.cross_entropy_merge %[[ALL]], %[[LOGITS]], %arg1 {num_classes = 512 : i64}
// CHECK: return %[[LOSS]]
