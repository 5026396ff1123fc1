// A Hugging Face transformers config.json (GPT2LMHeadModel or LlamaForCausalLM) as an mtc
// model file: the zoo's form, one block repeated, parameter names as mtckpt's Hugging
// Face converter maps them. Every key is either used, known not to change the model
// (token ids, the saved dtype, ...), or refused by name.
#ifndef MT_COMPILER_IMPORTCONFIG_H
#define MT_COMPILER_IMPORTCONFIG_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <string>

namespace mtc {

/// The model file of `config`, named `name`; on failure, `error` says which key.
bool modelFromConfig(const llvm::json::Object &config, llvm::StringRef name, std::string &text,
                     std::string &error);

} // namespace mtc

#endif
