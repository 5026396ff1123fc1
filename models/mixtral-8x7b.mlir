// Mixtral 8x7B (Mistral AI 2024): 32 layers, hidden 4096, 32 query heads of 128 sharing 8
// key/value heads, vocabulary 32000, 32768 positions, rotary embeddings with theta
// 1000000, pre-RMSNorm (epsilon 1e-5), no biases, an untied output layer, no dropout;
// the MLP a sparse mixture of 8 SwiGLU experts of 14336, each token routed to its top 2
// (the gates the softmax over their two logits), with the load-balancing loss at 0.02.
// Output projections initialised with std 0.02/sqrt(2·layers). 46,702,792,704
// parameters. No batch size and no layout: those are compiler options.
module attributes {mt.model = "mixtral-8x7b", mt.seq_length = 32768 : i64} {
  func.func private @block(%x: tensor<?x?x4096xf32>) -> tensor<?x?x4096xf32> {
    %n1_w = mt.param "input_layernorm.weight" ones : tensor<4096xf32>
    %n1 = mt.rms_norm %x, %n1_w : (tensor<?x?x4096xf32>, tensor<4096xf32>) -> tensor<?x?x4096xf32>
    %qkv_w = mt.param "self_attn.qkv.weight" normal(2.0e-02) : tensor<6144x4096xf32>
    %qkv = mt.linear %n1, %qkv_w : (tensor<?x?x4096xf32>, tensor<6144x4096xf32>) -> tensor<?x?x6144xf32>
    %rqkv = mt.rotary %qkv {heads = 32 : i64, kv_heads = 8 : i64, theta = 1000000.0 : f64} : (tensor<?x?x6144xf32>) -> tensor<?x?x6144xf32>
    %att = mt.attention %rqkv {causal, heads = 32 : i64, kv_heads = 8 : i64} : (tensor<?x?x6144xf32>) -> tensor<?x?x4096xf32>
    %o_w = mt.param "self_attn.o_proj.weight" normal(2.5000000000e-03) : tensor<4096x4096xf32>
    %o = mt.linear %att, %o_w : (tensor<?x?x4096xf32>, tensor<4096x4096xf32>) -> tensor<?x?x4096xf32>
    %r1 = mt.add %x, %o : (tensor<?x?x4096xf32>, tensor<?x?x4096xf32>) -> tensor<?x?x4096xf32>
    %n2_w = mt.param "post_attention_layernorm.weight" ones : tensor<4096xf32>
    %n2 = mt.rms_norm %r1, %n2_w : (tensor<?x?x4096xf32>, tensor<4096xf32>) -> tensor<?x?x4096xf32>
    %router_w = mt.param "block_sparse_moe.gate.weight" normal(2.0e-02) : tensor<8x4096xf32>
    %router = mt.linear %n2, %router_w : (tensor<?x?x4096xf32>, tensor<8x4096xf32>) -> tensor<?x?x8xf32>
    %gates, %experts = mt.moe_router %router {topk = 2 : i64, aux_loss_coeff = 2.0e-02 : f64} : (tensor<?x?x8xf32>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi32>)
    %rows, %counts = mt.moe_dispatch %n2, %experts {num_experts = 8 : i64} : (tensor<?x?x4096xf32>, tensor<?x?x2xi32>) -> (tensor<?x4096xf32>, tensor<8xi32>)
    %w1 = mt.param "block_sparse_moe.experts.w1" normal(2.0e-02) : tensor<8x14336x4096xf32>
    %gate = mt.grouped_linear %rows, %counts, %w1 : (tensor<?x4096xf32>, tensor<8xi32>, tensor<8x14336x4096xf32>) -> tensor<?x14336xf32>
    %w3 = mt.param "block_sparse_moe.experts.w3" normal(2.0e-02) : tensor<8x14336x4096xf32>
    %up = mt.grouped_linear %rows, %counts, %w3 : (tensor<?x4096xf32>, tensor<8xi32>, tensor<8x14336x4096xf32>) -> tensor<?x14336xf32>
    %act = mt.swiglu %gate, %up : (tensor<?x14336xf32>, tensor<?x14336xf32>) -> tensor<?x14336xf32>
    %w2 = mt.param "block_sparse_moe.experts.w2" normal(2.5e-03) : tensor<8x4096x14336xf32>
    %down = mt.grouped_linear %act, %counts, %w2 : (tensor<?x14336xf32>, tensor<8xi32>, tensor<8x4096x14336xf32>) -> tensor<?x4096xf32>
    %moe = mt.moe_combine %down, %gates, %experts {num_experts = 8 : i64} : (tensor<?x4096xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32>) -> tensor<?x?x4096xf32>
    %r2 = mt.add %r1, %moe : (tensor<?x?x4096xf32>, tensor<?x?x4096xf32>) -> tensor<?x?x4096xf32>
    return %r2 : tensor<?x?x4096xf32>
  }

  func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> tensor<f32> {
    %emb_w = mt.param "embed_tokens.weight" normal(2.0e-02) : tensor<32000x4096xf32>
    %x = mt.embedding %emb_w, %tokens : (tensor<32000x4096xf32>, tensor<?x?xi32>) -> tensor<?x?x4096xf32>
    %y = mt.repeat 32 @block(%x) {prefix = "layers"} : (tensor<?x?x4096xf32>) -> tensor<?x?x4096xf32>
    %norm_w = mt.param "norm.weight" ones : tensor<4096xf32>
    %yn = mt.rms_norm %y, %norm_w : (tensor<?x?x4096xf32>, tensor<4096xf32>) -> tensor<?x?x4096xf32>
    %head_w = mt.param "lm_head.weight" normal(2.0e-02) : tensor<32000x4096xf32>
    %logits = mt.linear %yn, %head_w : (tensor<?x?x4096xf32>, tensor<32000x4096xf32>) -> tensor<?x?x32000xf32>
    %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x32000xf32>, tensor<?x?xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
