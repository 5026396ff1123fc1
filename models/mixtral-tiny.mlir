// A CI-sized Mixtral: the LLaMA-tiny decoder (2 layers, hidden 64, 8 query heads of 8
// sharing 4 key/value heads, rotary embeddings, RMSNorm, vocabulary 512, 32 positions)
// whose MLP is a sparse mixture of 4 SwiGLU experts of 128, each token routed to its top
// 2 by a linear router, the gates the softmax over those two logits, with the
// load-balancing loss (coefficient 0.02, as Mixtral trained). Each expert's weights are
// one [experts, ...] parameter (Hugging Face's MixtralForCausalLM keeps one per expert:
// block_sparse_moe.experts.N.w1/w2/w3). No batch size and no layout: compiler options.
module attributes {mt.model = "mixtral-tiny", mt.seq_length = 32 : i64} {
  func.func private @block(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
    %n1_w = mt.param "input_layernorm.weight" ones : tensor<64xf32>
    %n1 = mt.rms_norm %x, %n1_w : (tensor<?x?x64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
    %qkv_w = mt.param "self_attn.qkv.weight" normal(2.0e-02) : tensor<128x64xf32>
    %qkv = mt.linear %n1, %qkv_w : (tensor<?x?x64xf32>, tensor<128x64xf32>) -> tensor<?x?x128xf32>
    %rqkv = mt.rotary %qkv {heads = 8 : i64, kv_heads = 4 : i64} : (tensor<?x?x128xf32>) -> tensor<?x?x128xf32>
    %att = mt.attention %rqkv {causal, heads = 8 : i64, kv_heads = 4 : i64} : (tensor<?x?x128xf32>) -> tensor<?x?x64xf32>
    %o_w = mt.param "self_attn.o_proj.weight" normal(1.0e-02) : tensor<64x64xf32>
    %o = mt.linear %att, %o_w : (tensor<?x?x64xf32>, tensor<64x64xf32>) -> tensor<?x?x64xf32>
    %r1 = mt.add %x, %o : (tensor<?x?x64xf32>, tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
    %n2_w = mt.param "post_attention_layernorm.weight" ones : tensor<64xf32>
    %n2 = mt.rms_norm %r1, %n2_w : (tensor<?x?x64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
    %router_w = mt.param "block_sparse_moe.gate.weight" normal(2.0e-02) : tensor<4x64xf32>
    %router = mt.linear %n2, %router_w : (tensor<?x?x64xf32>, tensor<4x64xf32>) -> tensor<?x?x4xf32>
    %gates, %experts = mt.moe_router %router {topk = 2 : i64, aux_loss_coeff = 2.0e-02 : f64} : (tensor<?x?x4xf32>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi32>)
    %rows, %counts = mt.moe_dispatch %n2, %experts {num_experts = 4 : i64} : (tensor<?x?x64xf32>, tensor<?x?x2xi32>) -> (tensor<?x64xf32>, tensor<4xi32>)
    %w1 = mt.param "block_sparse_moe.experts.w1" normal(2.0e-02) : tensor<4x128x64xf32>
    %gate = mt.grouped_linear %rows, %counts, %w1 : (tensor<?x64xf32>, tensor<4xi32>, tensor<4x128x64xf32>) -> tensor<?x128xf32>
    %w3 = mt.param "block_sparse_moe.experts.w3" normal(2.0e-02) : tensor<4x128x64xf32>
    %up = mt.grouped_linear %rows, %counts, %w3 : (tensor<?x64xf32>, tensor<4xi32>, tensor<4x128x64xf32>) -> tensor<?x128xf32>
    %act = mt.swiglu %gate, %up : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
    %w2 = mt.param "block_sparse_moe.experts.w2" normal(1.0e-02) : tensor<4x64x128xf32>
    %down = mt.grouped_linear %act, %counts, %w2 : (tensor<?x128xf32>, tensor<4xi32>, tensor<4x64x128xf32>) -> tensor<?x64xf32>
    %moe = mt.moe_combine %down, %gates, %experts {num_experts = 4 : i64} : (tensor<?x64xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32>) -> tensor<?x?x64xf32>
    %r2 = mt.add %r1, %moe : (tensor<?x?x64xf32>, tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
    return %r2 : tensor<?x?x64xf32>
  }

  func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
    %emb_w = mt.param "embed_tokens.weight" normal(2.0e-02) : tensor<512x64xf32>
    %x = mt.embedding %emb_w, %tokens : (tensor<512x64xf32>, tensor<?x?xi32>) -> tensor<?x?x64xf32>
    %y = mt.repeat 2 @block(%x) {prefix = "layers"} : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
    %norm_w = mt.param "norm.weight" ones : tensor<64xf32>
    %yn = mt.rms_norm %y, %norm_w : (tensor<?x?x64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32>
    %head_w = mt.param "lm_head.weight" normal(2.0e-02) : tensor<512x64xf32>
    %logits = mt.linear %yn, %head_w : (tensor<?x?x64xf32>, tensor<512x64xf32>) -> tensor<?x?x512xf32>
    %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x512xf32>, tensor<?x?xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
