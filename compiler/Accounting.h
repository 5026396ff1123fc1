// What mtc reports before anything runs: parameters, FLOPs and bytes per rank.
#ifndef MT_COMPILER_ACCOUNTING_H
#define MT_COMPILER_ACCOUNTING_H

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mtc {

/// Exact parameter count of a model, expanded or not: a repeated block counts once
/// per repetition.
int64_t countParameters(mlir::ModuleOp module);

/// The shape of a GPT-3-style model as the accounting formulas see it.
struct GptShape {
  int64_t layers = 0, hidden = 0, vocab = 0, positions = 0;
};
/// Recognised from an unexpanded model: one mt.repeat over the blocks, one
/// embedding table [V, h], one position table [s_max, h].
std::optional<GptShape> recogniseGpt(mlir::ModuleOp module);

/// Narayanan et al. (2021), eq. 3: F = 72·B·s·l·h²·(1 + s/(6h) + V/(12lh)),
/// i.e. exactly 72Bslh² + 12Bs²lh + 6BshV.
unsigned __int128 gptModelFlops(const GptShape &g, int64_t batch, int64_t seq);

/// Sums of the op cost interface over one function (one micro-batch).
struct OpCosts {
  int64_t gemmFlops = 0, otherFlops = 0;
};
OpCosts sumOpCosts(mlir::ModuleOp module);

/// Bytes each rank holds: weights, gradients and Adam's two moments in the training
/// precision; activations are the arena's planned peak.
struct MemoryReport {
  int64_t weights = 0, gradients = 0, optimizer = 0, activations = 0;
  int64_t total() const { return weights + gradients + optimizer + activations; }
};

/// Bytes that forward ops of layer `layer` (mt.layer) produce and backward reads: what
/// the layer keeps for backward per micro-batch, Korthikanti et al.'s "activation
/// memory per layer". Needs the whole step in one function (no pipeline partition).
std::optional<int64_t> savedBytesOfLayer(mlir::ModuleOp module, int64_t layer);

/// 1234567 -> "1,234,567".
std::string withCommas(unsigned __int128 value);

} // namespace mtc

#endif
