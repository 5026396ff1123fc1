// RUN: mt-opt %s | mt-opt | FileCheck %s
// RUN: mt-opt %s -mlir-print-op-generic | mt-opt | FileCheck %s

// CHECK-LABEL: func.func @param()
// CHECK-NEXT: mt.param "wte" normal(2.000000e-02) : tensor<256x64xf32>
// CHECK-NEXT: mt.param "ln.weight" ones : tensor<64xbf16>
// CHECK-NEXT: mt.param "ln.bias" zeros : tensor<64xf16>
// CHECK-NEXT: mt.param "scale" zeros : tensor<f64>
// CHECK-NEXT: mt.param "h.0.mlp.fc.weight" normal(1.000000e+00) {tag} : tensor<2x3x4x5xf64>
// CHECK-NEXT: mt.param "emb" normal(2.000000e-02) {global_shape = array<i64: 256, 64>, shard_dim = 0 : i64, vocab_rows = 250 : i64} : tensor<128x64xf32>
// CHECK-NEXT: return
func.func @param() {
  %0 = mt.param "wte" normal(2.0e-02) : tensor<256x64xf32>
  %1 = mt.param "ln.weight" ones : tensor<64xbf16>
  %2 = mt.param "ln.bias" zeros : tensor<64xf16>
  %3 = mt.param "scale" zeros : tensor<f64>
  %4 = mt.param "h.0.mlp.fc.weight" normal(1.0) {tag} : tensor<2x3x4x5xf64>
  %5 = mt.param "emb" normal(2.0e-02) {global_shape = array<i64: 256, 64>, shard_dim = 0 : i64, vocab_rows = 250 : i64} : tensor<128x64xf32>
  return
}

// CHECK-LABEL: func.func @param_grad(
// CHECK-SAME: %[[G:[^:]+]]: tensor<256x64xf32>, %[[S:[^:]+]]: tensor<bf16>)
// CHECK-NEXT: mt.param_grad "wte", %[[G]] : tensor<256x64xf32>
// CHECK-NEXT: mt.param_grad "h.0.ln_1.weight", %[[S]] : tensor<bf16>
func.func @param_grad(%g: tensor<256x64xf32>, %s: tensor<bf16>) {
  mt.param_grad "wte", %g : tensor<256x64xf32>
  mt.param_grad "h.0.ln_1.weight", %s : tensor<bf16>
  return
}

// CHECK-LABEL: func.func private @block(
// CHECK: mt.gelu
func.func private @block(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
  %g = mt.gelu %x : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  return %g : tensor<?x?x64xf32>
}

// CHECK-LABEL: func.func private @static_block(tensor<2x16x64xbf16>) -> tensor<2x16x64xbf16>
func.func private @static_block(%x: tensor<2x16x64xbf16>) -> tensor<2x16x64xbf16>

// CHECK-LABEL: func.func @repeat(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?x64xf32>, %[[Y:[^:]+]]: tensor<2x16x64xbf16>)
// CHECK: %[[R0:.+]] = mt.repeat 12 @block(%[[X]]) {prefix = "h"} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
// CHECK: %[[R1:.+]] = mt.repeat 1 @static_block(%[[Y]]) {prefix = "layers"} : (tensor<2x16x64xbf16>) -> tensor<2x16x64xbf16>
// CHECK: return %[[R0]], %[[R1]]
func.func @repeat(%x: tensor<?x?x64xf32>, %y: tensor<2x16x64xbf16>) -> (tensor<?x?x64xf32>, tensor<2x16x64xbf16>) {
  %0 = mt.repeat 12 @block(%x) {prefix = "h"} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  %1 = mt.repeat 1 @static_block(%y) {prefix = "layers"} : (tensor<2x16x64xbf16>) -> tensor<2x16x64xbf16>
  return %0, %1 : tensor<?x?x64xf32>, tensor<2x16x64xbf16>
}

