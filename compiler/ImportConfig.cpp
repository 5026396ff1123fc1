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

using llvm::json::Object;
using llvm::json::Value;

/// Reads the keys of a config.json, remembering which it used.
class Config {
public:
  explicit Config(const Object &object) : object_(object) {}

  std::optional<int64_t> integer(llvm::StringRef key, std::optional<int64_t> fallback = {}) {
    used_.insert(key);
    const Value *v = object_.get(key);
    if (!v || v->kind() == Value::Null) {
      if (!fallback)
        fail("'" + key.str() + "' is missing");
      return fallback;
    }
    // Up to 2^31, so that no product of a few dimensions overflows.
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i <= 0 || *i > (int64_t{1} << 31)) {
      fail("'" + key.str() + "' is not a positive integer up to 2^31");
      return std::nullopt;
    }
    return i;
  }
  double number(llvm::StringRef key, double fallback) {
    used_.insert(key);
    const Value *v = object_.get(key);
    if (!v || v->kind() == Value::Null)
      return fallback;
    std::optional<double> d = v->getAsNumber();
    if (!d || !std::isfinite(*d) || *d < 0) {
      fail("'" + key.str() + "' is not a non-negative number");
      return fallback;
    }
    return *d;
  }
  bool flag(llvm::StringRef key, bool fallback) {
    used_.insert(key);
    const Value *v = object_.get(key);
    if (!v || v->kind() == Value::Null)
      return fallback;
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      fail("'" + key.str() + "' is not true or false");
    return b.value_or(fallback);
  }
  std::string string(llvm::StringRef key, llvm::StringRef fallback) {
    used_.insert(key);
    const Value *v = object_.get(key);
    if (!v || v->kind() == Value::Null)
      return fallback.str();
    std::optional<llvm::StringRef> s = v->getAsString();
    if (!s)
      fail("'" + key.str() + "' is not a string");
    return s.value_or(fallback).str();
  }
  const Value *get(llvm::StringRef key) {
    used_.insert(key);
    return object_.get(key);
  }
  /// Keys that do not change the model being trained.
  void ignore(std::initializer_list<llvm::StringRef> keys) {
    for (llvm::StringRef key : keys)
      used_.insert(key);
  }
  void fail(const std::string &why) {
    if (error_.empty())
      error_ = why;
  }
  /// The first problem, or a key nothing used.
  std::string error() const {
    if (!error_.empty())
      return error_;
    std::vector<std::string> unknown;
    for (const auto &[key, value] : object_)
      if (!used_.count(key.str()))
        unknown.push_back(key.str());
    std::sort(unknown.begin(), unknown.end());
    return unknown.empty() ? "" : "'" + unknown.front() + "' is not an option mtc supports";
  }

private:
  const Object &object_;
  llvm::StringSet<> used_;
  std::string error_;
};

// Keys every transformers config may carry that change nothing mtc trains.
void ignoreCommon(Config &c) {
  c.ignore({"architectures", "model_type", "_name_or_path", "transformers_version",
            "torch_dtype", "dtype", "bos_token_id", "eos_token_id", "pad_token_id", "use_cache",
            "pretraining_tp"});
}

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

