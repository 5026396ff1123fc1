// Hugging Face checkpoints in and out. A transformers directory of a GPT2LMHeadModel or of
// LLaMA's decoder (runtime/train/HfConfig.h: LLaMA, Mistral, Qwen2, Qwen3, Mixtral,
// Qwen3-MoE; config.json, and model.safetensors or its shards with
// model.safetensors.index.json; bf16, fp16 or fp32) becomes an mtc checkpoint of weights
// alone, which mtrun --load starts training from under any layout; an mtc checkpoint
// goes back out as such a directory. Names, the fused QKV (GPT-2's c_attn columns Q|K|V,
// LLaMA's q/k/v projections; mtc's by key/value group), GPT-2's transposed Conv1D
// weights and tied output layers are converted; every other tensor must be one the
// model recomputes (causal masks, rotary frequencies) or the conversion is refused.
#ifndef MT_TOOLS_MTCKPT_HUGGINGFACE_H
#define MT_TOOLS_MTCKPT_HUGGINGFACE_H

#include "core/Status.h"

#include <cstdint>
#include <string>

namespace mt::hf {

/// Reads Hugging Face directory `hfDir` into a new weights-only checkpoint of save
/// directory `saveDir`; `report` says what was converted.
Status importDirectory(const std::string &hfDir, const std::string &saveDir,
                       std::string &report);

struct ExportOptions {
  std::string config;                  // the model's config.json
  std::string dtype;                   // BF16, F16 or F32; empty: the config's torch_dtype
  uint64_t maxShardBytes = 5000000000; // as transformers' save_pretrained
};
/// Writes the weights of checkpoint `checkpointDir` as Hugging Face directory `hfDir`.
Status exportDirectory(const std::string &checkpointDir, const std::string &hfDir,
                       const ExportOptions &options, std::string &report);

} // namespace mt::hf

#endif
