// GPT-3 XL 1.3B (Brown et al. 2020): 24 layers, hidden 2048, 16 heads, 2048 positions,
// vocabulary 51200.
// Pre-LayerNorm decoder blocks, learned positions, output embedding tied to the input
// embedding; output projections initialised with std 0.02/sqrt(2·layers).
// No batch size and no layout: those are compiler options.
module attributes {mt.model = "gpt3-1.3b"} {
  func.func private @block(%x: tensor<?x?x2048xf32>) -> tensor<?x?x2048xf32> {
    %ln1_w = mt.param "ln_1.weight" ones : tensor<2048xf32>
    %ln1_b = mt.param "ln_1.bias" zeros : tensor<2048xf32>
    %h1 = mt.layer_norm %x, %ln1_w, %ln1_b : (tensor<?x?x2048xf32>, tensor<2048xf32>, tensor<2048xf32>) -> tensor<?x?x2048xf32>
    %qkv_w = mt.param "attn.qkv.weight" normal(2.0e-02) : tensor<6144x2048xf32>
    %qkv_b = mt.param "attn.qkv.bias" zeros : tensor<6144xf32>
    %qkv = mt.linear %h1, %qkv_w, %qkv_b : (tensor<?x?x2048xf32>, tensor<6144x2048xf32>, tensor<6144xf32>) -> tensor<?x?x6144xf32>
    %att = mt.attention %qkv {causal, dropout = 1.000000e-01 : f64, heads = 16 : i64} : (tensor<?x?x6144xf32>) -> tensor<?x?x2048xf32>
    %proj_w = mt.param "attn.proj.weight" normal(2.8867513459e-03) : tensor<2048x2048xf32>
    %proj_b = mt.param "attn.proj.bias" zeros : tensor<2048xf32>
    %proj = mt.linear %att, %proj_w, %proj_b : (tensor<?x?x2048xf32>, tensor<2048x2048xf32>, tensor<2048xf32>) -> tensor<?x?x2048xf32>
    %proj_d = mt.dropout %proj {rate = 0.1 : f64} : (tensor<?x?x2048xf32>) -> tensor<?x?x2048xf32>
    %r1 = mt.add %x, %proj_d : (tensor<?x?x2048xf32>, tensor<?x?x2048xf32>) -> tensor<?x?x2048xf32>
    %ln2_w = mt.param "ln_2.weight" ones : tensor<2048xf32>
    %ln2_b = mt.param "ln_2.bias" zeros : tensor<2048xf32>
    %h2 = mt.layer_norm %r1, %ln2_w, %ln2_b : (tensor<?x?x2048xf32>, tensor<2048xf32>, tensor<2048xf32>) -> tensor<?x?x2048xf32>
    %fc_w = mt.param "mlp.fc.weight" normal(2.0e-02) : tensor<8192x2048xf32>
    %fc_b = mt.param "mlp.fc.bias" zeros : tensor<8192xf32>
    %fc = mt.linear %h2, %fc_w, %fc_b : (tensor<?x?x2048xf32>, tensor<8192x2048xf32>, tensor<8192xf32>) -> tensor<?x?x8192xf32>
    %g = mt.gelu %fc : (tensor<?x?x8192xf32>) -> tensor<?x?x8192xf32>
    %out_w = mt.param "mlp.proj.weight" normal(2.8867513459e-03) : tensor<2048x8192xf32>
    %out_b = mt.param "mlp.proj.bias" zeros : tensor<2048xf32>
    %out = mt.linear %g, %out_w, %out_b : (tensor<?x?x8192xf32>, tensor<2048x8192xf32>, tensor<2048xf32>) -> tensor<?x?x2048xf32>
    %out_d = mt.dropout %out {rate = 0.1 : f64} : (tensor<?x?x2048xf32>) -> tensor<?x?x2048xf32>
    %r2 = mt.add %r1, %out_d : (tensor<?x?x2048xf32>, tensor<?x?x2048xf32>) -> tensor<?x?x2048xf32>
    return %r2 : tensor<?x?x2048xf32>
  }

  func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
    %wte = mt.param "wte" normal(2.0e-02) : tensor<51200x2048xf32>
    %wpe = mt.param "wpe" normal(2.0e-02) : tensor<2048x2048xf32>
    %tok = mt.embedding %wte, %tokens : (tensor<51200x2048xf32>, tensor<?x?xi32>) -> tensor<?x?x2048xf32>
    %emb = mt.position_embedding %tok, %wpe : (tensor<?x?x2048xf32>, tensor<2048x2048xf32>) -> tensor<?x?x2048xf32>
    %x = mt.dropout %emb {rate = 0.1 : f64} : (tensor<?x?x2048xf32>) -> tensor<?x?x2048xf32>
    %y = mt.repeat 24 @block(%x) {prefix = "h"} : (tensor<?x?x2048xf32>) -> tensor<?x?x2048xf32>
    %lnf_w = mt.param "ln_f.weight" ones : tensor<2048xf32>
    %lnf_b = mt.param "ln_f.bias" zeros : tensor<2048xf32>
    %yn = mt.layer_norm %y, %lnf_w, %lnf_b : (tensor<?x?x2048xf32>, tensor<2048xf32>, tensor<2048xf32>) -> tensor<?x?x2048xf32>
    %logits = mt.linear %yn, %wte : (tensor<?x?x2048xf32>, tensor<51200x2048xf32>) -> tensor<?x?x51200xf32>
    %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x51200xf32>, tensor<?x?xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