bool llama(Config &c, llvm::StringRef name, std::string &text) {
  ignoreCommon(c);
  const int64_t layers = c.integer("num_hidden_layers").value_or(1);
  const int64_t h = c.integer("hidden_size").value_or(1);
  const int64_t heads = c.integer("num_attention_heads").value_or(1);
  const int64_t kv = c.integer("num_key_value_heads", heads).value_or(1);
  const int64_t d = c.integer("head_dim", h / heads).value_or(1);
  const int64_t ffn = c.integer("intermediate_size").value_or(1);
  const int64_t vocab = c.integer("vocab_size").value_or(1);
  const int64_t positions = c.integer("max_position_embeddings").value_or(1);
  const double eps = c.number("rms_norm_eps", 1e-6), theta = c.number("rope_theta", 10000);
  const double std = c.number("initializer_range", 0.02);
  const double attentionDropout = c.number("attention_dropout", 0);
  const bool tied = c.flag("tie_word_embeddings", false);
  if (c.string("hidden_act", "silu") != "silu")
    c.fail("'hidden_act' is not silu (mtc's LLaMA MLP is SwiGLU)");
  for (const char *bias : {"attention_bias", "mlp_bias"})
    if (c.flag(bias, false))
      c.fail(std::string("'") + bias + "' is true: mtc's LLaMA has no biases");
  if (heads % kv != 0)
    c.fail("'num_key_value_heads' does not divide 'num_attention_heads'");
  if (d % 2 != 0)
    c.fail("'head_dim' is odd: rotary embeddings turn pairs of dimensions");
  if (attentionDropout >= 1)
    c.fail("'attention_dropout' is not below 1");
  std::string rope = "heads = " + std::to_string(heads) + " : i64, kv_heads = " +
                     std::to_string(kv) + " : i64, theta = " + real(theta) + " : f64";
  if (const Value *scaling = c.get("rope_scaling"); scaling && scaling->kind() != Value::Null) {
    const Object *s = scaling->getAsObject();
    if (!s) {
      c.fail("'rope_scaling' is not an object");
    } else {
      Config r(*s);
      std::string type = r.string("rope_type", r.string("type", ""));
      if (type != "llama3") {
        c.fail("'rope_scaling' of type '" + type + "' is not one mtc supports (llama3 is)");
      } else {
        rope += ", scaling_factor = " + real(r.number("factor", 8)) + " : f64";
        rope += ", low_freq_factor = " + real(r.number("low_freq_factor", 1)) + " : f64";
        rope += ", high_freq_factor = " + real(r.number("high_freq_factor", 4)) + " : f64";
        rope += ", original_positions = " +
                std::to_string(r.integer("original_max_position_embeddings", 8192).value_or(1)) +
                " : i64";
      }
      if (std::string e = r.error(); !e.empty())
        c.fail("rope_scaling: " + e);
    }
  }
  if (!c.error().empty())
    return false;

  const int64_t q = heads * d, qkv = (heads + 2 * kv) * d;
  const std::string normal = "normal(" + real(std) + ")";
  const std::string output = "normal(" + real(std / std::sqrt(2.0 * layers)) + ")";
  const std::string epsilon = "{epsilon = " + real(eps) + " : f64}";
  Writer w;
  auto &os = w.os;
  os << "// " << name << ": a LlamaForCausalLM of " << layers << " layers, hidden " << h << ", "
     << heads << " query heads of " << d << " sharing " << kv << " key/value heads, SwiGLU MLP of "
     << ffn << ", vocabulary " << vocab << ", " << positions << " positions"
     << (tied ? ", output layer tied to the embedding" : "") << ".\n"
     << "// Written by mtc import-config from a transformers config.json.\n";
  os << "module attributes {mt.model = \"" << name << "\", mt.seq_length = " << positions
     << " : i64} {\n";
  os << "  func.func private @block(%x: " << Writer::a(h) << ") -> " << Writer::a(h) << " {\n";
  w.param("n1_w", "input_layernorm.weight", "ones", {h});
  os << "    %n1 = mt.rms_norm %x, %n1_w " << epsilon << " : (" << Writer::a(h) << ", "
     << Writer::t({h}) << ") -> " << Writer::a(h) << "\n";
  w.param("qkv_w", "self_attn.qkv.weight", normal, {qkv, h});
  w.linear("qkv", "n1", "qkv_w", h, qkv);
  os << "    %rqkv = mt.rotary %qkv {" << rope << "} : (" << Writer::a(qkv) << ") -> "
     << Writer::a(qkv) << "\n";
  os << "    %att = mt.attention %rqkv {causal, "
     << (attentionDropout > 0 ? "dropout = " + real(attentionDropout) + " : f64, " : "")
     << "heads = " << heads << " : i64, kv_heads = " << kv << " : i64} : (" << Writer::a(qkv)
     << ") -> " << Writer::a(q) << "\n";
  w.param("o_w", "self_attn.o_proj.weight", output, {h, q});
  w.linear("o", "att", "o_w", q, h);
  w.add("r1", "x", "o", h);
  w.param("n2_w", "post_attention_layernorm.weight", "ones", {h});
  os << "    %n2 = mt.rms_norm %r1, %n2_w " << epsilon << " : (" << Writer::a(h) << ", "
     << Writer::t({h}) << ") -> " << Writer::a(h) << "\n";
  w.param("gate_w", "mlp.gate_proj.weight", normal, {ffn, h});
  w.linear("gate", "n2", "gate_w", h, ffn);
  w.param("up_w", "mlp.up_proj.weight", normal, {ffn, h});
  w.linear("up", "n2", "up_w", h, ffn);
  os << "    %act = mt.swiglu %gate, %up : (" << Writer::a(ffn) << ", " << Writer::a(ffn)
     << ") -> " << Writer::a(ffn) << "\n";
  w.param("down_w", "mlp.down_proj.weight", output, {h, ffn});
  w.linear("down", "act", "down_w", ffn, h);
  w.add("r2", "r1", "down", h);
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
  text = w.text;
  return true;
}

