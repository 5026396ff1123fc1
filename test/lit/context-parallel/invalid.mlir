// RUN: mt-opt %s -split-input-file -mt-context-parallel="cp=4" -verify-diagnostics

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
