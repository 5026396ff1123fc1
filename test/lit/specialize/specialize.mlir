// RUN: mt-opt %s -split-input-file -mt-specialize="micro-batch-size=4" | FileCheck %s --check-prefix=POS
// RUN: mt-opt %s -split-input-file -mt-specialize="micro-batch-size=2 seq-length=8" | FileCheck %s --check-prefix=SEQ

// Without seq-length the sequence is the position table's length (16); every result
// type is inferred again from the fixed inputs.
// POS-LABEL: func.func @forward(%{{.*}}: tensor<4x16xi32>, %{{.*}}: tensor<4x16xi32>) -> tensor<f32>
// POS: mt.embedding {{.*}} -> tensor<4x16x8xf32>
// POS: mt.position_embedding {{.*}} -> tensor<4x16x8xf32>
// POS: mt.linear {{.*}} -> tensor<4x16x32xf32>
// POS: mt.cross_entropy {{.*}}(tensor<4x16x32xf32>, tensor<4x16xi32>) -> tensor<f32>
// SEQ-LABEL: func.func @forward(%{{.*}}: tensor<2x8xi32>, %{{.*}}: tensor<2x8xi32>) -> tensor<f32>
// SEQ: mt.linear {{.*}} -> tensor<2x8x32xf32>
func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
  %wte = mt.param "wte" normal(2.0e-02) : tensor<32x8xf32>
  %wpe = mt.param "wpe" normal(2.0e-02) : tensor<16x8xf32>
  %e = mt.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  %x = mt.position_embedding %e, %wpe : (tensor<?x?x8xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  %logits = mt.linear %x, %wte : (tensor<?x?x8xf32>, tensor<32x8xf32>) -> tensor<?x?x32xf32>
  %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x32xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
