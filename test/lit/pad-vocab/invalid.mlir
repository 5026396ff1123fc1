// RUN: mt-opt %s -split-input-file -mt-pad-vocab="multiple=8" -verify-diagnostics

func.func @forward(%table: tensor<30x8xf32>, %tokens: tensor<?x?xi32>) -> tensor<?x?x8xf32> {
  // expected-error@+1 {{table must be an mt.param to be padded}}
  %e = mt.embedding %table, %tokens : (tensor<30x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  return %e : tensor<?x?x8xf32>
}

// -----

func.func @forward(%head: tensor<30x8xf32>, %x: tensor<?x?x8xf32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
  %logits = mt.linear %x, %head : (tensor<?x?x8xf32>, tensor<30x8xf32>) -> tensor<?x?x30xf32>
  // expected-error@+1 {{output layer's weight must be an mt.param to be padded}}
  %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x30xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
