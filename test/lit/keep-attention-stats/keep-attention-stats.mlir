// RUN: mt-opt %s -split-input-file -mt-keep-attention-stats | FileCheck %s

// The forward keeps its rows' log-sum-exp, [B, heads, S] in the loss's type, and the
// gradient reads them.
// CHECK-LABEL: func.func @step
// CHECK: %[[O:.*]], %[[STATS:.*]] = mt.attention %arg0 {causal, heads = 2 : i64, keep_stats, mt.layer = 0 : i64} : (tensor<2x4x24xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x2x4xf32>)
// CHECK: mt.linear %[[O]]
// CHECK: mt.attention_grad %arg1, %arg0, %[[O]], %[[STATS]] {causal, heads = 2 : i64} : (tensor<2x4x8xbf16>, tensor<2x4x24xbf16>, tensor<2x4x8xbf16>, tensor<2x2x4xf32>) -> tensor<2x4x24xbf16>
func.func @step(%qkv: tensor<2x4x24xbf16>, %dy: tensor<2x4x8xbf16>, %w: tensor<8x8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4x24xbf16>) {
  %o = mt.attention %qkv {causal, heads = 2 : i64, mt.layer = 0 : i64} : (tensor<2x4x24xbf16>) -> tensor<2x4x8xbf16>
  %y = mt.linear %o, %w : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xbf16>
  %d = mt.attention_grad %dy, %qkv, %o {causal, heads = 2 : i64} : (tensor<2x4x8xbf16>, tensor<2x4x24xbf16>, tensor<2x4x8xbf16>) -> tensor<2x4x24xbf16>
  return %y, %d : tensor<2x4x8xbf16>, tensor<2x4x24xbf16>
}

// -----

// An attention nobody differentiates keeps nothing; a gradient whose output comes from
// elsewhere (a pipeline stage's stash) has nothing to take.
// CHECK-LABEL: func.func @nothing_to_keep
// CHECK: mt.attention %arg0 {heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
// CHECK: mt.attention_grad %arg1, %arg0, %arg2 {heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
func.func @nothing_to_keep(%qkv: tensor<2x4x24xf32>, %dy: tensor<2x4x8xf32>, %stashed: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x24xf32>) {
  %o = mt.attention %qkv {heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %d = mt.attention_grad %dy, %qkv, %stashed {heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
  return %o, %d : tensor<2x4x8xf32>, tensor<2x4x24xf32>
}

// -----

// Two gradients of one forward (a recomputed layer's and another reader's) share its
// statistics; grouped-query heads count the query heads.
// CHECK-LABEL: func.func @shared
// CHECK: %[[O:.*]], %[[STATS:.*]] = mt.attention %arg0 {heads = 4 : i64, keep_stats, kv_heads = 2 : i64} : (tensor<2x4x32xf64>) -> (tensor<2x4x16xf64>, tensor<2x4x4xf64>)
// CHECK-COUNT-2: mt.attention_grad %arg1, %arg0, %[[O]], %[[STATS]]
func.func @shared(%qkv: tensor<2x4x32xf64>, %dy: tensor<2x4x16xf64>) -> (tensor<2x4x32xf64>, tensor<2x4x32xf64>) {
  %o = mt.attention %qkv {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x32xf64>) -> tensor<2x4x16xf64>
  %a = mt.attention_grad %dy, %qkv, %o {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x16xf64>, tensor<2x4x32xf64>, tensor<2x4x16xf64>) -> tensor<2x4x32xf64>
  %b = mt.attention_grad %dy, %qkv, %o {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x16xf64>, tensor<2x4x32xf64>, tensor<2x4x16xf64>) -> tensor<2x4x32xf64>
  return %a, %b : tensor<2x4x32xf64>, tensor<2x4x32xf64>
}

// -----

// A gradient of other attention over the same qkv and output (here not causal) is not
// this one's: its rows are other rows, and nothing is kept.
// CHECK-LABEL: func.func @other_attention
// CHECK-NOT: keep_stats
// CHECK: mt.attention_grad %arg1, %arg0, %{{.*}} {heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
func.func @other_attention(%qkv: tensor<2x4x24xf32>, %dy: tensor<2x4x8xf32>) -> tensor<2x4x24xf32> {
  %o = mt.attention %qkv {causal, heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %d = mt.attention_grad %dy, %qkv, %o {heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
  return %d : tensor<2x4x24xf32>
}

// -----

// A gradient of another window than the forward's is not its gradient: nothing to keep.
// CHECK-LABEL: func.func @other_window
// CHECK: mt.attention %arg0 {causal, heads = 2 : i64, window = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
// CHECK: mt.attention_grad %arg1, %arg0, %{{.*}} {causal, heads = 2 : i64, window = 3 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
func.func @other_window(%qkv: tensor<2x4x24xf32>, %dy: tensor<2x4x8xf32>) -> tensor<2x4x24xf32> {
  %o = mt.attention %qkv {causal, heads = 2 : i64, window = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %d = mt.attention_grad %dy, %qkv, %o {causal, heads = 2 : i64, window = 3 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
  return %d : tensor<2x4x24xf32>
}
