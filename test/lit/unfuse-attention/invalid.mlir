// RUN: mt-opt %s -mt-unfuse-attention -verify-diagnostics

// An attention dropout needs its stream (mt-expand numbers them).
func.func @forward(%qkv: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> {
  // expected-error@+1 {{mt-unfuse-attention: the attention dropout has no stream (run mt-expand first)}}
  %o = mt.attention %qkv {causal, dropout = 1.0e-01 : f64, heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}
