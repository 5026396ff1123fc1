// One-op models and zoo models whose compiled training steps the runtime tests run: the
// gradient checks against finite differences, and the CUDA backend against the CPU one.
#ifndef MT_TEST_UNIT_OPCASES_H
#define MT_TEST_UNIT_OPCASES_H

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace mt::test {

/// A one-op model: `body` computes %logits of shape [2, 3, V] from parameters, and the
/// loss is their cross-entropy against the targets.
inline std::string oneOpModel(const std::string &body, int64_t vocab, const std::string &loss = "") {
  std::string v = std::to_string(vocab);
  return "func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> "
         "tensor<f32> {\n" +
         body + "\n" +
         (loss.empty() ? "  %loss = mt.cross_entropy %logits, %targets : (tensor<2x3x" + v +
                             "xf32>, tensor<?x?xi32>) -> tensor<f32>\n"
                       : loss + "\n") +
         "  return %loss : tensor<f32>\n}\n";
}

struct OpCase {
  std::string name;
  std::string mlir;       // empty: a zoo model
  std::string zooModel;
  int64_t seqLength;
  int64_t vocab;          // token and target ids are drawn below this
  std::string flags = {}; // more mtc flags
  // Routed by a mixture of experts: a 16-bit logit rounded otherwise on another backend
  // may choose another expert, so the backends are compared in fp32 only.
  bool routed = false;
};

/// A mixture-of-experts layer over x [2, 3, 4]: a router of 4 experts choosing `topk`
/// with `router` attributes, the tokens' slots dispatched (with `moves` attributes, and
/// combined alike; with `drop`, a capacity factor, the experts an mt.moe_drop of the gates
/// keeps), a SwiGLU expert MLP of 6 and an output of 5 logits, combined by the gates.
inline std::string moeModel(int64_t topk, const std::string &router, const std::string &moves = "",
                            const std::string &drop = "") {
  const std::string k = std::to_string(topk), n = std::to_string(6 * topk);
  const std::string slots = "tensor<2x3x" + k + "xf32>, tensor<2x3x" + k + "xi32>";
  // With `drop`, a capacity factor: the dispatch and combine read an mt.moe_drop's experts.
  const std::string experts = drop.empty() ? "%experts" : "%kept";
  const std::string dropped =
      drop.empty() ? ""
                   : "\n  %kept = mt.moe_drop %gates, %experts {num_experts = 4 : i64, "
                     "capacity_factor = " +
                         drop + " : f64} : (" + slots + ") -> tensor<2x3x" + k + "xi32>";
  return oneOpModel(
      R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x4xf32>
  %wr = mt.param "router" normal(1.0) : tensor<4x4xf32>
  %r = mt.linear %x, %wr : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %gates, %experts = mt.moe_router %r {topk = )" +
          k + " : i64" + router + R"(} : (tensor<2x3x4xf32>) -> ()" + slots + ")" + dropped + R"(
  %rows, %counts = mt.moe_dispatch %x, )" +
          experts + R"( {num_experts = 4 : i64)" + moves +
          R"(} : (tensor<2x3x4xf32>, tensor<2x3x)" + k + R"(xi32>) -> (tensor<)" + n +
          R"(x4xf32>, tensor<4xi32>)
  %w1 = mt.param "w1" normal(0.5) : tensor<4x6x4xf32>
  %w3 = mt.param "w3" normal(0.5) : tensor<4x6x4xf32>
  %g = mt.grouped_linear %rows, %counts, %w1 : (tensor<)" +
          n + R"(x4xf32>, tensor<4xi32>, tensor<4x6x4xf32>) -> tensor<)" + n + R"(x6xf32>
  %u = mt.grouped_linear %rows, %counts, %w3 : (tensor<)" +
          n + R"(x4xf32>, tensor<4xi32>, tensor<4x6x4xf32>) -> tensor<)" + n + R"(x6xf32>
  %a = mt.swiglu %g, %u : (tensor<)" +
          n + "x6xf32>, tensor<" + n + "x6xf32>) -> tensor<" + n +
          R"(x6xf32>
  %w2 = mt.param "w2" normal(0.5) : tensor<4x5x6xf32>
  %y = mt.grouped_linear %a, %counts, %w2 : (tensor<)" +
          n + R"(x6xf32>, tensor<4xi32>, tensor<4x5x6xf32>) -> tensor<)" + n + R"(x5xf32>
  %logits = mt.moe_combine %y, %gates, )" +
          experts + R"( {num_experts = 4 : i64)" + moves + R"(} : (tensor<)" + n + "x5xf32>, " +
          slots + ") -> tensor<2x3x5xf32>",
      5);
}

