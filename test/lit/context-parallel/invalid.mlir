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