// CHECK-LABEL: func.func @embedding(
// CHECK-SAME: %[[WTE:[^:]+]]: tensor<256x64xf32>, %[[IDS:[^:]+]]: tensor<?x?xi32>, %[[TAB:[^:]+]]: tensor<50304x768xbf16>, %[[IDS2:[^:]+]]: tensor<4x1024xi64>)
// CHECK: %[[E0:.+]] = mt.embedding %[[WTE]], %[[IDS]] : (tensor<256x64xf32>, tensor<?x?xi32>) -> tensor<?x?x64xf32>
// CHECK: %[[E1:.+]] = mt.embedding %[[TAB]], %[[IDS2]] : (tensor<50304x768xbf16>, tensor<4x1024xi64>) -> tensor<4x1024x768xbf16>
// CHECK: return %[[E0]], %[[E1]]
func.func @embedding(%wte: tensor<256x64xf32>, %ids: tensor<?x?xi32>, %tab: tensor<50304x768xbf16>, %ids2: tensor<4x1024xi64>) -> (tensor<?x?x64xf32>, tensor<4x1024x768xbf16>) {
  %0 = mt.embedding %wte, %ids : (tensor<256x64xf32>, tensor<?x?xi32>) -> tensor<?x?x64xf32>
  %1 = mt.embedding %tab, %ids2 : (tensor<50304x768xbf16>, tensor<4x1024xi64>) -> tensor<4x1024x768xbf16>
  return %0, %1 : tensor<?x?x64xf32>, tensor<4x1024x768xbf16>
}

// The static sequence may use every position of the table.
// CHECK-LABEL: func.func @position_embedding(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?x64xf32>, %[[WPE:[^:]+]]: tensor<32x64xf32>, %[[Y:[^:]+]]: tensor<2x32x64xf32>, %[[Z:[^:]+]]: tensor<2x16x?xf32>)
// CHECK: %[[P0:.+]] = mt.position_embedding %[[X]], %[[WPE]] : (tensor<?x?x64xf32>, tensor<32x64xf32>) -> tensor<?x?x64xf32>
// CHECK: %[[P1:.+]] = mt.position_embedding %[[Y]], %[[WPE]] : (tensor<2x32x64xf32>, tensor<32x64xf32>) -> tensor<2x32x64xf32>
// CHECK: %[[P2:.+]] = mt.position_embedding %[[Z]], %[[WPE]] : (tensor<2x16x?xf32>, tensor<32x64xf32>) -> tensor<2x16x?xf32>
// CHECK: return %[[P0]], %[[P1]], %[[P2]]
func.func @position_embedding(%x: tensor<?x?x64xf32>, %wpe: tensor<32x64xf32>, %y: tensor<2x32x64xf32>, %z: tensor<2x16x?xf32>) -> (tensor<?x?x64xf32>, tensor<2x32x64xf32>, tensor<2x16x?xf32>) {
  %0 = mt.position_embedding %x, %wpe : (tensor<?x?x64xf32>, tensor<32x64xf32>) -> tensor<?x?x64xf32>
  %1 = mt.position_embedding %y, %wpe : (tensor<2x32x64xf32>, tensor<32x64xf32>) -> tensor<2x32x64xf32>
  %2 = mt.position_embedding %z, %wpe : (tensor<2x16x?xf32>, tensor<32x64xf32>) -> tensor<2x16x?xf32>
  return %0, %1, %2 : tensor<?x?x64xf32>, tensor<2x32x64xf32>, tensor<2x16x?xf32>
}

