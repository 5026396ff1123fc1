// RUN: mt-opt %s -mt-pad-vocab="multiple=8" | FileCheck %s

// A 30-row table becomes 32 rows; the tied output layer follows, and the loss keeps
// only the 30 real classes.
// CHECK-LABEL: func.func @forward
// CHECK: mt.param "wte" normal(2.000000e-02) : tensor<32x8xf32>
// CHECK: mt.embedding {{.*}} : (tensor<32x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
// CHECK: mt.linear {{.*}} -> tensor<?x?x32xf32>
// CHECK: mt.cross_entropy %{{.*}}, %{{.*}} {num_classes = 30 : i64} : (tensor<?x?x32xf32>, tensor<?x?xi32>) -> tensor<f32>
func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
  %wte = mt.param "wte" normal(2.0e-02) : tensor<30x8xf32>
  %e = mt.embedding %wte, %tokens : (tensor<30x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  %logits = mt.linear %e, %wte : (tensor<?x?x8xf32>, tensor<30x8xf32>) -> tensor<?x?x30xf32>
  %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x30xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