inline void PrintTo(const OpCase &c, std::ostream *os) { *os << c.name; }

inline std::vector<OpCase> opCases() {
  std::vector<OpCase> c;
  c.push_back({"gelu", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %logits = mt.gelu %x : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  c.push_back({"gelu_exact", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %logits = mt.gelu %x {approximate = "none"} : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5),
                 "", 3, 5});
  c.push_back({"silu", oneOpModel(R"(
  %x = mt.param "x" normal(2.0) : tensor<2x3x5xf32>
  %logits = mt.silu %x : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  // The weight and bias gradients added into the parameters' by their ops (mt-fuse-grad-
  // accumulation), and each added by a ParamGrad of its own.
  const std::string linear = oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x4xf32>
  %w = mt.param "w" normal(0.5) : tensor<5x4xf32>
  %b = mt.param "b" normal(0.5) : tensor<5xf32>
  %logits = mt.linear %x, %w, %b : (tensor<2x3x4xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>)", 5);
  c.push_back({"linear", linear, "", 3, 5});
  c.push_back({"linear_unfused", linear, "", 3, 5, "--no-gradient-accumulation-fusion"});
  // The bias gradient summed in the weight gradient's GEMM (mt-fuse-bias-grad: on the GPU
  // cuBLASLt's BGRADB epilogue, where it has an algorithm for the shapes, as 16 by 32
  // features over 16 rows should suit), added into the parameter's f32 gradient or
  // written as a result of its own; and the pair.
  // x [2, 8, in] · wᵀ + b: logits over `out` classes, the weights drawn with `std`.
  auto biasedLinear = [](int64_t in, int64_t out, const std::string &std) {
    const std::string x = "tensor<2x8x" + std::to_string(in) + "xf32>",
                      w = "tensor<" + std::to_string(out) + "x" + std::to_string(in) + "xf32>",
                      b = "tensor<" + std::to_string(out) + "xf32>",
                      y = "tensor<2x8x" + std::to_string(out) + "xf32>";
    return oneOpModel("  %x = mt.param \"x\" normal(1.0) : " + x + "\n  %w = mt.param \"w\" normal(" +
                          std + ") : " + w + "\n  %b = mt.param \"b\" normal(" + std + ") : " + b +
                          "\n  %logits = mt.linear %x, %w, %b : (" + x + ", " + w + ", " + b +
                          ") -> " + y,
                      out,
                      "  %loss = mt.cross_entropy %logits, %targets : (" + y +
                          ", tensor<?x?xi32>) -> tensor<f32>");
  };
  const std::string linearWide = biasedLinear(16, 32, "0.5");
  c.push_back({"linear_wide", linearWide, "", 8, 32});
  c.push_back({"linear_wide_separate", linearWide, "", 8, 32, "--no-gradient-accumulation-fusion"});
  c.push_back({"linear_wide_unfused", linearWide, "", 8, 32, "--no-bias-grad-fusion"});
  // An LM head over an odd vocabulary (101 classes): in 16 bits the rows of its logits, and
  // of their gradient, are not a whole number of 16 bytes, and the CUDA backend runs its
  // GEMMs on copies with padded rows, its weight gradient reading the copy its input
  // gradient made; with the bias gradient in the weight gradient's GEMM and apart.
  const std::string oddHead = biasedLinear(64, 101, "0.1");
  c.push_back({"lm_head_odd", oddHead, "", 8, 101});
  c.push_back({"lm_head_odd_unfused", oddHead, "", 8, 101, "--no-bias-grad-fusion"});
  // A GELU between two linears: mt-fuse-epilogues folds it into the first linear and its
  // gradient into the second's input gradient (--no-bias-gelu-fusion: the pair as is).
  // 8 hidden features, or 32 over 8 rows of 16 (the cuBLASLt-only test's), suit
  // cuBLASLt's epilogues; 6, without a bias, take the fallback.
  auto mlp = [](int64_t seq, int64_t in, int64_t hidden, int64_t vocab, bool bias) {
    auto t = [&](int64_t last) { return "tensor<2x" + std::to_string(seq) + "x" + std::to_string(last) + "xf32>"; };
    const std::string x = t(in), h = t(hidden), logits = t(vocab);
    const std::string w1 = "tensor<" + std::to_string(hidden) + "x" + std::to_string(in) + "xf32>";
    const std::string b1 = "tensor<" + std::to_string(hidden) + "xf32>";
    const std::string w2 = "tensor<" + std::to_string(vocab) + "x" + std::to_string(hidden) + "xf32>";
    std::string body = "  %x = mt.param \"x\" normal(1.0) : " + x + "\n" +
                       "  %w1 = mt.param \"w1\" normal(0.5) : " + w1 + "\n";
    if (bias)
      body += "  %b1 = mt.param \"b1\" normal(0.5) : " + b1 + "\n" +
              "  %h = mt.linear %x, %w1, %b1 : (" + x + ", " + w1 + ", " + b1 + ") -> " + h + "\n";
    else
      body += "  %h = mt.linear %x, %w1 : (" + x + ", " + w1 + ") -> " + h + "\n";
    body += "  %a = mt.gelu %h : (" + h + ") -> " + h + "\n" +
            "  %w2 = mt.param \"w2\" normal(0.5) : " + w2 + "\n" +
            "  %logits = mt.linear %a, %w2 : (" + h + ", " + w2 + ") -> " + logits;
    return oneOpModel(body, vocab,
                      "  %loss = mt.cross_entropy %logits, %targets : (" + logits +
                          ", tensor<?x?xi32>) -> tensor<f32>");
  };
  c.push_back({"mlp_gelu", mlp(3, 4, 8, 5, true), "", 3, 5});
  c.push_back({"mlp_gelu_unfused", mlp(3, 4, 8, 5, true), "", 3, 5, "--no-bias-gelu-fusion"});
  c.push_back({"mlp_gelu_odd", mlp(3, 4, 6, 5, false), "", 3, 5});
  c.push_back({"mlp_gelu_wide", mlp(4, 16, 32, 8, true), "", 4, 8});
  const std::string layerNorm = oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %g = mt.param "g" normal(1.0) : tensor<5xf32>
  %b = mt.param "b" normal(1.0) : tensor<5xf32>
  %logits = mt.layer_norm %x, %g, %b : (tensor<2x3x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>)", 5);
  c.push_back({"layer_norm", layerNorm, "", 3, 5});
  c.push_back({"layer_norm_unfused", layerNorm, "", 3, 5, "--no-gradient-accumulation-fusion"});
  c.push_back({"rms_norm", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %g = mt.param "g" normal(1.0) : tensor<5xf32>
  %logits = mt.rms_norm %x, %g {epsilon = 1.0e-06 : f64} : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  c.push_back({"swiglu", oneOpModel(R"(
  %a = mt.param "gate" normal(2.0) : tensor<2x3x5xf32>
  %u = mt.param "up" normal(1.0) : tensor<2x3x5xf32>
  %logits = mt.swiglu %a, %u : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  // Rotary embeddings: every head its own key and value (theta 100, so that three
  // positions turn far), and one key/value head for two query heads with LLaMA 3.1's
  // scaling, whose blended band pair 1 falls in.
  c.push_back({"rotary", oneOpModel(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x24xf32>
  %logits = mt.rotary %qkv {heads = 2 : i64, theta = 1.0e+02 : f64} : (tensor<2x3x24xf32>) -> tensor<2x3x24xf32>)", 24), "", 3, 24});
  c.push_back({"rotary_grouped_scaled", oneOpModel(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x16xf32>
  %logits = mt.rotary %qkv {heads = 2 : i64, kv_heads = 1 : i64, original_positions = 1000 : i64, scaling_factor = 8.0 : f64} : (tensor<2x3x16xf32>) -> tensor<2x3x16xf32>)", 16), "", 3, 16});
  // Qwen3's normalised query and key heads: two query heads sharing a key and a value of 4,
  // the weights of each kind shared by its heads; with and without the weight gradients
  // added into the parameters' (gradient-accumulation fusion).
  const std::string qkNorm = oneOpModel(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x16xf32>
  %wq = mt.param "wq" normal(1.0) : tensor<4xf32>
  %wk = mt.param "wk" normal(1.0) : tensor<4xf32>
  %logits = mt.qk_norm %qkv, %wq, %wk {heads = 2 : i64, kv_heads = 1 : i64, epsilon = 1.0e-06 : f64} : (tensor<2x3x16xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x16xf32>)",
                                        16);
  c.push_back({"qk_norm", qkNorm, "", 3, 16});
  c.push_back({"qk_norm_unfused", qkNorm, "", 3, 16, "--no-gradient-accumulation-fusion"});
  // Two groups of two query heads, heads of 40: a warp's lanes take more than one element,
  // and the weights' gradients gather heads from both groups.
  c.push_back({"qk_norm_groups", oneOpModel(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x320xf32>
  %wq = mt.param "wq" normal(1.0) : tensor<40xf32>
  %wk = mt.param "wk" normal(1.0) : tensor<40xf32>
  %logits = mt.qk_norm %qkv, %wq, %wk {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x3x320xf32>, tensor<40xf32>, tensor<40xf32>) -> tensor<2x3x320xf32>)", 320), "", 3, 320});
  c.push_back({"add", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %y = mt.param "y" normal(1.0) : tensor<2x3x5xf32>
  %s = mt.add %x, %y : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %logits = mt.add %s, %x : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  for (const char *causal : {"causal, ", ""})
    c.push_back({std::string("attention") + (*causal ? "_causal" : ""), oneOpModel(
        std::string(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x24xf32>
  %logits = mt.attention %qkv {)") + causal + R"(heads = 2 : i64} : (tensor<2x3x24xf32>) -> tensor<2x3x8xf32>)", 8), "", 3, 8});
  // Dropped attention probabilities, fused (the mask regenerated in backward) and
  // unfused (the probabilities and the mask kept).
  const std::string dropped = oneOpModel(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x24xf32>
  %logits = mt.attention %qkv {causal, dropout = 3.0e-01 : f64, heads = 2 : i64, stream = 0 : i64} : (tensor<2x3x24xf32>) -> tensor<2x3x8xf32>)", 8);
  c.push_back({"attention_dropout", dropped, "", 3, 8});
  c.push_back({"attention_dropout_unfused", dropped, "", 3, 8, "--attention unfused"});
  // Without a causal mask every probability is drawn.
  const std::string droppedAll = oneOpModel(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x24xf32>
  %logits = mt.attention %qkv {dropout = 3.0e-01 : f64, heads = 2 : i64, stream = 0 : i64} : (tensor<2x3x24xf32>) -> tensor<2x3x8xf32>)",
                                            8);
  c.push_back({"attention_dropout_noncausal", droppedAll, "", 3, 8});
  c.push_back({"attention_dropout_noncausal_unfused", droppedAll, "", 3, 8, "--attention unfused"});
  // Grouped-query attention (4 query heads sharing 2 keys and values of 4 dims) with
  // dropped probabilities, fused and unfused, and multi-query attention (3 query heads,
  // one key and value): the key and value gradients sum over their group.
  const std::string grouped = oneOpModel(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x32xf32>
  %logits = mt.attention %qkv {causal, dropout = 3.0e-01 : f64, heads = 4 : i64, kv_heads = 2 : i64, stream = 0 : i64} : (tensor<2x3x32xf32>) -> tensor<2x3x16xf32>)", 16);
  c.push_back({"attention_grouped", grouped, "", 3, 16});
  c.push_back({"attention_grouped_unfused", grouped, "", 3, 16, "--attention unfused"});
  // A sliding window of 2 over 3 positions: the last query no longer sees the first key.
  // With dropped probabilities and grouped heads, fused (only the keys seen drawn) and
  // unfused (the whole rows drawn, the masked probabilities 0); and without dropout
  // (cuDNN declines heads of 4: CudaBackendTest's flash_attention_window gives it a
  // window).
  const std::string windowed = R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x32xf32>
  %logits = mt.attention %qkv {causal, )";
  const std::string windowShape = R"(heads = 4 : i64, kv_heads = 2 : i64, window = 2 : i64} : (tensor<2x3x32xf32>) -> tensor<2x3x16xf32>)";
  const std::string droppedWindow =
      oneOpModel(windowed + "dropout = 3.0e-01 : f64, stream = 0 : i64, " + windowShape, 16);
  c.push_back({"attention_window", droppedWindow, "", 3, 16});
  c.push_back({"attention_window_unfused", droppedWindow, "", 3, 16, "--attention unfused"});
  c.push_back({"attention_window_no_dropout", oneOpModel(windowed + windowShape, 16), "", 3, 16});
  c.push_back({"attention_multi_query", oneOpModel(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x20xf32>
  %logits = mt.attention %qkv {causal, heads = 3 : i64, kv_heads = 1 : i64} : (tensor<2x3x20xf32>) -> tensor<2x3x12xf32>)", 12), "", 3, 12});
  c.push_back({"dropout", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %logits = mt.dropout %x {rate = 3.0e-01 : f64, stream = 0 : i64} : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  // A residual branch: bias, dropout and add as one op (mt-fuse-bias-dropout-add), and
  // as the three.
  const std::string branch = oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %b = mt.param "b" normal(1.0) : tensor<5xf32>
  %r = mt.param "r" normal(1.0) : tensor<2x3x5xf32>
  %h = mt.bias_add %x, %b : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %d = mt.dropout %h {rate = 3.0e-01 : f64, stream = 0 : i64} : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %logits = mt.add %r, %d : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5);
  c.push_back({"bias_dropout_add", branch, "", 3, 5});
  c.push_back({"bias_dropout_add_unfused", branch, "", 3, 5, "--no-bias-dropout-fusion"});
  // Two pre-norm residual blocks, x + gelu(layer_norm(x)) and then y + silu(rms_norm(y)):
  // each norm's input gradient summed with the residual stream's in the norm's kernel
  // (mt-fuse-norm-grad-add), and by an add of its own.
  const std::string normResiduals = oneOpModel(R"(
  %p = mt.param "p" normal(1.0) : tensor<2x3x5xf32>
  %x = mt.gelu %p : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %g = mt.param "g" normal(1.0) : tensor<5xf32>
  %b = mt.param "b" normal(1.0) : tensor<5xf32>
  %h = mt.layer_norm %x, %g, %b : (tensor<2x3x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %a = mt.gelu %h : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %y = mt.add %x, %a : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %r = mt.param "r" normal(1.0) : tensor<5xf32>
  %z = mt.rms_norm %y, %r {epsilon = 1.0e-06 : f64} : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %s = mt.silu %z : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %logits = mt.add %y, %s : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5);
  c.push_back({"norm_grad_add", normResiduals, "", 3, 5});
  c.push_back({"norm_grad_add_unfused", normResiduals, "", 3, 5, "--no-norm-grad-add-fusion"});
  c.push_back({"embeddings", oneOpModel(R"(
  %wte = mt.param "wte" normal(1.0) : tensor<7x5xf32>
  %wpe = mt.param "wpe" normal(1.0) : tensor<4x5xf32>
  %e = mt.embedding %wte, %tokens : (tensor<7x5xf32>, tensor<?x?xi32>) -> tensor<?x?x5xf32>
  %h = mt.position_embedding %e, %wpe : (tensor<?x?x5xf32>, tensor<4x5xf32>) -> tensor<?x?x5xf32>
  %logits = mt.linear %h, %wte : (tensor<?x?x5xf32>, tensor<7x5xf32>) -> tensor<?x?x7xf32>)", 7,
      "  %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x7xf32>, tensor<?x?xi32>) -> "
      "tensor<f32>"), "", 3, 7});
  c.push_back({"cross_entropy_num_classes", oneOpModel(R"(
  %logits = mt.param "logits" normal(1.0) : tensor<2x3x6xf32>)", 6,
      "  %loss = mt.cross_entropy %logits, %targets {num_classes = 4 : i64} : "
      "(tensor<2x3x6xf32>, tensor<?x?xi32>) -> tensor<f32>"), "", 3, 4});
  // The loss as the pair (its gradient written over the logits), and fused over rows
  // wide enough for whole 16-byte vectors (72 classes, 70 real, padded to 128).
  // Logits [2, 3, classes] of a linear of `features`.
  auto linearLogits = [](int classes, int features) {
    const std::string x = "tensor<2x3x" + std::to_string(features) + "xf32>";
    const std::string w =
        "tensor<" + std::to_string(classes) + "x" + std::to_string(features) + "xf32>";
    return "\n  %x = mt.param \"x\" normal(1.0) : " + x +
           "\n  %w = mt.param \"w\" normal(0.5) : " + w + "\n  %logits = mt.linear %x, %w : (" + x +
           ", " + w + ") -> tensor<2x3x" + std::to_string(classes) + "xf32>";
  };
  c.push_back({"cross_entropy_unfused", oneOpModel(linearLogits(5, 4), 5), "", 3, 5,
               "--no-cross-entropy-loss-fusion"});
  c.push_back({"cross_entropy_wide",
               oneOpModel(linearLogits(72, 16), 72,
                          "  %loss = mt.cross_entropy %logits, %targets {num_classes = 70 : i64} : "
                          "(tensor<2x3x72xf32>, tensor<?x?xi32>) -> tensor<f32>"),
               "", 3, 70});
  // Rows of 75 logits, unpadded, start off 16-byte boundaries (row 1 at 300 bytes in fp32,
  // 150 in bf16): the GPU's loss reads each row one by one to its first boundary, then in
  // vectors. Fused (the gradient over the logits) and not.
  const std::string oddLogits = linearLogits(75, 16);
  c.push_back({"cross_entropy_odd", oneOpModel(oddLogits, 75), "", 3, 75,
               "--make-vocab-size-divisible-by 1"});
  c.push_back({"cross_entropy_odd_unfused", oneOpModel(oddLogits, 75), "", 3, 75,
               "--make-vocab-size-divisible-by 1 --no-cross-entropy-loss-fusion"});
  // Mixture of experts: Mixtral's gating (the softmax over the top 2), the softmax over
  // all experts before the top 2, and one expert a token (its gate its probability: the
  // softmax over one logit would be 1).
  c.push_back({"moe", moeModel(2, ""), "", 3, 5, "", true});
  c.push_back({"moe_pre_softmax", moeModel(2, ", pre_softmax"), "", 3, 5, "", true});
  c.push_back({"moe_top1", moeModel(1, ", pre_softmax"), "", 3, 5, "", true});
  // Each expert keeps 2 of the 12 slots' (ceil(12/4 · 0.5)): the rest are dropped.
  c.push_back(
      {"moe_capacity", moeModel(2, "", ", capacity_factor = 5.0e-01 : f64"), "", 3, 5, "", true});
  // Each expert keeps the 2 slots of the largest gates of those routed to it.
  c.push_back({"moe_probs", moeModel(2, "", "", "5.0e-01"), "", 3, 5, "", true});
  c.push_back({"llama_tiny", "", "llama-tiny", 8, 512});
  c.push_back({"llama_tiny_selective", "", "llama-tiny", 8, 512, "--recompute selective"});
  c.push_back({"llama_tiny_full", "", "llama-tiny", 8, 512, "--recompute full"});
  c.push_back({"gpt_tiny", "", "gpt-tiny", 8, 512});
  c.push_back({"gpt_tiny_selective", "", "gpt-tiny", 8, 512, "--recompute selective"});
  c.push_back({"gpt_tiny_full", "", "gpt-tiny", 8, 512, "--recompute full"});
  return c;
}

} // namespace mt::test

#endif
