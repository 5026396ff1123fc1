// LLaMA 3.1 405B (Meta 2024): 126 layers, hidden 16384, 128 query heads of 128 sharing 8
// key/value heads, SwiGLU MLP of 53248, vocabulary 128256, rotary embeddings with theta
// 500000 and LLaMA 3.1's frequency scaling (factor 8, low 1, high 4, over the original
// 8192 positions) for a context of 131072; otherwise as llama3-8b. 405,853,388,800
// parameters. The context is the model's; --seq-length trains on shorter sequences.
// No batch size and no layout: those are compiler options.
module attributes {mt.model = "llama3.1-405b", mt.seq_length = 131072 : i64} {
  func.func private @block(%x: tensor<?x?x16384xf32>) -> tensor<?x?x16384xf32> {
    %n1_w = mt.param "input_layernorm.weight" ones : tensor<16384xf32>
    %n1 = mt.rms_norm %x, %n1_w : (tensor<?x?x16384xf32>, tensor<16384xf32>) -> tensor<?x?x16384xf32>
    %qkv_w = mt.param "self_attn.qkv.weight" normal(2.0e-02) : tensor<18432x16384xf32>
    %qkv = mt.linear %n1, %qkv_w : (tensor<?x?x16384xf32>, tensor<18432x16384xf32>) -> tensor<?x?x18432xf32>
    %rqkv = mt.rotary %qkv {heads = 128 : i64, kv_heads = 8 : i64, theta = 500000.0 : f64, scaling_factor = 8.0 : f64} : (tensor<?x?x18432xf32>) -> tensor<?x?x18432xf32>
    %att = mt.attention %rqkv {causal, heads = 128 : i64, kv_heads = 8 : i64} : (tensor<?x?x18432xf32>) -> tensor<?x?x16384xf32>
    %o_w = mt.param "self_attn.o_proj.weight" normal(1.2598815767e-03) : tensor<16384x16384xf32>
    %o = mt.linear %att, %o_w : (tensor<?x?x16384xf32>, tensor<16384x16384xf32>) -> tensor<?x?x16384xf32>
    %r1 = mt.add %x, %o : (tensor<?x?x16384xf32>, tensor<?x?x16384xf32>) -> tensor<?x?x16384xf32>
    %n2_w = mt.param "post_attention_layernorm.weight" ones : tensor<16384xf32>
    %n2 = mt.rms_norm %r1, %n2_w : (tensor<?x?x16384xf32>, tensor<16384xf32>) -> tensor<?x?x16384xf32>
    %gate_w = mt.param "mlp.gate_proj.weight" normal(2.0e-02) : tensor<53248x16384xf32>
    %gate = mt.linear %n2, %gate_w : (tensor<?x?x16384xf32>, tensor<53248x16384xf32>) -> tensor<?x?x53248xf32>
    %up_w = mt.param "mlp.up_proj.weight" normal(2.0e-02) : tensor<53248x16384xf32>
    %up = mt.linear %n2, %up_w : (tensor<?x?x16384xf32>, tensor<53248x16384xf32>) -> tensor<?x?x53248xf32>
    %act = mt.swiglu %gate, %up : (tensor<?x?x53248xf32>, tensor<?x?x53248xf32>) -> tensor<?x?x53248xf32>
    %down_w = mt.param "mlp.down_proj.weight" normal(1.2598815767e-03) : tensor<16384x53248xf32>
    %down = mt.linear %act, %down_w : (tensor<?x?x53248xf32>, tensor<16384x53248xf32>) -> tensor<?x?x16384xf32>
    %r2 = mt.add %r1, %down : (tensor<?x?x16384xf32>, tensor<?x?x16384xf32>) -> tensor<?x?x16384xf32>
    return %r2 : tensor<?x?x16384xf32>
  }

  func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
    %emb_w = mt.param "embed_tokens.weight" normal(2.0e-02) : tensor<128256x16384xf32>
    %x = mt.embedding %emb_w, %tokens : (tensor<128256x16384xf32>, tensor<?x?xi32>) -> tensor<?x?x16384xf32>
    %y = mt.repeat 126 @block(%x) {prefix = "layers"} : (tensor<?x?x16384xf32>) -> tensor<?x?x16384xf32>
    %norm_w = mt.param "norm.weight" ones : tensor<16384xf32>
    %yn = mt.rms_norm %y, %norm_w : (tensor<?x?x16384xf32>, tensor<16384xf32>) -> tensor<?x?x16384xf32>
    %head_w = mt.param "lm_head.weight" normal(2.0e-02) : tensor<128256x16384xf32>
    %logits = mt.linear %yn, %head_w : (tensor<?x?x16384xf32>, tensor<128256x16384xf32>) -> tensor<?x?x128256xf32>
    %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x128256xf32>, tensor<?x?xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
