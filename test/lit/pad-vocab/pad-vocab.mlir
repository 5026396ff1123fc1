// RUN: mt-opt %s -split-input-file -mt-pad-vocab="multiple=8" | FileCheck %s

// A 30-row table becomes 32 rows that remember the 30 real ones; the tied output layer
// follows, and the loss keeps only the 30 real classes.
// CHECK-LABEL: func.func @tied
// CHECK: mt.param "wte" normal(2.000000e-02) {vocab_rows = 30 : i64} : tensor<32x8xf32>
// CHECK: mt.embedding {{.*}} : (tensor<32x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
// CHECK: mt.linear {{.*}} -> tensor<?x?x32xf32>
// CHECK: mt.cross_entropy %{{.*}}, %{{.*}} {num_classes = 30 : i64} : (tensor<?x?x32xf32>, tensor<?x?xi32>) -> tensor<f32>
func.func @tied(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
  %wte = mt.param "wte" normal(2.0e-02) : tensor<30x8xf32>
  %e = mt.embedding %wte, %tokens : (tensor<30x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  %logits = mt.linear %e, %wte : (tensor<?x?x8xf32>, tensor<30x8xf32>) -> tensor<?x?x30xf32>
  %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x30xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// An untied output layer (LLaMA's lm_head) is padded like the embedding, its bias too;
// a linear that is not the loss's (the 30-wide projection) keeps its rows.
// CHECK-LABEL: func.func @untied
// CHECK: mt.param "emb" normal(2.000000e-02) {vocab_rows = 30 : i64} : tensor<32x8xf32>
// CHECK: mt.param "proj" normal(2.000000e-02) : tensor<30x8xf32>
// CHECK: mt.param "head" normal(2.000000e-02) {vocab_rows = 30 : i64} : tensor<32x30xf32>
// CHECK: mt.param "head.bias" zeros {vocab_rows = 30 : i64} : tensor<32xf32>
// CHECK: mt.linear {{.*}} -> tensor<?x?x32xf32>
// CHECK: mt.cross_entropy %{{.*}}, %{{.*}} {num_classes = 30 : i64} : (tensor<?x?x32xf32>, tensor<?x?xi32>) -> tensor<f32>
func.func @untied(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
  %emb = mt.param "emb" normal(2.0e-02) : tensor<30x8xf32>
  %e = mt.embedding %emb, %tokens : (tensor<30x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  %proj = mt.param "proj" normal(2.0e-02) : tensor<30x8xf32>
  %p = mt.linear %e, %proj : (tensor<?x?x8xf32>, tensor<30x8xf32>) -> tensor<?x?x30xf32>
  %head = mt.param "head" normal(2.0e-02) : tensor<30x30xf32>
  %bias = mt.param "head.bias" zeros : tensor<30xf32>
  %logits = mt.linear %p, %head, %bias : (tensor<?x?x30xf32>, tensor<30x30xf32>, tensor<30xf32>) -> tensor<?x?x30xf32>
  %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x30xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A vocabulary already a multiple keeps its rows, and is marked as a table all the same
// (a checkpoint padded otherwise loads into it).
// CHECK-LABEL: func.func @even
// CHECK: mt.param "wte" normal(2.000000e-02) {vocab_rows = 32 : i64} : tensor<32x8xf32>
// CHECK-NOT: num_classes
// CHECK: return
func.func @even(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
  %wte = mt.param "wte" normal(2.0e-02) : tensor<32x8xf32>
  %e = mt.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  %logits = mt.linear %e, %wte : (tensor<?x?x8xf32>, tensor<32x8xf32>) -> tensor<?x?x32xf32>
  %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x32xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Padded twice (mtc tune pads a model again for each tp): the real rows stay the first.
// RUN: mt-opt %s -split-input-file -mt-pad-vocab="multiple=8" | mt-opt -split-input-file -mt-pad-vocab="multiple=12" | FileCheck %s --check-prefix=TWICE
// TWICE-LABEL: func.func @again
// TWICE: mt.param "wte" normal(2.000000e-02) {vocab_rows = 30 : i64} : tensor<36x8xf32>
// TWICE: num_classes = 30
func.func @again(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
  %wte = mt.param "wte" normal(2.0e-02) : tensor<30x8xf32>
  %e = mt.embedding %wte, %tokens : (tensor<30x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  %logits = mt.linear %e, %wte : (tensor<?x?x8xf32>, tensor<30x8xf32>) -> tensor<?x?x30xf32>
  %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x30xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

