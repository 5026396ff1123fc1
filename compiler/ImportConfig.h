// A Hugging Face transformers config.json (GPT-2, or LLaMA's decoder), as the one
// reader of one (runtime/train/HfConfig.h) gives it, written as an mtc model file: the zoo's
// form, one block repeated, parameter names as mtckpt's Hugging Face converter maps them.
#ifndef MT_COMPILER_IMPORTCONFIG_H
#define MT_COMPILER_IMPORTCONFIG_H

#include "train/HfConfig.h"

#include "llvm/ADT/StringRef.h"

#include <string>

namespace mtc {

/// The model file of `config`, named `name`; on failure, `error` says why.
bool modelFromConfig(const ::mt::hf::ModelConfig &config, llvm::StringRef name,
                     std::string &text, std::string &error);

} // namespace mtc

#endif
