#include "compiler/ImportConfig.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

namespace mtc {
namespace {

using ::mt::hf::ModelConfig;

/// The shortest decimal that reads back as `v`, in MLIR's float syntax (with a point).
std::string real(double v) {
  char buffer[64];
  std::string s(buffer, std::to_chars(buffer, buffer + sizeof buffer, v).ptr);
  if (s.find('.') == std::string::npos) {
    const size_t e = s.find('e');
    s.insert(e == std::string::npos ? s.size() : e, ".0");
  }
  return s;
}

/// Writes one line of MLIR into the model.
struct Writer {
  std::string text;
  llvm::raw_string_ostream os{text};

  static std::string t(std::initializer_list<int64_t> dims) {
    std::string s = "tensor<";
    for (int64_t d : dims)
      s += std::to_string(d) + "x";
    return s + "f32>";
  }
  static std::string a(int64_t n) { return "tensor<?x?x" + std::to_string(n) + "xf32>"; }
  void param(const std::string &v, const std::string &name, const std::string &init,
             std::initializer_list<int64_t> dims) {
    os << "    %" << v << " = mt.param \"" << name << "\" " << init << " : " << t(dims) << "\n";
  }
  void linear(const std::string &v, const std::string &x, const std::string &w, int64_t in,
              int64_t out, const std::string &bias = "") {
    os << "    %" << v << " = mt.linear %" << x << ", %" << w << (bias.empty() ? "" : ", %" + bias)
       << " : (" << a(in) << ", " << t({out, in}) << (bias.empty() ? "" : ", " + t({out}))
       << ") -> " << a(out) << "\n";
  }
  void add(const std::string &v, const std::string &x, const std::string &y, int64_t h) {
    os << "    %" << v << " = mt.add %" << x << ", %" << y << " : (" << a(h) << ", " << a(h)
       << ") -> " << a(h) << "\n";
  }
  void dropout(const std::string &v, const std::string &x, double rate, int64_t h) {
    os << "    %" << v << " = mt.dropout %" << x << " {rate = " << real(rate) << " : f64} : ("
       << a(h) << ") -> " << a(h) << "\n";
  }
};

/// LLaMA's MLP of %n2 into %mlp: SwiGLU, dense or (Mixtral, Qwen3-MoE) a mixture of
/// experts.
void swigluMlp(Writer &w, const ModelConfig &c, const std::string &normal,
               const std::string &output) {
  const int64_t h = c.hidden, ffn = c.ffn, e = c.experts, k = c.topk;
  auto &os = w.os;
  if (e == 0) {
    w.param("gate_w", "mlp.gate_proj.weight", normal, {ffn, h});
    w.linear("gate", "n2", "gate_w", h, ffn);
    w.param("up_w", "mlp.up_proj.weight", normal, {ffn, h});
    w.linear("up", "n2", "up_w", h, ffn);
    os << "    %act = mt.swiglu %gate, %up : (" << Writer::a(ffn) << ", " << Writer::a(ffn)
       << ") -> " << Writer::a(ffn) << "\n";
    w.param("down_w", "mlp.down_proj.weight", output, {h, ffn});
    w.linear("mlp", "act", "down_w", ffn, h);
    return;
  }
  const std::string rows = "tensor<?x" + std::to_string(h) + "xf32>";
  const std::string inner = "tensor<?x" + std::to_string(ffn) + "xf32>";
  const std::string counts = "tensor<" + std::to_string(e) + "xi32>";
  const std::string slots =
      "tensor<?x?x" + std::to_string(k) + "xf32>, tensor<?x?x" + std::to_string(k) + "xi32>";
  const std::string experts = "{num_experts = " + std::to_string(e) + " : i64}";
  const ::mt::hf::ExpertNames names = ::mt::hf::expertNames(c);
  const std::string prefix = names.prefix, stacked = prefix + "experts.";
  w.param("router_w", prefix + "gate.weight", normal, {e, h});
  w.linear("router", "n2", "router_w", h, e);
  os << "    %gates, %experts = mt.moe_router %router {topk = " << k << " : i64, "
     << (c.preSoftmax ? "pre_softmax, " : "") << "aux_loss_coeff = " << real(c.auxLossCoeff)
     << " : f64} : (" << Writer::a(e) << ") -> (" << slots << ")\n";
  os << "    %rows, %counts = mt.moe_dispatch %n2, %experts " << experts << " : (" << Writer::a(h)
     << ", tensor<?x?x" << k << "xi32>) -> (" << rows << ", " << counts << ")\n";
  auto grouped = [&](const char *v, const char *x, const char *weight, const std::string &in,
                     const std::string &out, std::initializer_list<int64_t> dims) {
    os << "    %" << v << " = mt.grouped_linear %" << x << ", %counts, %" << weight << " : (" << in
       << ", " << counts << ", " << Writer::t(dims) << ") -> " << out << "\n";
  };
  w.param("w1", stacked + names.gate, normal, {e, ffn, h});
  grouped("gate", "rows", "w1", rows, inner, {e, ffn, h});
  w.param("w3", stacked + names.up, normal, {e, ffn, h});
  grouped("up", "rows", "w3", rows, inner, {e, ffn, h});
  os << "    %act = mt.swiglu %gate, %up : (" << inner << ", " << inner << ") -> " << inner << "\n";
  w.param("w2", stacked + names.down, output, {e, h, ffn});
  grouped("down", "act", "w2", inner, rows, {e, h, ffn});
  os << "    %mlp = mt.moe_combine %down, %gates, %experts " << experts << " : (" << rows << ", "
     << slots << ") -> " << Writer::a(h) << "\n";
}

std::string llama(const ModelConfig &c, llvm::StringRef name) {
  const int64_t layers = c.layers, h = c.hidden, heads = c.heads, kv = c.kvHeads, d = c.headDim,
                ffn = c.ffn, vocab = c.vocab, positions = c.positions;
  const double eps = c.normEpsilon, std = c.initStd, attentionDropout = c.attentionDropout;
  const bool tied = c.tied;
  std::string rope = "heads = " + std::to_string(heads) + " : i64, kv_heads = " +
                     std::to_string(kv) + " : i64, theta = " + real(c.ropeTheta) + " : f64";
  if (const auto &scaling = c.ropeScaling) {
    rope += ", scaling_factor = " + real(scaling->factor) + " : f64";
    rope += ", low_freq_factor = " + real(scaling->lowFreqFactor) + " : f64";
    rope += ", high_freq_factor = " + real(scaling->highFreqFactor) + " : f64";
    rope += ", original_positions = " + std::to_string(scaling->originalPositions) + " : i64";
  }

  const int64_t q = heads * d, qkv = (heads + 2 * kv) * d;
  const std::string normal = "normal(" + real(std) + ")";
  const std::string output = "normal(" + real(std / std::sqrt(2.0 * layers)) + ")";
  const std::string epsilon = "{epsilon = " + real(eps) + " : f64}";
  Writer w;
  auto &os = w.os;
  os << "// " << name << ": a " << c.architecture << " of " << layers << " layers, hidden " << h
     << ", " << heads << " query heads of " << d << " sharing " << kv << " key/value heads, "
     << (c.experts
             ? std::to_string(c.topk) + " of " + std::to_string(c.experts) + " SwiGLU experts of "
             : std::string("SwiGLU MLP of "))
     << ffn << ", vocabulary " << vocab << ", " << positions << " positions"
     << (c.outputBias ? ", biases on the attention's projections"
         : c.qkvBias  ? ", biases on the query, key and value projections"
                      : "")
     << (c.qkNorm ? ", each query and key head RMS-normalised" : "")
     << (c.window ? ", a sliding window of " + std::to_string(c.window) + " positions" : "")
     << (c.residualDropout > 0 ? ", each block's outputs dropped at " + real(c.residualDropout)
                               : "")
     << (tied ? ", output layer tied to the embedding" : "") << ".\n"
     << "// Written by mtc import-config from a transformers config.json.\n";
  os << "module attributes {mt.model = \"" << name << "\", mt.seq_length = " << positions
     << " : i64} {\n";
  os << "  func.func private @block(%x: " << Writer::a(h) << ") -> " << Writer::a(h) << " {\n";
  w.param("n1_w", "input_layernorm.weight", "ones", {h});
  os << "    %n1 = mt.rms_norm %x, %n1_w " << epsilon << " : (" << Writer::a(h) << ", "
     << Writer::t({h}) << ") -> " << Writer::a(h) << "\n";
  w.param("qkv_w", "self_attn.qkv.weight", normal, {qkv, h});
  if (c.qkvBias)
    w.param("qkv_b", "self_attn.qkv.bias", "zeros", {qkv});
  w.linear("qkv", "n1", "qkv_w", h, qkv, c.qkvBias ? "qkv_b" : "");
  std::string turned = "qkv";
  if (c.qkNorm) {
    w.param("qn_w", "self_attn.q_norm.weight", "ones", {d});
    w.param("kn_w", "self_attn.k_norm.weight", "ones", {d});
    os << "    %nqkv = mt.qk_norm %qkv, %qn_w, %kn_w {heads = " << heads
       << " : i64, kv_heads = " << kv << " : i64, epsilon = " << real(eps) << " : f64} : ("
       << Writer::a(qkv) << ", " << Writer::t({d}) << ", " << Writer::t({d}) << ") -> "
       << Writer::a(qkv) << "\n";
    turned = "nqkv";
  }
  os << "    %rqkv = mt.rotary %" << turned << " {" << rope << "} : (" << Writer::a(qkv) << ") -> "
     << Writer::a(qkv) << "\n";
  os << "    %att = mt.attention %rqkv {causal, "
     << (attentionDropout > 0 ? "dropout = " + real(attentionDropout) + " : f64, " : "")
     << "heads = " << heads << " : i64, kv_heads = " << kv << " : i64"
     << (c.window ? ", window = " + std::to_string(c.window) + " : i64" : "") << "} : ("
     << Writer::a(qkv) << ") -> " << Writer::a(q) << "\n";
  w.param("o_w", "self_attn.o_proj.weight", output, {h, q});
  if (c.outputBias)
    w.param("o_b", "self_attn.o_proj.bias", "zeros", {h});
  w.linear("o", "att", "o_w", q, h, c.outputBias ? "o_b" : "");
  // Phi-3's resid_pdrop: each block output dropped before its residual add.
  const double resid = c.residualDropout;
  if (resid > 0)
    w.dropout("o_d", "o", resid, h);
  w.add("r1", "x", resid > 0 ? "o_d" : "o", h);
  w.param("n2_w", "post_attention_layernorm.weight", "ones", {h});
  os << "    %n2 = mt.rms_norm %r1, %n2_w " << epsilon << " : (" << Writer::a(h) << ", "
     << Writer::t({h}) << ") -> " << Writer::a(h) << "\n";
  swigluMlp(w, c, normal, output);
  if (resid > 0)
    w.dropout("mlp_d", "mlp", resid, h);
  w.add("r2", "r1", resid > 0 ? "mlp_d" : "mlp", h);
  os << "    return %r2 : " << Writer::a(h) << "\n  }\n\n";
  os << "  func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> "
        "tensor<f32> {\n";
  w.param("emb_w", "embed_tokens.weight", normal, {vocab, h});
  os << "    %x = mt.embedding %emb_w, %tokens : (" << Writer::t({vocab, h})
     << ", tensor<?x?xi32>) -> " << Writer::a(h) << "\n";
  os << "    %y = mt.repeat " << layers << " @block(%x) {prefix = \"layers\"} : ("
     << Writer::a(h) << ") -> " << Writer::a(h) << "\n";
  w.param("norm_w", "norm.weight", "ones", {h});
  os << "    %yn = mt.rms_norm %y, %norm_w " << epsilon << " : (" << Writer::a(h) << ", "
     << Writer::t({h}) << ") -> " << Writer::a(h) << "\n";
  if (!tied)
    w.param("head_w", "lm_head.weight", normal, {vocab, h});
  w.linear("logits", "yn", tied ? "emb_w" : "head_w", h, vocab);
  os << "    %loss = mt.cross_entropy %logits, %targets : (" << Writer::a(vocab)
     << ", tensor<?x?xi32>) -> tensor<f32>\n    return %loss : tensor<f32>\n  }\n}\n";
  return w.text;
}

std::string gpt2(const ModelConfig &c, llvm::StringRef name) {
  const int64_t layers = c.layers, h = c.hidden, heads = c.heads, ffn = c.ffn, vocab = c.vocab,
                positions = c.positions;
  const double eps = c.normEpsilon, std = c.initStd, embd = c.embeddingDropout,
               attn = c.attentionDropout, resid = c.residualDropout;

  const std::string normal = "normal(" + real(std) + ")";
  const std::string output = "normal(" + real(std / std::sqrt(2.0 * layers)) + ")";
  const std::string epsilon = "{epsilon = " + real(eps) + " : f64}";
  Writer w;
  auto &os = w.os;
  auto norm = [&](const std::string &v, const std::string &x, const std::string &prefix) {
    w.param(v + "_w", prefix + ".weight", "ones", {h});
    w.param(v + "_b", prefix + ".bias", "zeros", {h});
    os << "    %" << v << " = mt.layer_norm %" << x << ", %" << v << "_w, %" << v << "_b "
       << epsilon << " : (" << Writer::a(h) << ", " << Writer::t({h}) << ", " << Writer::t({h})
       << ") -> " << Writer::a(h) << "\n";
  };
  os << "// " << name << ": a GPT2LMHeadModel of " << layers << " layers, hidden " << h << ", "
     << heads << " heads, MLP of " << ffn << ", vocabulary " << vocab << ", " << positions
     << " positions, output layer tied to the embedding.\n"
     << "// Written by mtc import-config from a transformers config.json.\n";
  os << "module attributes {mt.model = \"" << name << "\"} {\n";
  os << "  func.func private @block(%x: " << Writer::a(h) << ") -> " << Writer::a(h) << " {\n";
  norm("h1", "x", "ln_1");
  w.param("qkv_w", "attn.qkv.weight", normal, {3 * h, h});
  w.param("qkv_b", "attn.qkv.bias", "zeros", {3 * h});
  w.linear("qkv", "h1", "qkv_w", h, 3 * h, "qkv_b");
  os << "    %att = mt.attention %qkv {causal, "
     << (attn > 0 ? "dropout = " + real(attn) + " : f64, " : "") << "heads = " << heads
     << " : i64} : (" << Writer::a(3 * h) << ") -> " << Writer::a(h) << "\n";
  w.param("proj_w", "attn.proj.weight", output, {h, h});
  w.param("proj_b", "attn.proj.bias", "zeros", {h});
  w.linear("proj", "att", "proj_w", h, h, "proj_b");
  std::string branch = "proj";
  if (resid > 0) {
    w.dropout("proj_d", "proj", resid, h);
    branch = "proj_d";
  }
  w.add("r1", "x", branch, h);
  norm("h2", "r1", "ln_2");
  w.param("fc_w", "mlp.fc.weight", normal, {ffn, h});
  w.param("fc_b", "mlp.fc.bias", "zeros", {ffn});
  w.linear("fc", "h2", "fc_w", h, ffn, "fc_b");
  os << "    %g = mt.gelu %fc" << (c.exactGelu ? " {approximate = \"none\"}" : "") << " : ("
     << Writer::a(ffn) << ") -> " << Writer::a(ffn) << "\n";
  w.param("out_w", "mlp.proj.weight", output, {h, ffn});
  w.param("out_b", "mlp.proj.bias", "zeros", {h});
  w.linear("out", "g", "out_w", ffn, h, "out_b");
  branch = "out";
  if (resid > 0) {
    w.dropout("out_d", "out", resid, h);
    branch = "out_d";
  }
  w.add("r2", "r1", branch, h);
  os << "    return %r2 : " << Writer::a(h) << "\n  }\n\n";
  os << "  func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> "
        "tensor<f32> {\n";
  w.param("wte", "wte", normal, {vocab, h});
  w.param("wpe", "wpe", normal, {positions, h});
  os << "    %tok = mt.embedding %wte, %tokens : (" << Writer::t({vocab, h})
     << ", tensor<?x?xi32>) -> " << Writer::a(h) << "\n";
  os << "    %emb = mt.position_embedding %tok, %wpe : (" << Writer::a(h) << ", "
     << Writer::t({positions, h}) << ") -> " << Writer::a(h) << "\n";
  std::string x = "emb";
  if (embd > 0) {
    w.dropout("x", "emb", embd, h);
    x = "x";
  }
  os << "    %y = mt.repeat " << layers << " @block(%" << x << ") {prefix = \"h\"} : ("
     << Writer::a(h) << ") -> " << Writer::a(h) << "\n";
  norm("yn", "y", "ln_f");
  w.linear("logits", "yn", "wte", h, vocab);
  os << "    %loss = mt.cross_entropy %logits, %targets : (" << Writer::a(vocab)
     << ", tensor<?x?xi32>) -> tensor<f32>\n    return %loss : tensor<f32>\n  }\n}\n";
  return w.text;
}

} // namespace

bool modelFromConfig(const ModelConfig &config, llvm::StringRef name, std::string &text,
                     std::string &error) {
  if (name.empty() || !llvm::all_of(name, [](char ch) {
        return llvm::isAlnum(ch) || ch == '-' || ch == '_' || ch == '.';
      })) {
    error = "the model's name '" + name.str() + "' is not letters, digits, '-', '_' and '.'";
    return false;
  }
  text = config.llama ? llama(config, name) : gpt2(config, name);
  return true;
}

} // namespace mtc
