// RUN: mt-opt %s -split-input-file -mt-unfuse-attention -verify-diagnostics

// An attention dropout needs its stream (mt-expand numbers them).
func.func @forward(%qkv: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> {
  // expected-error@+1 {{mt-unfuse-attention: the attention dropout has no stream (run mt-expand first)}}
  %o = mt.attention %qkv {causal, dropout = 1.0e-01 : f64, heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Statistics kept for a gradient have no place in the chain (it is unfused before
// autodiff, which differentiates the chain).
func.func @kept(%qkv: tensor<2x4x24xf32>) -> tensor<2x2x4xf32> {
  // expected-error@+1 {{mt-unfuse-attention: the attention keeps its row statistics for a gradient (unfuse before mt-autodiff)}}
  %o, %s = mt.attention %qkv {heads = 2 : i64, keep_stats} : (tensor<2x4x24xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
  return %s : tensor<2x2x4xf32>
}
