// The compile pipeline of DESIGN.md, as pass managers: one place to read the flow.
#ifndef MT_COMPILER_PIPELINE_H
#define MT_COMPILER_PIPELINE_H

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>
#include <utility>

namespace mtc {

/// Megatron's fusions, each a pass, all on unless switched off.
struct Fusions {
  bool biasGelu = true;         // mt-fuse-epilogues
  bool biasDropout = true;      // mt-fuse-bias-dropout-add
  bool biasGrad = true;         // mt-fuse-bias-grad
  bool crossEntropy = true;     // mt-fuse-cross-entropy
  bool gradAccumulation = true; // mt-fuse-grad-accumulation
  bool normGradAdd = true;      // mt-fuse-norm-grad-add
};
/// The switch that turns each off (Megatron's spelling, where Megatron has one), and its
/// field.
inline constexpr std::pair<const char *, bool Fusions::*> kFusionSwitches[] = {
    {"no-bias-gelu-fusion", &Fusions::biasGelu},
    {"no-bias-dropout-fusion", &Fusions::biasDropout},
    {"no-bias-grad-fusion", &Fusions::biasGrad},
    {"no-cross-entropy-loss-fusion", &Fusions::crossEntropy},
    {"no-gradient-accumulation-fusion", &Fusions::gradAccumulation},
    {"no-norm-grad-add-fusion", &Fusions::normGradAdd}};

struct CompileOptions {
  int64_t microBatchSize = 0;
  int64_t globalBatchSize = 0;
  int64_t seqLength = 0;     // 0: the model's positions
  // Megatron's --make-vocab-size-divisible-by: the vocabulary is padded to a multiple of
  // this times tp, as Megatron pads it (so a vocabulary-parallel split always divides).
  int64_t vocabMultiple = 128;
  // Megatron's --attention-dropout and --hidden-dropout; negative: the model's rates.
  double attentionDropout = -1, hiddenDropout = -1;
  // Megatron-Core's --moe-expert-capacity-factor; 0: dropless; negative: the model's. And
  // its --moe-token-drop-policy: probs (the largest gates kept) or position (the first).
  double capacityFactor = -1;
  std::string dropPolicy = "probs";
  std::string precision = "f32"; // f32, f64, bf16 or f16: weights and activations
  int64_t tp = 1, dp = 1, pp = 1, virtualStages = 1;
  int64_t cp = 1; // context parallelism (Megatron's --context-parallel-size)
  int64_t ep = 1; // expert parallelism (Megatron's --expert-model-parallel-size)
  std::string cpCommType = "all-gather";             // all-gather | p2p (Megatron's --cp-comm-type)
  int64_t firstStageLayers = 0, lastStageLayers = 0; // an uneven pipeline split
  bool sequenceParallel = false;
  std::string attention = "fused"; // fused | unfused (mt-unfuse-attention)
  std::string recompute = "none"; // none | selective | full
  std::string recomputeMethod = "uniform";
  int64_t recomputeLayers = 1;
  Fusions fusions;
  bool printIRAfterAll = false;
};

/// What changes the model itself, before any lowering: mt-pad-vocab to vocabMultiple x tp,
/// and mt-set-dropout where a rate is given. Running it again for a larger tp pads further.
mlir::LogicalResult prepareModel(mlir::ModuleOp module, const CompileOptions &options);

/// expand → specialize → context parallel → tensor parallel → autodiff → recompute → keep attention
/// statistics → pipeline partition → fuse epilogues → fuse cross-entropy → memory plan: @forward
/// becomes a memory-planned @train_step for one rank. The verifier runs after every pass.
mlir::LogicalResult lowerToTrainStep(mlir::ModuleOp module, const CompileOptions &options);

} // namespace mtc

#endif
