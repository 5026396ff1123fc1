// A transformers config.json of a model mtc trains (GPT2LMHeadModel, and LLaMA's decoder:
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// MixtralForCausalLM, Qwen3MoeForCausalLM, Phi3ForCausalLM), read once for everything that
// reads one: `mtc import-config`, which writes the model, and `mtckpt import-hf`/`export-hf`,
// which convert its weights. Every key is either honoured, known to change nothing mtc trains, or refused by
// name, so that no two readers can disagree about what a config means.
#ifndef MT_RUNTIME_TRAIN_HFCONFIG_H
#define MT_RUNTIME_TRAIN_HFCONFIG_H

#include "core/Status.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mt::hf {

struct ModelConfig {
  std::string architecture; // the config's one entry of `architectures`
  bool llama = false;       // LLaMA's decoder (every architecture but GPT2LMHeadModel)
  std::string modelType; // model_type; empty where the config has none
  // Dimensions, each a positive integer up to 2^31 so that no product of a few overflows.
  int64_t layers = 0, hidden = 0, heads = 0, kvHeads = 0, headDim = 0, ffn = 0, vocab = 0,
          positions = 0;
  bool tied = false; // the output layer is the embedding (always, in GPT-2)
  double normEpsilon = 0, initStd = 0;
  std::string dtype; // the weights' (torch_dtype, or dtype) as safetensors spells it; "" if
                     // none of BF16, F16, F32
  // GPT-2 (residualDropout: Phi-3's too, on each block's two outputs)
  double embeddingDropout = 0, attentionDropout = 0, residualDropout = 0;
  bool exactGelu = false; // activation_function "gelu": x·Φ(x); else the tanh approximation
  // LLaMA (attentionDropout too)
  double ropeTheta = 0;
  // Biases of the fused QKV projection (Qwen2; LLaMA's and Qwen3's attention_bias) and of
  // the output projection (LLaMA's and Qwen3's attention_bias): mtc's LLaMA has no others.
  bool qkvBias = false, outputBias = false;
  // Qwen3: each query and key head RMS-normalised (q_norm, k_norm) before the rotation.
  bool qkNorm = false;
  // Every layer's sliding window: each query sees its own position and the window − 1
  // before it (Mistral's sliding_window); 0: every earlier position.
  int64_t window = 0;
  struct RopeScaling { // rope_scaling of type llama3 (LLaMA 3.1)
    double factor = 0, lowFreqFactor = 0, highFreqFactor = 0;
    int64_t originalPositions = 0;
  };
  std::optional<RopeScaling> ropeScaling;
  // Mixtral, Qwen3-MoE: the MLP a mixture of `experts` experts of `ffn`, `topk` a token,
  // the load-balancing loss's coefficient; 0 experts: LLaMA's dense MLP. The gates are
  // the softmax over a token's top k logits (Mixtral's, Qwen's norm_topk_prob), or with
  // `preSoftmax` the top k of the softmax over all of them.
  int64_t experts = 0, topk = 0;
  double auxLossCoeff = 0;
  bool preSoftmax = false;
};

/// A mixture's parameters: `prefix` + "gate.weight" its router's, and its experts'
/// SwiGLU matrices, each stacked [E, ...] in mtc as `prefix` + "experts." + gate (up,
/// down), and in Hugging Face's files one per expert, `prefix` + "experts.<e>." + gate +
/// ".weight".
struct ExpertNames {
  const char *prefix, *gate, *up, *down;
};
/// Mixtral's (block_sparse_moe., w1, w3, w2) or Qwen3-MoE's (mlp., gate_proj, up_proj,
/// down_proj).
ExpertNames expertNames(const ModelConfig &config);

/// torch's name of a dtype safetensors calls `dtype` ("BF16" -> "bfloat16"), as config.json
/// writes it; empty for one a config cannot name.
std::string torchDtypeName(const std::string &dtype);

/// `text` (a config.json's) as a model mtc trains; a failure says why, naming the key.
Status parseModelConfig(const std::string &text, ModelConfig &config);
/// The config.json at `path` (its text in `text`, where given); a failure names the file.
Status readModelConfig(const std::string &path, ModelConfig &config, std::string *text = nullptr);

} // namespace mt::hf

#endif
