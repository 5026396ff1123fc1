// RUN: mt-opt %s -mt-tensor-parallel="tp=4 sequence-parallel=true" -verify-diagnostics

// expected-error@+1 {{mt-tensor-parallel: sequence length 30 is not divisible by tp 4 (sequence parallelism splits it)}}
func.func @forward(%tokens: tensor<2x30xi32>) -> tensor<2x30xi32> {
  return %tokens : tensor<2x30xi32>
}
