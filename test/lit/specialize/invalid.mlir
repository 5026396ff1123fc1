// RUN: mt-opt %s -split-input-file -mt-specialize="micro-batch-size=2 seq-length=32" -verify-diagnostics

func.func @forward(%tokens: tensor<?x?xi32>) -> tensor<?x?x8xf32> {
  %wte = mt.param "wte" normal(2.0e-02) : tensor<32x8xf32>
  %wpe = mt.param "wpe" normal(2.0e-02) : tensor<16x8xf32>
  %e = mt.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  // expected-error@+1 {{mt.position_embedding: sequence length 32 exceeds the 16 positions of table tensor<16x8xf32>}}
  %x = mt.position_embedding %e, %wpe : (tensor<?x?x8xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  return %x : tensor<?x?x8xf32>
}

// -----

// expected-error@+1 {{mt-specialize: argument 0 of type 'tensor<3x?xi32>' has batch 3, not 2}}
func.func @forward(%tokens: tensor<3x?xi32>) -> tensor<3x?xi32> {
  return %tokens : tensor<3x?xi32>
}
