// A CI-sized Mistral (7B v0.1's form): llama-tiny's sizes (2 layers, hidden 64, 8 query
// heads of 8 sharing 4 key/value heads, SwiGLU MLP of 176, vocabulary 512, 32 positions,
// no biases, an untied output layer) with a sliding window of 6: each query sees its own
// position and the 5 before it (Mistral's sliding_window, Megatron's --window-size 5,0).
// Written by `mtc import-config` from a MistralForCausalLM config.json of these sizes;
// parameter names follow Hugging Face's, the fused QKV aside.
module attributes {mt.model = "mistral-tiny", mt.seq_length = 32 : i64} {
  func.func private @block(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
    %n1_w = mt.param "input_layernorm.weight" ones : tensor<64xf32>
    %n1 = mt.rms_norm %x, %n1_w {epsilon = 1.0e-05 : f64} : (tensor<?x?x64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
    %qkv_w = mt.param "self_attn.qkv.weight" normal(0.02) : tensor<128x64xf32>
    %qkv = mt.linear %n1, %qkv_w : (tensor<?x?x64xf32>, tensor<128x64xf32>) -> tensor<?x?x128xf32>
    %rqkv = mt.rotary %qkv {heads = 8 : i64, kv_heads = 4 : i64, theta = 10000.0 : f64} : (tensor<?x?x128xf32>) -> tensor<?x?x128xf32>
    %att = mt.attention %rqkv {causal, heads = 8 : i64, kv_heads = 4 : i64, window = 6 : i64} : (tensor<?x?x128xf32>) -> tensor<?x?x64xf32>
    %o_w = mt.param "self_attn.o_proj.weight" normal(0.01) : tensor<64x64xf32>
    %o = mt.linear %att, %o_w : (tensor<?x?x64xf32>, tensor<64x64xf32>) -> tensor<?x?x64xf32>
    %r1 = mt.add %x, %o : (tensor<?x?x64xf32>, tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
    %n2_w = mt.param "post_attention_layernorm.weight" ones : tensor<64xf32>
    %n2 = mt.rms_norm %r1, %n2_w {epsilon = 1.0e-05 : f64} : (tensor<?x?x64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
    %gate_w = mt.param "mlp.gate_proj.weight" normal(0.02) : tensor<176x64xf32>
    %gate = mt.linear %n2, %gate_w : (tensor<?x?x64xf32>, tensor<176x64xf32>) -> tensor<?x?x176xf32>
    %up_w = mt.param "mlp.up_proj.weight" normal(0.02) : tensor<176x64xf32>
    %up = mt.linear %n2, %up_w : (tensor<?x?x64xf32>, tensor<176x64xf32>) -> tensor<?x?x176xf32>
    %act = mt.swiglu %gate, %up : (tensor<?x?x176xf32>, tensor<?x?x176xf32>) -> tensor<?x?x176xf32>
    %down_w = mt.param "mlp.down_proj.weight" normal(0.01) : tensor<64x176xf32>
    %mlp = mt.linear %act, %down_w : (tensor<?x?x176xf32>, tensor<64x176xf32>) -> tensor<?x?x64xf32>
    %r2 = mt.add %r1, %mlp : (tensor<?x?x64xf32>, tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
    return %r2 : tensor<?x?x64xf32>
  }

  func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
    %emb_w = mt.param "embed_tokens.weight" normal(0.02) : tensor<512x64xf32>
    %x = mt.embedding %emb_w, %tokens : (tensor<512x64xf32>, tensor<?x?xi32>) -> tensor<?x?x64xf32>
    %y = mt.repeat 2 @block(%x) {prefix = "layers"} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
    %norm_w = mt.param "norm.weight" ones : tensor<64xf32>
    %yn = mt.rms_norm %y, %norm_w {epsilon = 1.0e-05 : f64} : (tensor<?x?x64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
    %head_w = mt.param "lm_head.weight" normal(0.02) : tensor<512x64xf32>
    %logits = mt.linear %yn, %head_w : (tensor<?x?x64xf32>, tensor<512x64xf32>) -> tensor<?x?x512xf32>
    %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x512xf32>, tensor<?x?xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