bool gpt2(Config &c, llvm::StringRef name, std::string &text) {
  ignoreCommon(c);
  // GPT2DoubleHeadsModel's summary head and the legacy n_ctx (n_positions rules).
  c.ignore({"summary_activation", "summary_first_dropout", "summary_proj_to_labels",
            "summary_type", "summary_use_proj", "task_specific_params", "n_ctx",
            "reorder_and_upcast_attn"});
  const int64_t layers = c.integer("n_layer").value_or(1);
  const int64_t h = c.integer("n_embd").value_or(1);
  const int64_t heads = c.integer("n_head").value_or(1);
  const int64_t ffn = c.integer("n_inner", 4 * h).value_or(1);
  const int64_t vocab = c.integer("vocab_size").value_or(1);
  const int64_t positions = c.integer("n_positions").value_or(1);
  const double eps = c.number("layer_norm_epsilon", 1e-5);
  const double std = c.number("initializer_range", 0.02);
  const double embd = c.number("embd_pdrop", 0.1), attn = c.number("attn_pdrop", 0.1),
               resid = c.number("resid_pdrop", 0.1);
  // Hugging Face's names for GELU's forms: the tanh approximation, or exact ("gelu").
  const std::string act = c.string("activation_function", "gelu_new");
  const bool exactGelu = act == "gelu";
  if (!exactGelu && act != "gelu_new" && act != "gelu_pytorch_tanh")
    c.fail("'activation_function' " + act +
           " is not a GELU mtc computes (gelu_new, gelu_pytorch_tanh or gelu)");
  if (!c.flag("scale_attn_weights", true))
    c.fail("'scale_attn_weights' is false: mtc's attention scales by 1/sqrt(head_dim)");
  if (c.flag("scale_attn_by_inverse_layer_idx", false))
    c.fail("'scale_attn_by_inverse_layer_idx' is true: mtc scales every layer alike");
  if (h % heads != 0)
    c.fail("'n_head' does not divide 'n_embd'");
  for (double rate : {embd, attn, resid})
    if (rate >= 1)
      c.fail("a dropout rate is not below 1");
  if (!c.error().empty())
    return false;

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
  os << "    %g = mt.gelu %fc" << (exactGelu ? " {approximate = \"none\"}" : "") << " : ("
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
  text = w.text;
  return true;
}

} // namespace

bool modelFromConfig(const Object &config, llvm::StringRef name, std::string &text,
                     std::string &error) {
  if (name.empty() || !llvm::all_of(name, [](char ch) {
        return llvm::isAlnum(ch) || ch == '-' || ch == '_' || ch == '.';
      })) {
    error = "the model's name '" + name.str() + "' is not letters, digits, '-', '_' and '.'";
    return false;
  }
  Config c(config);
  std::string arch;
  if (const llvm::json::Array *list = config.getArray("architectures"); list && list->size() == 1)
    if (std::optional<llvm::StringRef> s = (*list)[0].getAsString())
      arch = s->str();
  bool ok = false;
  if (arch == "LlamaForCausalLM") {
    ok = llama(c, name, text);
  } else if (arch == "GPT2LMHeadModel") {
    ok = gpt2(c, name, text);
  } else {
    error = "'architectures' is not [\"GPT2LMHeadModel\"] or [\"LlamaForCausalLM\"]";
    return false;
  }
  error = c.error();
  return ok && error.empty();
}

} // namespace mtc
