// RUN: mt-opt %s -mt-tensor-parallel="tp=2 sequence-parallel=true" | FileCheck %s --check-prefix=SEQUENCE

// A linear outside any parallel region stays replicated; under sequence parallelism it
// sees only this rank's block of the sequence, so its gradients are summed over the group.
// SEQUENCE-LABEL: func.func @replicated_linear
// SEQUENCE: mt.param "r.weight" normal(2.000000e-02) {tp_grad_reduce} : tensor<8x8xf32>
// SEQUENCE: mt.param "r.bias" zeros {tp_grad_reduce} : tensor<8xf32>
// SEQUENCE: %[[X:.*]] = shard.reduce_scatter {{.*}} -> tensor<2x2x8xf32>
// SEQUENCE: %[[R:.*]] = mt.linear %[[X]], {{.*}} : (tensor<2x2x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x2x8xf32>
// SEQUENCE: shard.all_gather %[[R]] {{.*}} : tensor<2x2x8xf32> -> tensor<2x4x8xf32>
func.func @replicated_linear(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
  %wte = mt.param "wte" normal(2.0e-02) : tensor<16x8xf32>
  %wr = mt.param "r.weight" normal(2.0e-02) : tensor<8x8xf32>
  %br = mt.param "r.bias" zeros : tensor<8xf32>
  %e = mt.embedding %wte, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %r = mt.linear %e, %wr, %br : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %logits = mt.linear %r, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %loss = mt.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
