// LLaMA 3 8B (Meta 2024): 32 layers, hidden 4096, 32 query heads of 128 sharing 8
// key/value heads (grouped-query attention), SwiGLU MLP of 14336, vocabulary 128256,
// 8192 positions, rotary embeddings with theta 500000. As llama2-7b otherwise:
// pre-RMSNorm (epsilon 1e-5), no biases, an untied output layer, no dropout; output
// projections initialised with std 0.02/sqrt(2·layers). 8,030,261,248 parameters.
// No batch size and no layout: those are compiler options.
module attributes {mt.model = "llama3-8b", mt.seq_length = 8192 : i64} {
  func.func private @block(%x: tensor<?x?x4096xf32>) -> tensor<?x?x4096xf32> {
    %n1_w = mt.param "input_layernorm.weight" ones : tensor<4096xf32>
    %n1 = mt.rms_norm %x, %n1_w : (tensor<?x?x4096xf32>, tensor<4096xf32>) -> tensor<?x?x4096xf32>
    %qkv_w = mt.param "self_attn.qkv.weight" normal(2.0e-02) : tensor<6144x4096xf32>
    %qkv = mt.linear %n1, %qkv_w : (tensor<?x?x4096xf32>, tensor<6144x4096xf32>) -> tensor<?x?x6144xf32>
    %rqkv = mt.rotary %qkv {heads = 32 : i64, kv_heads = 8 : i64, theta = 500000.0 : f64} : (tensor<?x?x6144xf32>) -> tensor<?x?x6144xf32>
    %att = mt.attention %rqkv {causal, heads = 32 : i64, kv_heads = 8 : i64} : (tensor<?x?x6144xf32>) -> tensor<?x?x4096xf32>
    %o_w = mt.param "self_attn.o_proj.weight" normal(2.5000000000e-03) : tensor<4096x4096xf32>
    %o = mt.linear %att, %o_w : (tensor<?x?x4096xf32>, tensor<4096x4096xf32>) -> tensor<?x?x4096xf32>
    %r1 = mt.add %x, %o : (tensor<?x?x4096xf32>, tensor<?x?x4096xf32>) -> tensor<?x?x4096xf32>
    %n2_w = mt.param "post_attention_layernorm.weight" ones : tensor<4096xf32>
    %n2 = mt.rms_norm %r1, %n2_w : (tensor<?x?x4096xf32>, tensor<4096xf32>) -> tensor<?x?x4096xf32>
    %gate_w = mt.param "mlp.gate_proj.weight" normal(2.0e-02) : tensor<14336x4096xf32>
    %gate = mt.linear %n2, %gate_w : (tensor<?x?x4096xf32>, tensor<14336x4096xf32>) -> tensor<?x?x14336xf32>
    %up_w = mt.param "mlp.up_proj.weight" normal(2.0e-02) : tensor<14336x4096xf32>
    %up = mt.linear %n2, %up_w : (tensor<?x?x4096xf32>, tensor<14336x4096xf32>) -> tensor<?x?x14336xf32>
    %act = mt.swiglu %gate, %up : (tensor<?x?x14336xf32>, tensor<?x?x14336xf32>) -> tensor<?x?x14336xf32>
    %down_w = mt.param "mlp.down_proj.weight" normal(2.5000000000e-03) : tensor<4096x14336xf32>
    %down = mt.linear %act, %down_w : (tensor<?x?x14336xf32>, tensor<4096x14336xf32>) -> tensor<?x?x4096xf32>
    %r2 = mt.add %r1, %down : (tensor<?x?x4096xf32>, tensor<?x?x4096xf32>) -> tensor<?x?x4096xf32>
    return %r2 : tensor<?x?x4096xf32>
  }

  func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
    %emb_w = mt.param "embed_tokens.weight" normal(2.0e-02) : tensor<128256x4096xf32>
    %x = mt.embedding %emb_w, %tokens : (tensor<128256x4096xf32>, tensor<?x?xi32>) -> tensor<?x?x4096xf32>
    %y = mt.repeat 32 @block(%x) {prefix = "layers"} : (tensor<?x?x4096xf32>) -> tensor<?x?x4096xf32>
    %norm_w = mt.param "norm.weight" ones : tensor<4096xf32>
    %yn = mt.rms_norm %y, %norm_w : (tensor<?x?x4096xf32>, tensor<4096xf32>) -> tensor<?x?x4096xf32>
    %head_w = mt.param "lm_head.weight" normal(2.0e-02) : tensor<128256x4096xf32>
    %logits = mt.linear %yn, %head_w : (tensor<?x?x4096xf32>, tensor<128256x4096xf32>) -> tensor<?x?x128256xf32>
    %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x128256xf32>, tensor<?x?xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
