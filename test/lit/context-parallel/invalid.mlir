// RUN: mt-opt %s -split-input-file -mt-context-parallel="cp=4" -verify-diagnostics
// RUN: echo "module {}" | not mt-opt -mt-context-parallel="cp=2 comm-type=ring" 2>&1 | FileCheck %s --check-prefix=COMM
// COMM: error: mt-context-parallel: comm-type must be all-gather or p2p, not 'ring'
// The grid made for one layout is refused by a pass asked for another.
// RUN: not mt-opt %models/gpt-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-context-parallel="cp=2" -mt-tensor-parallel="tp=2" 2>&1 | FileCheck %s --check-prefix=GRID
// GRID: error: the rank grid @grid must be dp x cp x tp = 1x1x2 for this layout

// expected-error@+1 {{mt-context-parallel: sequence length 20 is not divisible by 2·cp = 8 (the load-balanced split cuts it into 2·cp chunks)}}
func.func @forward(%tokens: tensor<2x20xi32>) -> tensor<2x20xi32> {
  return %tokens : tensor<2x20xi32>
}

// -----

// expected-error@+1 {{mt-context-parallel: argument 0 of type 'tensor<2x16x8xf32>' is not tokens or targets (integer [B, S])}}
func.func @forward(%x: tensor<2x16x8xf32>) -> tensor<2x16x8xf32> {
  return %x : tensor<2x16x8xf32>
}

// -----

func.func @forward(%tokens: tensor<2x16xi32>, %qkv: tensor<2x16x24xf32>) -> tensor<2x2x16x16xf32> {
  // expected-error@+1 {{mt-context-parallel: unfused attention cannot be split over the context-parallel group (use fused attention)}}
  %p = mt.attention_probs %qkv {causal, heads = 2 : i64} : (tensor<2x16x24xf32>) -> tensor<2x2x16x16xf32>
  return %p : tensor<2x2x16x16xf32>
}

// -----

// A mixture of experts' load-balancing loss counts the whole sequence's routing: the
// counts of the dispatch of a share's tokens, summed over the group.
func.func @forward(%tokens: tensor<2x16xi32>) -> tensor<2x16x2xf32> {
  %table = mt.param "table" normal(1.0) : tensor<8x4xf32>
  %logits = mt.embedding %table, %tokens : (tensor<8x4xf32>, tensor<2x16xi32>) -> tensor<2x16x4xf32>
  // expected-error@+1 {{'mt.moe_router' op its load-balancing loss over a share of the tokens needs the counts of an mt.moe_dispatch of its experts}}
  %gates, %experts = mt.moe_router %logits {topk = 2 : i64, aux_loss_coeff = 1.0e-02 : f64} : (tensor<2x16x4xf32>) -> (tensor<2x16x2xf32>, tensor<2x16x2xi32>)
  return %gates : tensor<2x16x2xf32>
}
