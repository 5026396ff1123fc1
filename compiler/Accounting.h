// What mtc reports before anything runs: parameters, FLOPs and bytes per rank.
#ifndef MT_COMPILER_ACCOUNTING_H
#define MT_COMPILER_ACCOUNTING_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mtc {

/// Exact parameter count of a model, expanded or not: a repeated block counts once
/// per repetition.
int64_t countParameters(mlir::ModuleOp module);

/// The shape of a decoder of the zoo as the accounting formulas see it.
struct DecoderShape {
  int64_t layers = 0, hidden = 0, vocab = 0, positions = 0;
  int64_t heads = 0, kvHeads = 0, headDim = 0; // attention's query and key/value heads
  int64_t ffn = 0;                             // the MLP's inner width
  bool gated = false;                          // SwiGLU: three MLP matrices, not two
  int64_t experts = 0, topk = 0; // a mixture of experts: each token's MLP is topk of them
  /// Learned positions (a position table): GPT-3's form, whose formula is Narayanan's.
  bool positionTable = false;
};
/// Recognised from an unexpanded model: one mt.repeat over the blocks, one attention and
/// one MLP activation (gelu, or swiglu) in the block, perhaps over the rows of a mixture
/// of experts (one router), one embedding table [V, h], and a position table [s_max, h]
/// or the module's `mt.seq_length`.
std::optional<DecoderShape> recogniseDecoder(mlir::ModuleOp module);

/// The GEMM FLOPs of one training step (forward, and backward's two GEMMs per forward
/// one) of B sequences of s tokens, as Megatron-LM counts them
/// (megatron/training/training.py, num_floating_point_operations): with n query heads
/// and g key/value heads of d, q = n·d, kv = g·d and m MLP matrices (2, or 3 gated),
///   F = 6·B·s·(l·(2hq + 2h·kv + m·h·f + 2sq) + hV),
/// i.e. 12Bslh²((1 + g/n + s/h)·q/h + (m/2)·f/h + V/(2lh)). For GPT-3's shape (q = kv = h,
/// f = 4h, m = 2) that is Narayanan et al. (2021), eq. 3: 72Bslh² + 12Bs²lh + 6BshV.
unsigned __int128 decoderModelFlops(const DecoderShape &g, int64_t batch, int64_t seq);

/// Sums of the op cost interface over one micro-batch.
struct OpCosts {
  int64_t gemmFlops = 0, otherFlops = 0;
  /// A sum passed 2^63 - 1: the counts are wrong, and whoever reports them refuses to
  /// (a shape that large needs a smaller micro-batch or more parallelism).
  bool overflowed = false;
  void add(int64_t gemm, int64_t other) {
    overflowed |= __builtin_add_overflow(gemmFlops, gemm, &gemmFlops);
    overflowed |= __builtin_add_overflow(otherFlops, other, &otherFlops);
  }
  void add(const OpCosts &other) {
    add(other.gemmFlops, other.otherFlops);
    overflowed |= other.overflowed;
  }
};

/// What a tool says of an account whose FLOPs overflowed.
inline constexpr const char *kFlopsOverflow =
    "one micro-batch's FLOPs on one rank pass 2^63 - 1, more than can be counted: use a "
    "smaller micro-batch or sequence, or more tensor or pipeline parallelism";

/// Bytes each rank holds: weights, gradients and Adam's two moments in the training
/// precision; activations are the arena's planned peak.
struct MemoryReport {
  int64_t weights = 0, gradients = 0, optimizer = 0, activations = 0;
  int64_t total() const { return weights + gradients + optimizer + activations; }
};

/// Bytes per parameter as mtrun holds them, by the element type of the weights (f32,
/// f64, bf16, f16): the weights the programs read, the gradients, and the optimizer's
/// state — Adam's two moments, and under mixed precision the f32 master weights.
struct BytesPerParameter {
  int64_t weights = 4, gradients = 4, optimizer = 8;
  bool mixed = false; // bf16 or f16 compute with f32 master weights (Megatron's)
  static BytesPerParameter of(llvm::StringRef precision);
};