// The default epsilon is not printed.
// CHECK-LABEL: func.func @layer_norm(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?x64xf32>, %[[W:[^:]+]]: tensor<64xf32>, %[[B:[^:]+]]: tensor<64xf32>, %[[Y:[^:]+]]: tensor<8x64xf16>, %[[W16:[^:]+]]: tensor<64xf16>)
// CHECK: %[[N0:.+]] = mt.layer_norm %[[X]], %[[W]], %[[B]] : (tensor<?x?x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
// CHECK: %[[N1:.+]] = mt.layer_norm %[[Y]], %[[W16]], %[[W16]] {epsilon = 1.000000e-03 : f64} : (tensor<8x64xf16>, tensor<64xf16>, tensor<64xf16>) -> tensor<8x64xf16>
// CHECK: %[[N2:.+]] = mt.layer_norm %[[Y]], %[[W16]], %[[W16]] : (tensor<8x64xf16>, tensor<64xf16>, tensor<64xf16>) -> tensor<8x64xf16>
// CHECK: return %[[N0]], %[[N1]], %[[N2]]
func.func @layer_norm(%x: tensor<?x?x64xf32>, %w: tensor<64xf32>, %b: tensor<64xf32>, %y: tensor<8x64xf16>, %w16: tensor<64xf16>) -> (tensor<?x?x64xf32>, tensor<8x64xf16>, tensor<8x64xf16>) {
  %0 = mt.layer_norm %x, %w, %b : (tensor<?x?x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
  %1 = mt.layer_norm %y, %w16, %w16 {epsilon = 1.0e-03 : f64} : (tensor<8x64xf16>, tensor<64xf16>, tensor<64xf16>) -> tensor<8x64xf16>
  %2 = mt.layer_norm %y, %w16, %w16 {epsilon = 1.0e-05 : f64} : (tensor<8x64xf16>, tensor<64xf16>, tensor<64xf16>) -> tensor<8x64xf16>
  return %0, %1, %2 : tensor<?x?x64xf32>, tensor<8x64xf16>, tensor<8x64xf16>
}

// With a bias, without one (a tied output embedding), and with a dynamic feature dimension.
// CHECK-LABEL: func.func @linear(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?x64xf32>, %[[W:[^:]+]]: tensor<192x64xf32>, %[[B:[^:]+]]: tensor<192xf32>, %[[Y:[^:]+]]: tensor<8x64xf32>, %[[WTE:[^:]+]]: tensor<256x64xf32>, %[[Z:[^:]+]]: tensor<4x?xf32>)
// CHECK: %[[L0:.+]] = mt.linear %[[X]], %[[W]], %[[B]] : (tensor<?x?x64xf32>, tensor<192x64xf32>, tensor<192xf32>) -> tensor<?x?x192xf32>
// CHECK: %[[L1:.+]] = mt.linear %[[Y]], %[[WTE]] : (tensor<8x64xf32>, tensor<256x64xf32>) -> tensor<8x256xf32>
// CHECK: %[[L2:.+]] = mt.linear %[[Z]], %[[WTE]] : (tensor<4x?xf32>, tensor<256x64xf32>) -> tensor<4x256xf32>
// CHECK: return %[[L0]], %[[L1]], %[[L2]]
func.func @linear(%x: tensor<?x?x64xf32>, %w: tensor<192x64xf32>, %b: tensor<192xf32>, %y: tensor<8x64xf32>, %wte: tensor<256x64xf32>, %z: tensor<4x?xf32>) -> (tensor<?x?x192xf32>, tensor<8x256xf32>, tensor<4x256xf32>) {
  %0 = mt.linear %x, %w, %b : (tensor<?x?x64xf32>, tensor<192x64xf32>, tensor<192xf32>) -> tensor<?x?x192xf32>
  %1 = mt.linear %y, %wte : (tensor<8x64xf32>, tensor<256x64xf32>) -> tensor<8x256xf32>
  %2 = mt.linear %z, %wte : (tensor<4x?xf32>, tensor<256x64xf32>) -> tensor<4x256xf32>
  return %0, %1, %2 : tensor<?x?x192xf32>, tensor<8x256xf32>, tensor<4x256xf32>
}

// The result takes the better-known of each pair of dimensions.
// CHECK-LABEL: func.func @add(
// CHECK-SAME: %[[A:[^:]+]]: tensor<?x?x64xf32>, %[[B:[^:]+]]: tensor<?x?x64xf32>, %[[C:[^:]+]]: tensor<2x?x64xbf16>, %[[D:[^:]+]]: tensor<?x16x64xbf16>)
// CHECK: %[[S0:.+]] = mt.add %[[A]], %[[B]] : (tensor<?x?x64xf32>, tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
// CHECK: %[[S1:.+]] = mt.add %[[C]], %[[D]] : (tensor<2x?x64xbf16>, tensor<?x16x64xbf16>) -> tensor<2x16x64xbf16>
// CHECK: return %[[S0]], %[[S1]]
func.func @add(%a: tensor<?x?x64xf32>, %b: tensor<?x?x64xf32>, %c: tensor<2x?x64xbf16>, %d: tensor<?x16x64xbf16>) -> (tensor<?x?x64xf32>, tensor<2x16x64xbf16>) {
  %0 = mt.add %a, %b : (tensor<?x?x64xf32>, tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  %1 = mt.add %c, %d : (tensor<2x?x64xbf16>, tensor<?x16x64xbf16>) -> tensor<2x16x64xbf16>
  return %0, %1 : tensor<?x?x64xf32>, tensor<2x16x64xbf16>
}

// CHECK-LABEL: func.func @gelu(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?x256xf32>, %[[Y:[^:]+]]: tensor<4x3072xf64>)
// CHECK: %[[G0:.+]] = mt.gelu %[[X]] : (tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
// CHECK: %[[G1:.+]] = mt.gelu %[[Y]] : (tensor<4x3072xf64>) -> tensor<4x3072xf64>
// CHECK: %[[G2:.+]] = mt.gelu %[[X]] {approximate = "none"} : (tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
// CHECK: %[[G3:.+]] = mt.gelu %[[X]] : (tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
// CHECK: return %[[G0]], %[[G1]], %[[G2]], %[[G3]]
func.func @gelu(%x: tensor<?x?x256xf32>, %y: tensor<4x3072xf64>) -> (tensor<?x?x256xf32>, tensor<4x3072xf64>, tensor<?x?x256xf32>, tensor<?x?x256xf32>) {
  %0 = mt.gelu %x : (tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
  %1 = mt.gelu %y : (tensor<4x3072xf64>) -> tensor<4x3072xf64>
  %2 = mt.gelu %x {approximate = "none"} : (tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
  %3 = mt.gelu %x {approximate = "tanh"} : (tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
  return %0, %1, %2, %3 : tensor<?x?x256xf32>, tensor<4x3072xf64>, tensor<?x?x256xf32>, tensor<?x?x256xf32>
}

// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %[[QKV:[^:]+]]: tensor<?x?x192xf32>, %[[QKV2:[^:]+]]: tensor<2x16x2304xbf16>)
// CHECK: %[[A0:.+]] = mt.attention %[[QKV]] {causal, heads = 4 : i64} : (tensor<?x?x192xf32>) -> tensor<?x?x64xf32>
// CHECK: %[[A1:.+]] = mt.attention %[[QKV2]] {heads = 12 : i64} : (tensor<2x16x2304xbf16>) -> tensor<2x16x768xbf16>
// CHECK: mt.attention %[[QKV]] {causal, heads = 4 : i64, window = 5 : i64} : (tensor<?x?x192xf32>) -> tensor<?x?x64xf32>
// CHECK: mt.attention_probs %[[QKV]] {causal, heads = 4 : i64, window = 5 : i64} : (tensor<?x?x192xf32>) -> tensor<?x4x?x?xf32>
// CHECK: return %[[A0]], %[[A1]]
func.func @attention(%qkv: tensor<?x?x192xf32>, %qkv2: tensor<2x16x2304xbf16>) -> (tensor<?x?x64xf32>, tensor<2x16x768xbf16>) {
  %0 = mt.attention %qkv {causal, heads = 4 : i64} : (tensor<?x?x192xf32>) -> tensor<?x?x64xf32>
  %1 = mt.attention %qkv2 {heads = 12 : i64} : (tensor<2x16x2304xbf16>) -> tensor<2x16x768xbf16>
  // A sliding window: each query sees its own position and the 4 before it.
  %w = mt.attention %qkv {causal, heads = 4 : i64, window = 5 : i64} : (tensor<?x?x192xf32>) -> tensor<?x?x64xf32>
  %wp = mt.attention_probs %qkv {causal, heads = 4 : i64, window = 5 : i64} : (tensor<?x?x192xf32>) -> tensor<?x4x?x?xf32>
  return %0, %1 : tensor<?x?x64xf32>, tensor<2x16x768xbf16>
}

// CHECK-LABEL: func.func @dropout(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?x64xf32>, %[[Y:[^:]+]]: tensor<2x16x64xf16>)
// CHECK: %[[D0:.+]] = mt.dropout %[[X]] {rate = 1.000000e-01 : f64} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
// CHECK: %[[D1:.+]] = mt.dropout %[[Y]] {rate = 0.000000e+00 : f64, stream = 7 : i64} : (tensor<2x16x64xf16>) -> tensor<2x16x64xf16>
// CHECK: return %[[D0]], %[[D1]]
func.func @dropout(%x: tensor<?x?x64xf32>, %y: tensor<2x16x64xf16>) -> (tensor<?x?x64xf32>, tensor<2x16x64xf16>) {
  %0 = mt.dropout %x {rate = 0.1 : f64} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  %1 = mt.dropout %y {rate = 0.0 : f64, stream = 7 : i64} : (tensor<2x16x64xf16>) -> tensor<2x16x64xf16>
  return %0, %1 : tensor<?x?x64xf32>, tensor<2x16x64xf16>
}

// CHECK-LABEL: func.func @cross_entropy(
// CHECK-SAME: %[[LOGITS:[^:]+]]: tensor<?x?x256xf32>, %[[T:[^:]+]]: tensor<?x?xi32>, %[[LOGITS2:[^:]+]]: tensor<4x8x50304xbf16>, %[[T2:[^:]+]]: tensor<4x8xi64>)
// CHECK: %[[C0:.+]] = mt.cross_entropy %[[LOGITS]], %[[T]] : (tensor<?x?x256xf32>, tensor<?x?xi32>) -> tensor<f32>
// CHECK: %[[C1:.+]] = mt.cross_entropy %[[LOGITS2]], %[[T2]] {num_classes = 50257 : i64} : (tensor<4x8x50304xbf16>, tensor<4x8xi64>) -> tensor<f32>
// CHECK: return %[[C0]], %[[C1]]
func.func @cross_entropy(%logits: tensor<?x?x256xf32>, %targets: tensor<?x?xi32>, %logits2: tensor<4x8x50304xbf16>, %targets2: tensor<4x8xi64>) -> (tensor<f32>, tensor<f32>) {
  %0 = mt.cross_entropy %logits, %targets : (tensor<?x?x256xf32>, tensor<?x?xi32>) -> tensor<f32>
  %1 = mt.cross_entropy %logits2, %targets2 {num_classes = 50257 : i64} : (tensor<4x8x50304xbf16>, tensor<4x8xi64>) -> tensor<f32>
  return %0, %1 : tensor<f32>, tensor<f32>
}

// CHECK-LABEL: func.func @embedding_grad(
// CHECK-SAME: %[[G:[^:]+]]: tensor<?x?x64xf32>, %[[IDS:[^:]+]]: tensor<?x?xi32>, %[[G2:[^:]+]]: tensor<4x8x768xbf16>, %[[IDS2:[^:]+]]: tensor<4x8xi64>)
// CHECK: %[[E0:.+]] = mt.embedding_grad %[[G]], %[[IDS]] {num_embeddings = 256 : i64} : (tensor<?x?x64xf32>, tensor<?x?xi32>) -> tensor<256x64xf32>
// CHECK: %[[E1:.+]] = mt.embedding_grad %[[G2]], %[[IDS2]] {num_embeddings = 50304 : i64} : (tensor<4x8x768xbf16>, tensor<4x8xi64>) -> tensor<50304x768xbf16>
// CHECK: return %[[E0]], %[[E1]]
func.func @embedding_grad(%g: tensor<?x?x64xf32>, %ids: tensor<?x?xi32>, %g2: tensor<4x8x768xbf16>, %ids2: tensor<4x8xi64>) -> (tensor<256x64xf32>, tensor<50304x768xbf16>) {
  %0 = mt.embedding_grad %g, %ids {num_embeddings = 256 : i64} : (tensor<?x?x64xf32>, tensor<?x?xi32>) -> tensor<256x64xf32>
  %1 = mt.embedding_grad %g2, %ids2 {num_embeddings = 50304 : i64} : (tensor<4x8x768xbf16>, tensor<4x8xi64>) -> tensor<50304x768xbf16>
  return %0, %1 : tensor<256x64xf32>, tensor<50304x768xbf16>
}

// CHECK-LABEL: func.func @position_embedding_grad(
// CHECK-SAME: %[[G:[^:]+]]: tensor<?x?x64xf32>, %[[G2:[^:]+]]: tensor<2x32x64xf32>)
// CHECK: %[[P0:.+]] = mt.position_embedding_grad %[[G]] {num_positions = 32 : i64} : (tensor<?x?x64xf32>) -> tensor<32x64xf32>
// CHECK: %[[P1:.+]] = mt.position_embedding_grad %[[G2]] {num_positions = 32 : i64} : (tensor<2x32x64xf32>) -> tensor<32x64xf32>
// CHECK: return %[[P0]], %[[P1]]
func.func @position_embedding_grad(%g: tensor<?x?x64xf32>, %g2: tensor<2x32x64xf32>) -> (tensor<32x64xf32>, tensor<32x64xf32>) {
  %0 = mt.position_embedding_grad %g {num_positions = 32 : i64} : (tensor<?x?x64xf32>) -> tensor<32x64xf32>
  %1 = mt.position_embedding_grad %g2 {num_positions = 32 : i64} : (tensor<2x32x64xf32>) -> tensor<32x64xf32>
  return %0, %1 : tensor<32x64xf32>, tensor<32x64xf32>
}

// CHECK-LABEL: func.func @layer_norm_grad(
// CHECK-SAME: %[[G:[^:]+]]: tensor<?x?x64xf32>, %[[X:[^:]+]]: tensor<?x?x64xf32>, %[[W:[^:]+]]: tensor<64xf32>, %[[G2:[^:]+]]: tensor<2x?x64xf32>, %[[X2:[^:]+]]: tensor<?x16x64xf32>)
// CHECK: %[[DX:[^,]+]], %[[DW:[^,]+]], %[[DB:[^ ]+]] = mt.layer_norm_grad %[[G]], %[[X]], %[[W]] : (tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<64xf32>) -> (tensor<?x?x64xf32>, tensor<64xf32>, tensor<64xf32>)
// CHECK: %[[DX2:[^,]+]], {{.*}} = mt.layer_norm_grad %[[G2]], %[[X2]], %[[W]] {epsilon = 1.000000e-03 : f64} : (tensor<2x?x64xf32>, tensor<?x16x64xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
// CHECK: return %[[DX]], %[[DW]], %[[DB]], %[[DX2]]
func.func @layer_norm_grad(%g: tensor<?x?x64xf32>, %x: tensor<?x?x64xf32>, %w: tensor<64xf32>, %g2: tensor<2x?x64xf32>, %x2: tensor<?x16x64xf32>) -> (tensor<?x?x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) {
  %dx, %dw, %db = mt.layer_norm_grad %g, %x, %w : (tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<64xf32>) -> (tensor<?x?x64xf32>, tensor<64xf32>, tensor<64xf32>)
  %r:3 = mt.layer_norm_grad %g2, %x2, %w {epsilon = 1.0e-03 : f64} : (tensor<2x?x64xf32>, tensor<?x16x64xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
  return %dx, %dw, %db, %r#0 : tensor<?x?x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<2x16x64xf32>
}

// CHECK-LABEL: func.func @linear_grad_input(
// CHECK-SAME: %[[G:[^:]+]]: tensor<?x?x192xf32>, %[[W:[^:]+]]: tensor<192x64xf32>, %[[G2:[^:]+]]: tensor<8x256xf32>, %[[WTE:[^:]+]]: tensor<256x64xf32>)
// CHECK: %[[D0:.+]] = mt.linear_grad_input %[[G]], %[[W]] : (tensor<?x?x192xf32>, tensor<192x64xf32>) -> tensor<?x?x64xf32>
// CHECK: %[[D1:.+]] = mt.linear_grad_input %[[G2]], %[[WTE]] : (tensor<8x256xf32>, tensor<256x64xf32>) -> tensor<8x64xf32>
// CHECK: return %[[D0]], %[[D1]]
func.func @linear_grad_input(%g: tensor<?x?x192xf32>, %w: tensor<192x64xf32>, %g2: tensor<8x256xf32>, %wte: tensor<256x64xf32>) -> (tensor<?x?x64xf32>, tensor<8x64xf32>) {
  %0 = mt.linear_grad_input %g, %w : (tensor<?x?x192xf32>, tensor<192x64xf32>) -> tensor<?x?x64xf32>
  %1 = mt.linear_grad_input %g2, %wte : (tensor<8x256xf32>, tensor<256x64xf32>) -> tensor<8x64xf32>
  return %0, %1 : tensor<?x?x64xf32>, tensor<8x64xf32>
}

// CHECK-LABEL: func.func @linear_grad_weight(
// CHECK-SAME: %[[G:[^:]+]]: tensor<?x?x192xf32>, %[[X:[^:]+]]: tensor<?x?x64xf32>, %[[G2:[^:]+]]: tensor<8x256xf32>, %[[X2:[^:]+]]: tensor<8x64xf32>)
// CHECK: %[[D0:.+]] = mt.linear_grad_weight %[[G]], %[[X]] : (tensor<?x?x192xf32>, tensor<?x?x64xf32>) -> tensor<192x64xf32>
// CHECK: %[[D1:.+]] = mt.linear_grad_weight %[[G2]], %[[X2]] : (tensor<8x256xf32>, tensor<8x64xf32>) -> tensor<256x64xf32>
// CHECK: return %[[D0]], %[[D1]]
func.func @linear_grad_weight(%g: tensor<?x?x192xf32>, %x: tensor<?x?x64xf32>, %g2: tensor<8x256xf32>, %x2: tensor<8x64xf32>) -> (tensor<192x64xf32>, tensor<256x64xf32>) {
  %0 = mt.linear_grad_weight %g, %x : (tensor<?x?x192xf32>, tensor<?x?x64xf32>) -> tensor<192x64xf32>
  %1 = mt.linear_grad_weight %g2, %x2 : (tensor<8x256xf32>, tensor<8x64xf32>) -> tensor<256x64xf32>
  return %0, %1 : tensor<192x64xf32>, tensor<256x64xf32>
}

// CHECK-LABEL: func.func @bias_grad(
// CHECK-SAME: %[[G:[^:]+]]: tensor<?x?x192xf32>, %[[G2:[^:]+]]: tensor<8x256xbf16>)
// CHECK: %[[D0:.+]] = mt.bias_grad %[[G]] : (tensor<?x?x192xf32>) -> tensor<192xf32>
// CHECK: %[[D1:.+]] = mt.bias_grad %[[G2]] : (tensor<8x256xbf16>) -> tensor<256xbf16>
// CHECK: return %[[D0]], %[[D1]]
func.func @bias_grad(%g: tensor<?x?x192xf32>, %g2: tensor<8x256xbf16>) -> (tensor<192xf32>, tensor<256xbf16>) {
  %0 = mt.bias_grad %g : (tensor<?x?x192xf32>) -> tensor<192xf32>
  %1 = mt.bias_grad %g2 : (tensor<8x256xbf16>) -> tensor<256xbf16>
  return %0, %1 : tensor<192xf32>, tensor<256xbf16>
}

// CHECK-LABEL: func.func @gelu_grad(
// CHECK-SAME: %[[G:[^:]+]]: tensor<?x?x256xf32>, %[[X:[^:]+]]: tensor<?x?x256xf32>, %[[G2:[^:]+]]: tensor<4x?xf64>, %[[X2:[^:]+]]: tensor<?x3072xf64>)
// CHECK: %[[D0:.+]] = mt.gelu_grad %[[G]], %[[X]] : (tensor<?x?x256xf32>, tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
// CHECK: %[[D1:.+]] = mt.gelu_grad %[[G2]], %[[X2]] : (tensor<4x?xf64>, tensor<?x3072xf64>) -> tensor<4x3072xf64>
// CHECK: return %[[D0]], %[[D1]]
func.func @gelu_grad(%g: tensor<?x?x256xf32>, %x: tensor<?x?x256xf32>, %g2: tensor<4x?xf64>, %x2: tensor<?x3072xf64>) -> (tensor<?x?x256xf32>, tensor<4x3072xf64>) {
  %0 = mt.gelu_grad %g, %x : (tensor<?x?x256xf32>, tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
  %1 = mt.gelu_grad %g2, %x2 : (tensor<4x?xf64>, tensor<?x3072xf64>) -> tensor<4x3072xf64>
  return %0, %1 : tensor<?x?x256xf32>, tensor<4x3072xf64>
}

// CHECK-LABEL: func.func @attention_grad(
// CHECK-SAME: %[[G:[^:]+]]: tensor<?x?x64xf32>, %[[QKV:[^:]+]]: tensor<?x?x192xf32>, %[[OUT:[^:]+]]: tensor<?x?x64xf32>, %[[G2:[^:]+]]: tensor<2x16x768xbf16>, %[[QKV2:[^:]+]]: tensor<2x16x2304xbf16>, %[[OUT2:[^:]+]]: tensor<2x16x768xbf16>)
// CHECK: %[[D0:.+]] = mt.attention_grad %[[G]], %[[QKV]], %[[OUT]] {causal, heads = 4 : i64} : (tensor<?x?x64xf32>, tensor<?x?x192xf32>, tensor<?x?x64xf32>) -> tensor<?x?x192xf32>
// CHECK: %[[D1:.+]] = mt.attention_grad %[[G2]], %[[QKV2]], %[[OUT2]] {heads = 12 : i64} : (tensor<2x16x768xbf16>, tensor<2x16x2304xbf16>, tensor<2x16x768xbf16>) -> tensor<2x16x2304xbf16>
// CHECK: return %[[D0]], %[[D1]]
func.func @attention_grad(%g: tensor<?x?x64xf32>, %qkv: tensor<?x?x192xf32>, %out: tensor<?x?x64xf32>, %g2: tensor<2x16x768xbf16>, %qkv2: tensor<2x16x2304xbf16>, %out2: tensor<2x16x768xbf16>) -> (tensor<?x?x192xf32>, tensor<2x16x2304xbf16>) {
  %0 = mt.attention_grad %g, %qkv, %out {causal, heads = 4 : i64} : (tensor<?x?x64xf32>, tensor<?x?x192xf32>, tensor<?x?x64xf32>) -> tensor<?x?x192xf32>
  %1 = mt.attention_grad %g2, %qkv2, %out2 {heads = 12 : i64} : (tensor<2x16x768xbf16>, tensor<2x16x2304xbf16>, tensor<2x16x768xbf16>) -> tensor<2x16x2304xbf16>
  return %0, %1 : tensor<?x?x192xf32>, tensor<2x16x2304xbf16>
}

// CHECK-LABEL: func.func @cross_entropy_grad(
// CHECK-SAME: %[[DL:[^:]+]]: tensor<f32>, %[[LOGITS:[^:]+]]: tensor<?x?x256xf32>, %[[T:[^:]+]]: tensor<?x?xi32>, %[[DL2:[^:]+]]: tensor<f32>, %[[LOGITS2:[^:]+]]: tensor<4x8x50304xbf16>, %[[T2:[^:]+]]: tensor<4x8xi64>)
// CHECK: %[[D0:.+]] = mt.cross_entropy_grad %[[DL]], %[[LOGITS]], %[[T]] : (tensor<f32>, tensor<?x?x256xf32>, tensor<?x?xi32>) -> tensor<?x?x256xf32>
// CHECK: %[[D1:.+]] = mt.cross_entropy_grad %[[DL2]], %[[LOGITS2]], %[[T2]] {num_classes = 50257 : i64} : (tensor<f32>, tensor<4x8x50304xbf16>, tensor<4x8xi64>) -> tensor<4x8x50304xbf16>
// CHECK: return %[[D0]], %[[D1]]
func.func @cross_entropy_grad(%dl: tensor<f32>, %logits: tensor<?x?x256xf32>, %targets: tensor<?x?xi32>, %dl2: tensor<f32>, %logits2: tensor<4x8x50304xbf16>, %targets2: tensor<4x8xi64>) -> (tensor<?x?x256xf32>, tensor<4x8x50304xbf16>) {
  %0 = mt.cross_entropy_grad %dl, %logits, %targets : (tensor<f32>, tensor<?x?x256xf32>, tensor<?x?xi32>) -> tensor<?x?x256xf32>
  %1 = mt.cross_entropy_grad %dl2, %logits2, %targets2 {num_classes = 50257 : i64} : (tensor<f32>, tensor<4x8x50304xbf16>, tensor<4x8xi64>) -> tensor<4x8x50304xbf16>
  return %0, %1 : tensor<?x?x256xf32>, tensor<4x8x50304xbf16>
}

// CHECK-LABEL: func.func @silu(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?x256xf32>, %[[G:[^:]+]]: tensor<4x?xbf16>, %[[Y:[^:]+]]: tensor<?x3072xbf16>)
// CHECK: %[[S:.+]] = mt.silu %[[X]] : (tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
// CHECK: %[[D:.+]] = mt.silu_grad %[[G]], %[[Y]] : (tensor<4x?xbf16>, tensor<?x3072xbf16>) -> tensor<4x3072xbf16>
// CHECK: return %[[S]], %[[D]]
func.func @silu(%x: tensor<?x?x256xf32>, %g: tensor<4x?xbf16>, %y: tensor<?x3072xbf16>) -> (tensor<?x?x256xf32>, tensor<4x3072xbf16>) {
  %0 = mt.silu %x : (tensor<?x?x256xf32>) -> tensor<?x?x256xf32>
  %1 = mt.silu_grad %g, %y : (tensor<4x?xbf16>, tensor<?x3072xbf16>) -> tensor<4x3072xbf16>
  return %0, %1 : tensor<?x?x256xf32>, tensor<4x3072xbf16>
}
