// RUN: mt-opt %s -split-input-file -mt-pad-vocab="multiple=8" -verify-diagnostics

func.func @forward(%table: tensor<30x8xf32>, %tokens: tensor<?x?xi32>) -> tensor<?x?x8xf32> {
  // expected-error@+1 {{table must be an mt.param to be padded}}
  %e = mt.embedding %table, %tokens : (tensor<30x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  return %e : tensor<?x?x8xf32>
}
