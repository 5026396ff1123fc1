#include "train/HfConfig.h"
#include "core/InputFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <vector>

namespace mt::hf {
namespace {

using json = nlohmann::json;

/// Reads the keys of a JSON object, remembering which it used: the first problem, or
/// else the first key nothing used, is the object's error.
class Keys {
public:
  explicit Keys(const json &object) : object_(object) {}

  /// A positive integer up to 2^31, or `fallback` where the key is absent or null (an
  /// error without one).
  int64_t integer(const char *key, std::optional<int64_t> fallback = {}) {
    if (!fallback && !get(key))
      fail(quote(key) + " is missing");
    return value<int64_t>(
        key, fallback.value_or(1),
        [](const json &v) { // 4096, or 4096.0 as some writers give it
          return v.is_number() && v.get<double>() > 0 && v.get<double>() <= 0x1p31 &&
                 v.get<double>() == std::floor(v.get<double>());
        },
        " is not a positive integer up to 2^31");
  }
  /// A finite number that is not negative, or `fallback`.
  double number(const char *key, double fallback) {
    return value<double>(
        key, fallback,
        [](const json &v) {
          return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0;
        },
        " is not a non-negative number");
  }
  bool flag(const char *key, bool fallback) {
    return value<bool>(key, fallback, [](const json &v) { return v.is_boolean(); },
                       " is not true or false");
  }
  std::string string(const char *key, const std::string &fallback) {
    return value<std::string>(key, fallback, [](const json &v) { return v.is_string(); },
                              " is not a string");
  }
  /// Whether the key is written at all (null included).
  bool written(const char *key) const { return object_.contains(key); }
  /// The key's value; null where it is absent or null.
  const json *get(const char *key) {
    used_.insert(key);
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  /// Keys that change nothing mtc trains.
  void ignore(std::initializer_list<const char *> keys) { used_.insert(keys.begin(), keys.end()); }
  void fail(const std::string &why) {
    if (error_.empty())
      error_ = why;
  }
  std::string error() const {
    if (!error_.empty())
      return error_;
    std::vector<std::string> unknown;
    for (const auto &item : object_.items())
      if (!used_.count(item.key()))
        unknown.push_back(item.key());
    std::sort(unknown.begin(), unknown.end());
    return unknown.empty() ? "" : quote(unknown.front()) + " is not an option mtc supports";
  }
  static std::string quote(const std::string &key) { return "'" + key + "'"; }

private:
  /// The key's value where `accepted` takes it; `fallback` where it is absent or null, or
  /// (failing with `why`) where `accepted` refuses it.
  template <typename T, typename Accepted>
  T value(const char *key, T fallback, Accepted accepted, const char *why) {
    const json *v = get(key);
    if (!v)
      return fallback;
    if (!accepted(*v)) {
      fail(quote(key) + why);
      return fallback;
    }
    return v->get<T>();
  }

  const json &object_;
  std::set<std::string> used_;
  std::string error_;
};

/// The weights' dtypes a config may name: torch's name, safetensors'.
const std::pair<const char *, const char *> kDTypes[] = {
    {"bfloat16", "BF16"}, {"float16", "F16"}, {"float32", "F32"}};

/// safetensors' name of a torch dtype ("bfloat16" -> "BF16"), or empty.
std::string dtypeNamed(const std::string &torch) {
  for (const auto &[t, safetensors] : kDTypes)
    if (torch == t)
      return safetensors;
  return "";
}

/// A rotary embedding's settings: `rope_type` (or 4.x's `type`), and with it LLaMA 3.1's
/// frequency bands, from `r`; where `rope_theta` is among them (transformers 5), theta too.
void ropeType(Keys &k, Keys &r, const char *key, ModelConfig &c) {
  const std::string type = r.string("rope_type", r.string("type", "default"));
  if (type == "llama3")
    c.ropeScaling = ModelConfig::RopeScaling{
        r.number("factor", 8), r.number("low_freq_factor", 1), r.number("high_freq_factor", 4),
        r.integer("original_max_position_embeddings", 8192)};
  else if (type != "default")
    k.fail(Keys::quote(key) + " of type '" + type +
           "' is not one mtc supports (default and llama3 are)");
  // transformers 5 writes it for Phi-3 (1.0); Phi-4-mini turns 3/4 of each head.
  if (r.number("partial_rotary_factor", 1) != 1)
    k.fail(std::string(key) + ": 'partial_rotary_factor' is not 1: mtc's rotary embedding "
                              "turns every dimension of a head");
  if (std::string e = r.error(); !e.empty())
    k.fail(std::string(key) + ": " + e);
}

/// LLaMA's rotary embedding, in either spelling: transformers 5's `rope_parameters`
/// ({rope_type, rope_theta, and LLaMA 3.1's factor, low_freq_factor, high_freq_factor,
/// original_max_position_embeddings}), or 4.x's `rope_theta` and `rope_scaling`.
void rope(Keys &k, ModelConfig &c, double defaultTheta) {
  if (const json *parameters = k.get("rope_parameters")) {
    if (k.get("rope_theta") || k.get("rope_scaling"))
      return k.fail("'rope_parameters' and 'rope_theta' or 'rope_scaling' are both given");
    if (!parameters->is_object())
      return k.fail("'rope_parameters' is not an object");
    Keys r(*parameters);
    c.ropeTheta = r.number("rope_theta", defaultTheta);
    return ropeType(k, r, "rope_parameters", c);
  }
  c.ropeTheta = k.number("rope_theta", defaultTheta);
  const json *scaling = k.get("rope_scaling");
  if (!scaling)
    return;
  if (!scaling->is_object())
    return k.fail("'rope_scaling' is not an object");
  Keys r(*scaling);
  ropeType(k, r, "rope_scaling", c);
}

/// `sliding_window` (`absent` where the config leaves it out, as its config class
/// defaults it; null: none), as the window of mtc's attention. One spanning the sequence
/// trained is dropped once that is known (mt-specialize): a rotary model may train on
/// sequences longer than its positions, which the window would mask.
int64_t slidingWindow(Keys &k, std::optional<int64_t> absent) {
  return k.written("sliding_window") ? k.integer("sliding_window", 0) : absent.value_or(0);
}

/// What an architecture's transformers config class takes for a key config.json leaves
/// out, where it differs from LlamaConfig's (a key/value head per head, head_dim
/// hidden_size/num_attention_heads, 1e-6, 10000): the model mtc builds is the one
/// transformers builds from the same file.
struct Defaults {
  Defaults(std::optional<int64_t> kvHeads = {}, std::optional<int64_t> headDim = {},
           std::optional<int64_t> ffn = {}, double normEpsilon = 1e-6, double ropeTheta = 10000)
      : kvHeads(kvHeads), headDim(headDim), ffn(ffn), normEpsilon(normEpsilon),
        ropeTheta(ropeTheta) {}
  std::optional<int64_t> kvHeads, headDim;
  std::optional<int64_t> ffn; // intermediate_size, where the model does not use it
  double normEpsilon, ropeTheta;
};

/// LLaMA's decoder, as every architecture but GPT-2 has it.
void decoder(Keys &k, ModelConfig &c, const Defaults &defaults = {}) {
  c.layers = k.integer("num_hidden_layers");
  c.hidden = k.integer("hidden_size");
  c.heads = k.integer("num_attention_heads");
  c.kvHeads = k.integer("num_key_value_heads", defaults.kvHeads.value_or(c.heads));
  c.headDim = k.integer("head_dim", defaults.headDim.value_or(c.hidden / c.heads));
  c.ffn = k.integer("intermediate_size", defaults.ffn);
  c.positions = k.integer("max_position_embeddings");
  c.normEpsilon = k.number("rms_norm_eps", defaults.normEpsilon);
  c.attentionDropout = k.number("attention_dropout", 0);
  c.tied = k.flag("tie_word_embeddings", false);
  if (k.string("hidden_act", "silu") != "silu")
    k.fail("'hidden_act' is not silu (mtc's LLaMA MLP is SwiGLU)");
  if (c.heads % c.kvHeads != 0)
    k.fail("'num_key_value_heads' does not divide 'num_attention_heads'");
  if (c.headDim % 2 != 0)
    k.fail("'head_dim' is odd: rotary embeddings turn pairs of dimensions");
  if (c.attentionDropout >= 1)
    k.fail("'attention_dropout' is not below 1");
  rope(k, c, defaults.ropeTheta);
}

/// LlamaForCausalLM: biases on the attention's projections or none.
void llama(Keys &k, ModelConfig &c) {
  decoder(k, c);
  c.qkvBias = c.outputBias = k.flag("attention_bias", false);
  if (k.flag("mlp_bias", false))
    k.fail("'mlp_bias' is true: mtc's LLaMA MLP has no biases");
}

/// MistralForCausalLM: LLaMA's decoder, its window spanning every position (v0.2 on).
void mistral(Keys &k, ModelConfig &c) {
  decoder(k, c, Defaults(8));
  c.window = slidingWindow(k, 4096);
}

/// Qwen's windows: `sliding_window` (4096 where left out) where `use_sliding_window` says
/// so; in Qwen2's and Qwen3's layers from `max_window_layers` on, or (transformers 5) in
/// those `layer_types` calls "sliding_attention"; in every layer of Qwen3-MoE (`layered`
/// false), which reads neither. mtc's layers are alike: the window is in all or none.
void qwenAttention(Keys &k, ModelConfig &c, bool layered) {
  const bool use = k.flag("use_sliding_window", false);
  const int64_t span = slidingWindow(k, 4096);
  if (!layered) {
    k.ignore({"max_window_layers"});
    c.window = use ? span : 0;
    return;
  }
  // 0 is a count transformers takes here (every layer), as integer() does not.
  const double from = k.number("max_window_layers", 28);
  if (from != std::floor(from))
    k.fail("'max_window_layers' is not an integer");
  const json *types = k.get("layer_types");
  if (types && !(types->is_array() && static_cast<int64_t>(types->size()) == c.layers &&
                 std::all_of(types->begin(), types->end(), [](const json &t) {
                   return t.is_string() && (t.get<std::string>() == "full_attention" ||
                                            t.get<std::string>() == "sliding_attention");
                 })))
    return k.fail("'layer_types' is not 'full_attention' or 'sliding_attention' for each of "
                  "the 'num_hidden_layers'");
  int64_t windowed = 0; // the layers whose attention has the window
  for (int64_t i = 0; use && span > 0 && i < c.layers; ++i)
    windowed += types ? (*types)[i].get<std::string>() == "sliding_attention"
                      : static_cast<double>(i) >= from;
  if (windowed != 0 && windowed != c.layers)
    return k.fail(cat("a sliding window in ", windowed, " of the ", c.layers, " layers (",
                      types ? "'layer_types'" : "'max_window_layers'",
                      "): mtc's layers are alike"));
  c.window = windowed ? span : 0;
}

/// Qwen2ForCausalLM: LLaMA's decoder with biases on the query, key and value projections.
void qwen2(Keys &k, ModelConfig &c) {
  decoder(k, c, Defaults(32));
  c.qkvBias = true;
  qwenAttention(k, c, true);
}

/// Qwen3's attention (Qwen3ForCausalLM's and Qwen3MoeForCausalLM's): each query and key
/// head RMS-normalised before the rotation; biases as attention_bias says (none in
/// Qwen3's own); Qwen's windows, by layer or (`layered` false) in all.
void qwen3Attention(Keys &k, ModelConfig &c, bool layered) {
  c.qkNorm = true;
  c.qkvBias = c.outputBias = k.flag("attention_bias", false);
  qwenAttention(k, c, layered);
}

/// Qwen3ForCausalLM: LLaMA's decoder with Qwen3's attention.
void qwen3(Keys &k, ModelConfig &c) {
  decoder(k, c, Defaults(32, 128));
  qwen3Attention(k, c, true);
}

/// Phi3ForCausalLM: LLaMA's decoder (transformers builds it as Mistral's), its query, key
/// and value projections one matrix (qkv_proj) and its MLP's gate and up projections one
/// (gate_up_proj, the gate's rows first); dropout on each block's two outputs before
/// their residual adds (resid_pdrop); a window where sliding_window gives one
/// (Phi-3-mini-4k's 2047 of 4096). transformers' Phi-3 reads neither embd_pdrop (its
/// embedding has no dropout) nor attention_bias (its projections have no biases), nor
/// original_max_position_embeddings but for long RoPE, which mtc refuses; auto_map names
/// the remote code that transformers' own Phi3ForCausalLM stands in for.
void phi3(Keys &k, ModelConfig &c) {
  decoder(k, c, Defaults({}, {}, {}, 1e-5));
  c.window = slidingWindow(k, std::nullopt);
  c.residualDropout = k.number("resid_pdrop", 0);
  if (c.residualDropout >= 1)
    k.fail("'resid_pdrop' is not below 1");
  // Refused wherever it is not 1 (transformers reads the top-level key only where the
  // rotary settings leave it out: mtc refuses a little more than it must).
  if (k.number("partial_rotary_factor", 1) != 1)
    k.fail("'partial_rotary_factor' is not 1: mtc's rotary embedding turns every dimension "
           "of a head");
  if (c.ropeScaling) // Phi3Config takes default and longrope only
    k.fail("a rotary type of llama3 is not one Phi-3 takes (default or longrope)");
  k.ignore({"embd_pdrop", "attention_bias", "original_max_position_embeddings", "auto_map"});
}

/// A mixture's experts (`count` names their number), each token's top k, and the
/// load-balancing loss's coefficient.
void mixture(Keys &k, ModelConfig &c, const char *count) {
  c.experts = k.integer(count);
  c.topk = k.integer("num_experts_per_tok");
  c.auxLossCoeff = k.number("router_aux_loss_coef", 0.001);
  // Whether transformers adds the load-balancing loss to the loss it returns; mtc's
  // router carries it in the gradient either way.
  k.flag("output_router_logits", false);
  if (c.topk > c.experts)
    k.fail("'num_experts_per_tok' exceeds " + Keys::quote(count));
}

/// MixtralForCausalLM: LLaMA's decoder with a sparse mixture of SwiGLU experts.
void mixtral(Keys &k, ModelConfig &c) {
  decoder(k, c, Defaults(8, {}, {}, 1e-5, 1e6));
  c.window = slidingWindow(k, std::nullopt);
  mixture(k, c, "num_local_experts");
  if (k.number("router_jitter_noise", 0) != 0)
    k.fail("'router_jitter_noise' is not 0: mtc's routing is deterministic");
}

/// Qwen3MoeForCausalLM: Qwen3's attention, and in every layer a mixture of SwiGLU
/// experts of `moe_intermediate_size` (the dense `intermediate_size` unused), the gates
/// renormalised over a token's top k where `norm_topk_prob` says so.
void qwen3Moe(Keys &k, ModelConfig &c) {
  decoder(k, c, Defaults(4, {}, 6144));
  qwen3Attention(k, c, false);
  // transformers 4 writes num_experts; 5 the attribute it maps to, num_local_experts.
  const bool five = k.written("num_local_experts");
  if (five && k.written("num_experts"))
    return k.fail("'num_experts' and 'num_local_experts' are both given");
  mixture(k, c, five ? "num_local_experts" : "num_experts");
  c.ffn = k.integer("moe_intermediate_size", 768);
  c.preSoftmax = !k.flag("norm_topk_prob", false);
  if (k.integer("decoder_sparse_step", 1) != 1)
    k.fail("'decoder_sparse_step' is not 1: mtc's layers are alike, each a mixture");
  if (const json *dense = k.get("mlp_only_layers"); dense && !(dense->is_array() && dense->empty()))
    k.fail("'mlp_only_layers' is not empty: mtc's layers are alike, each a mixture");
}

void gpt2(Keys &k, ModelConfig &c) {
  // GPT2DoubleHeadsModel's summary head and the legacy n_ctx (n_positions rules).
  k.ignore({"summary_activation", "summary_first_dropout", "summary_proj_to_labels",
            "summary_type", "summary_use_proj", "task_specific_params", "n_ctx",
            "reorder_and_upcast_attn"});
  c.layers = k.integer("n_layer");
  c.hidden = k.integer("n_embd");
  c.heads = c.kvHeads = k.integer("n_head");
  c.headDim = c.hidden / c.heads;
  c.ffn = k.integer("n_inner", 4 * c.hidden);
  c.positions = k.integer("n_positions");
  // transformers 5 writes these for every GPT-2; mtc's has no cross-attention, and ties.
  if (k.flag("add_cross_attention", false))
    k.fail("'add_cross_attention' is true: mtc's GPT-2 has no cross-attention");
  c.tied = k.flag("tie_word_embeddings", true);
  if (!c.tied)
    k.fail("'tie_word_embeddings' is false: mtc's GPT-2 ties its output layer to wte");
  c.normEpsilon = k.number("layer_norm_epsilon", 1e-5);
  c.embeddingDropout = k.number("embd_pdrop", 0.1);
  c.attentionDropout = k.number("attn_pdrop", 0.1);
  c.residualDropout = k.number("resid_pdrop", 0.1);
  // Hugging Face's names for GELU's forms: the tanh approximation, or exact ("gelu").
  const std::string act = k.string("activation_function", "gelu_new");
  c.exactGelu = act == "gelu";
  if (!c.exactGelu && act != "gelu_new" && act != "gelu_pytorch_tanh")
    k.fail("'activation_function' " + act +
           " is not a GELU mtc computes (gelu_new, gelu_pytorch_tanh or gelu)");
  if (!k.flag("scale_attn_weights", true))
    k.fail("'scale_attn_weights' is false: mtc's attention scales by 1/sqrt(head_dim)");
  if (k.flag("scale_attn_by_inverse_layer_idx", false))
    k.fail("'scale_attn_by_inverse_layer_idx' is true: mtc scales every layer alike");
  if (c.hidden % c.heads != 0)
    k.fail("'n_head' does not divide 'n_embd'");
  for (double rate : {c.embeddingDropout, c.attentionDropout, c.residualDropout})
    if (rate >= 1)
      k.fail("a dropout rate is not below 1");
}

} // namespace

ExpertNames expertNames(const ModelConfig &c) {
  return c.architecture == "Qwen3MoeForCausalLM"
             ? ExpertNames{"mlp.", "gate_proj", "up_proj", "down_proj"}
             : ExpertNames{"block_sparse_moe.", "w1", "w3", "w2"};
}

std::string torchDtypeName(const std::string &dtype) {
  for (const auto &[torch, safetensors] : kDTypes)
    if (dtype == safetensors)
      return torch;
  return "";
}

Status parseModelConfig(const std::string &text, ModelConfig &c) {
  json object;
  try {
    object = json::parse(text);
  } catch (const json::parse_error &e) { // its position only: never the text it read
    return Status::failure(cat("not JSON (a syntax error at byte ", e.byte, ")"));
  } catch (const json::exception &) { // a number past a double's range, as 1E8000
    return Status::failure("not JSON mtc reads (a number out of range)");
  }
  if (!object.is_object())
    return Status::failure("not a JSON object");
  Keys k(object);
  const json *list = k.get("architectures");
  const std::string arch = list && list->is_array() && list->size() == 1 && (*list)[0].is_string()
                               ? (*list)[0].get<std::string>()
                               : "";
  // Each architecture mtc trains, with the reader of its keys.
  const std::pair<const char *, void (*)(Keys &, ModelConfig &)> readers[] = {
      {"GPT2LMHeadModel", gpt2},         {"LlamaForCausalLM", llama},
      {"MistralForCausalLM", mistral},   {"Qwen2ForCausalLM", qwen2},
      {"Qwen3ForCausalLM", qwen3},       {"MixtralForCausalLM", mixtral},
      {"Qwen3MoeForCausalLM", qwen3Moe}, {"Phi3ForCausalLM", phi3}};
  const auto reader = std::find_if(std::begin(readers), std::end(readers),
                                   [&](const auto &r) { return arch == r.first; });
  if (reader == std::end(readers)) {
    std::string known;
    for (const auto &r : readers)
      known += std::string(known.empty() ? "" : ", ") + "[\"" + r.first + "\"]";
    // Quoted where flat: dumping nests recurses, as deep as a hostile file makes them.
    const bool flat = list && std::none_of(list->begin(), list->end(),
                                           [](const json &e) { return e.is_structured(); });
    return Status::failure("'architectures' is " +
                           (!list  ? std::string("missing")
                            : flat ? list->dump().substr(0, 200)
                                   : std::string("a nested ") + list->type_name()) +
                           ", not one of " + known);
  }
  c = ModelConfig{};
  c.architecture = arch;
  c.llama = arch != "GPT2LMHeadModel";
  // Keys every transformers config may carry that change nothing mtc trains.
  k.ignore({"_name_or_path", "transformers_version", "bos_token_id", "eos_token_id",
            "pad_token_id", "use_cache", "pretraining_tp"});
  c.modelType = k.string("model_type", "");
  // transformers 5's dtype, or 4.x's torch_dtype.
  const std::string dtype = k.string("dtype", "");
  c.dtype = dtypeNamed(!dtype.empty() ? dtype : k.string("torch_dtype", "float32"));
  c.vocab = k.integer("vocab_size");
  c.initStd = k.number("initializer_range", 0.02);
  reader->second(k, c);
  if (std::string e = k.error(); !e.empty())
    return Status::failure(e);
  return Status::success();
}

Status readModelConfig(const std::string &path, ModelConfig &config, std::string *text) {
  std::string read;
  MT_TRY(readRegularFile(path, limits::kConfigBytes, "a config.json", read));
  if (Status s = parseModelConfig(read, config); !s.ok())
    return Status::failure(path + ": " + s.message());
  if (text)
    *text = std::move(read);
  return Status::success();
}

} // namespace mt::hf