/// What one rank of a lowered training step costs: the model's work per micro-batch
/// (recomputation apart) and the bytes each rank holds, exactly as mtrun allocates them:
/// each pipeline stage's parameters (a tied one counts on each stage that holds it), the
/// arena of its largest program, the stashes of the micro-batches it has in flight, and
/// its ring or exchange staging. `memory` is the stage that holds the most.
struct StepAccount {
  OpCosts costs;            // the model's, per micro-batch and rank
  OpCosts recompute;        // what recomputation adds to it
  int64_t localParameters = 0; // the most any stage holds
  BytesPerParameter bytesPerParameter;
  MemoryReport memory;
  std::vector<MemoryReport> stages; // per pipeline stage (one without a pipeline)
  std::vector<int64_t> stashBytes;  // per pipeline stage: the most held at once
};

/// What one chunk (virtual pipeline stage) of a lowered step holds and computes on one
/// rank: all a step's accounting needs, so that chunks of one shape, profiled once, can
/// account for any number of them.
struct ChunkFootprint {
  OpCosts costs, recompute;    // FLOPs per micro-batch: the model's, and recomputation's
  int64_t arenaBytes = 0;      // the larger arena of its programs
  int64_t ringBytes = 0;       // ring attention's shares in flight (Executor::runRing), or an
                               // expert exchange's staging (Executor::runExchange)
  int64_t stashBytes = 0;      // what its forward keeps for backward, per micro-batch
  int64_t messageBytes = 0;    // the activation it sends on (0 for the last chunk)
  int64_t layerParameters = 0; // elements of the parameters of its layers
  int64_t layerTpReduced = 0;  // of which the gradient is summed over the tp group
  int64_t layerExperts = 0;    // of which experts' weights cut over the expert group
  /// Parameters outside the layers (embeddings, final norm), by name: a stage holding
  /// several chunks (or a tied embedding on two stages) counts each once.
  std::map<std::string, std::pair<int64_t, bool>> sharedParameters; // elements, tp-reduced
};

/// The chunk v of a pipeline program @forward_<v> or @backward_<v>, and which it is.
std::optional<int64_t> chunkOf(mlir::func::FuncOp fn, bool &forward);

/// The footprints of a module lowered by `lowerToTrainStep`: one (@train_step) without a
/// pipeline, else one per virtual stage (@forward_v and @backward_v), in order.
std::vector<ChunkFootprint> chunkFootprints(mlir::ModuleOp module);

/// The elements of the parameters pipeline stage `stage` of `pp` holds, chunks
/// stage, stage + pp, ...; and those of them whose gradient is summed over the tensor-
/// parallel group, that are experts' weights (expert parallelism), and that several
/// stages hold (a tied embedding).
struct StageParameters {
  int64_t all = 0, tpReduced = 0, experts = 0;
  std::vector<std::pair<std::string, int64_t>> shared;
};
StageParameters stageParameters(llvm::ArrayRef<ChunkFootprint> chunks, int64_t pp,
                                int64_t stage);

/// Accounts a step of `pp` stages of `chunks.size() / pp` chunks; `inFlight[s]` is the
/// most micro-batches stage s holds (its schedule's); the distributed optimizer shards
/// the optimizer's state over the `dp` data-parallel ranks (× cp), the experts' over the
/// dp / `ep` ranks holding the same experts.
StepAccount accountChunks(llvm::ArrayRef<ChunkFootprint> chunks, llvm::StringRef precision,
                          int64_t pp, llvm::ArrayRef<int64_t> inFlight, int64_t dp, int64_t ep,
                          bool distributedOptimizer);
/// The same for a lowered module.
StepAccount accountStep(mlir::ModuleOp module, llvm::StringRef precision, int64_t pp,
                        llvm::ArrayRef<int64_t> inFlight, int64_t dp, int64_t ep,
                        bool distributedOptimizer);

/// Bytes that forward ops of layer `layer` (mt.layer) produce and backward reads: what
/// the layer keeps for backward per micro-batch, Korthikanti et al.'s "activation
/// memory per layer". Needs the whole step in one function (no pipeline partition).
std::optional<int64_t> savedBytesOfLayer(mlir::ModuleOp module, int64_t layer);

/// 1234567 -> "1,234,567".
std::string withCommas(unsigned __int128 value);
/// "61.25 GiB", or "1.50 MiB" below a GiB.
std::string binarySize(int64_t bytes);

} // namespace mtc

#endif
