// RUN: mt-opt %s -mt-recompute="granularity=selective" -verify-diagnostics

// Fused attention keeps no probabilities: there is nothing for selective recomputation.
func.func @train_step(%qkv: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> {
  // expected-error@+1 {{mt-recompute: selective recomputation re-runs unfused attention (run mt-unfuse-attention first)}}
  %o = mt.attention %qkv {causal, heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %one = arith.constant dense<1.0> : tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}
