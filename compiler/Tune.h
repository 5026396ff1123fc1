// `mtc tune`: every layout of a model on N GPUs that divides, estimated, ranked.
//
// Lowering is what costs time, and most of a layout does not change what one chunk
// computes: a chunk of k layers lowers the same whether it is one of 4 or one of 128.
// So the tuner lowers, per (tp, sp, micro-batch size, recomputation, k), a copy of the
// model cut to 3k layers on 3 stages — a first chunk (the embedding and k layers), a
// middle one and a last one (k layers and the loss) — and builds every layout with
// chunks of k layers from those three. Its figures equal `mtc estimate`'s for the same
// flags (test/lit/mtc/tune.test).
#ifndef MT_COMPILER_TUNE_H
#define MT_COMPILER_TUNE_H

#include "compiler/Estimate.h"

#include <optional>

namespace mtc {

struct TuneRequest {
  int64_t gpus = 0, globalBatchSize = 0, seqLength = 0, vocabMultiple = 128;
  std::string precision = "f32";
  int64_t bucketBytes = 40000000;
  int64_t maxTp = 0;           // 0: the GPUs of a node
  // Context parallelism is searched up to this (0: a node's GPUs for a sequence of
  // kLongSequence positions or more, else none).
  int64_t maxCp = 0;
  int64_t maxMicroBatch = 8;   // micro-batch sizes 1, 2, 4, ... up to this
  // Fixed by the user, else searched.
  std::optional<int64_t> tp, pp, vpp, cp, microBatchSize;
  std::optional<std::string> recompute;
  Fusions fusions;
};

struct TuneCandidate {
  StepLayout layout;
  StepEstimate estimate;
  std::string rejected; // why it was dropped, or "" when it fits
};

struct TuneResult {
  std::vector<TuneCandidate> fitting;  // fastest first
  std::vector<TuneCandidate> rejected; // in search order
  int64_t lowerings = 0;               // modules lowered
  std::string error;                   // why nothing could be searched
};

/// The sequence from which `mtc tune` searches context parallelism by default.
inline constexpr int64_t kLongSequence = 16384;

/// Searches tp, pp, vpp, cp, dp, micro-batch size, sequence parallelism, recomputation and
/// the distributed optimizer for `model` (parsed, vocabulary padded, not lowered).
TuneResult tune(mlir::ModuleOp model, const SystemSpec &system, const TuneRequest &request);

/// The layout's parallelism, batch and memory flags, as `mtc compile` spells them
/// (precision and sequence length are the search's, the same for every candidate).
std::string layoutFlags(const StepLayout &layout);

} // namespace mtc

#endif
