// A described system for `mtc estimate` and `mtc tune` (systems/*.json): the GPU's
// peak rates and memory, and the links between GPUs, with the cost model that turns a
// matrix product, a memory-bound kernel or a collective into seconds.
#ifndef MT_COMPILER_SYSTEM_H
#define MT_COMPILER_SYSTEM_H

#include "dialects/mt/MtDialect.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mtc {

/// A link GPUs talk over: NVLink within a node, the network between nodes.
struct Link {
  double bandwidth = 0; // bytes per second, per GPU and direction
  double latency = 0;   // seconds per step of a ring
};

/// A family of kernels as calibrated on the system (bench/calibrate.sh): a plan opcode,
/// or one of the step's parts, named as `mtrun --profile` names them. A run's device time
/// is its FLOPs, counted as the profile counts them, over `flops`; or the bytes it moves
/// over `bytes` (rates achieved, per second); or the model's time (measured products,
/// tiles and waves, bytes over bandwidth) over `efficiency`, which keeps the model's
/// dependence on shape; each plus `overhead` seconds, the run's fixed time (which, for an
/// efficiency, adds to the model's own kernel_overhead_us over that efficiency).
struct KernelRate {
  double flops = 0, bytes = 0, efficiency = 0, overhead = 0;
};

/// The rates of single 16-bit products measured over a grid of shapes (bench/calibrate.sh:
/// gpu.gemm_table): every m, n and k of `dims`, the row-major m x k by k x n as mtc counts
/// a product (GemmShape).
struct GemmTable {
  std::vector<int64_t> dims; // ascending
  std::vector<double> logRates; // ln(FLOP/s), in the order [m][n][k]

  /// FLOP/s of an m x k by k x n product: the grid's rates interpolated (trilinearly, in
  /// the logarithms of the dimensions and of the rate), a dimension beyond the grid
  /// taken at its edge.
  double rate(int64_t m, int64_t n, int64_t k) const;
};

/// The step's parts beyond its instructions, named as `mtrun --profile` names them.
constexpr const char *kZeroGradients = "zero gradients";
constexpr const char *kGradientNorm = "gradient norm";
constexpr const char *kOptimizer = "optimizer";

/// The software that runs the step: how it launches kernels and what it overlaps. The
/// default is none of it: every collective waits for the kernels before it, and the
/// kernels for it.
struct RuntimeSpec {
  std::string name = "no overlap";
  /// The host's seconds per launch: kernels launched one by one go through a launch
  /// queue (Estimate.h: LaunchQueue); with `graphs`, each stretch of a pass between its
  /// collectives is one recorded graph, a single launch.
  bool graphs = false;
  double launchGap = 0;
  /// The data-parallel gradient reduction, bucket by bucket, during the last micro-batch's
  /// backward (Megatron-Core's --overlap-grad-reduce): what backward cannot hide, and at
  /// least the last bucket, is exposed.
  bool overlapGradientReduction = false;
  /// The distributed optimizer's all-gather of the updated weights during the next
  /// step's first forward (--overlap-param-gather): at least the first bucket is exposed.
  bool overlapParameterGather = false;
  /// A pipeline message under tensor parallelism sent as tp pieces, one per rank, then
  /// all-gathered within the node (Megatron's scatter/gather optimisation).
  bool pipelineScatterGather = false;
  /// Attention that writes its scores [b, heads, s, s] to memory: batched products on
  /// tensor cores over the whole square, softmax and dropout as memory-bound kernels
  /// between them (Megatron-LM before flash attention), in place of the plan's own kernels.
  bool materializedAttention = false;
  /// Recomputation that reruns each recomputed layer's whole forward, the products whose
  /// results backward never reads included (a checkpointed function run again, as
  /// Megatron's CheckpointFunction does), in place of mt-recompute's copies of what
  /// backward reads.
  bool recomputeWholeLayers = false;

  /// Reads a runtime's fields from a system file's `runtime` or a runtime file
  /// (systems/runtimes/*.json); a field absent keeps its value.
  static bool parse(llvm::StringRef text, RuntimeSpec &out, std::string &error);
  static bool load(const std::string &path, RuntimeSpec &out, std::string &error);
};

/// The file `--runtime` names: a path, or the name of one of systems/runtimes/*.json.
std::string runtimePath(const std::string &nameOrPath);
/// The names of systems/runtimes/*.json, comma-separated.
std::string runtimeNames();

struct SystemSpec {
  std::string name;
  int64_t gpusPerNode = 0;
  std::string gpu;
  double peakBf16 = 0, peakFp16 = 0, peakFp32 = 0, peakFp64 = 0; // FLOP/s, dense
  int64_t memoryBytes = 0;      // HBM capacity
  int64_t reservedBytes = 0;    // of it, what the plan cannot have: the CUDA context,
                                // the libraries' kernels, handles and workspaces
  double memoryBandwidth = 0;   // HBM bytes per second
  int64_t multiprocessors = 0;  // SMs: one GEMM tile each per wave
  int64_t tileM = 0, tileN = 0; // a GEMM's output tile
  double gemmEfficiency = 1;    // of the peak, reached by a full wave of tiles
  double memoryEfficiency = 1;  // of the bandwidth, reached by a streaming kernel
  double kernelOverhead = 0;    // seconds each kernel adds (launch, tail)
  GemmTable gemmTable;          // measured products; none: the tile-and-wave model
  Link intraNode, interNode;
  /// Calibrated families; a family not here is costed by the peaks and efficiencies.
  std::map<std::string, KernelRate> kernels;
  RuntimeSpec runtime;

  /// The HBM a plan's arena and stores may take: the capacity less the reserve.
  int64_t planBytes() const { return memoryBytes - reservedBytes; }

  /// The dense peak for a compute element type (bf16, f16, f32, f64).
  double peak(llvm::StringRef elementType) const;

  /// Reads a system file; a missing, mistyped or unknown field is refused by its path
  /// (e.g. "gpu.memory_bandwidth_gbs").
  static bool load(const std::string &path, SystemSpec &out, std::string &error);
  static bool parse(llvm::StringRef text, SystemSpec &out, std::string &error);
};

/// The file `--system` names: a path, or the name of one of systems/*.json.
std::string systemPath(const std::string &nameOrPath);
/// The names of systems/*.json, comma-separated.
std::string systemNames();

/// The cost model (README, "Estimating"): seconds for one kernel or collective.
/// `batch` products of m x k by k x n in `elementType`: a single bf16 or f16 product at
/// the rate of the system's gemm_table where it has one (a dimension below the grid
/// costing as the grid's smallest); otherwise whole waves of tiles
/// over the multiprocessors at the peak times gemm_efficiency, or the bytes of its
/// operands over the memory bandwidth where that is longer.
double gemmSeconds(const SystemSpec &system, const mlir::mt::GemmShape &gemm,
                   llvm::StringRef elementType, int64_t elementBytes);
/// Its compute alone: whole waves of tiles at the peak times gemm_efficiency (a product
/// whose result never leaves the chip, as flash attention's scores).
double gemmWaveTime(const SystemSpec &system, const mlir::mt::GemmShape &gemm,
                    llvm::StringRef elementType);
/// The share of an s×s product a masked kernel computes in square blocks of `block`: the
/// blocks holding a pair the mask keeps, of T² (T = ⌈s/block⌉). Causal: the T(T+1)/2 on or
/// below the diagonal, a half for long s; a sliding window (0: none; only under a causal
/// mask, as mt.attention's verifier has it) keeps those within it of the diagonal.
double blockShare(int64_t s, int64_t block, bool causal, int64_t window = 0);
/// A memory-bound kernel moving `bytes`.
double memorySeconds(const SystemSpec &system, int64_t bytes);

enum class Collective { AllReduce, AllGather, ReduceScatter };
/// Bytes each rank sends in a ring collective over `ranks` on a tensor of `bytes` (the
/// whole tensor: an all-gather's result, a reduce-scatter's input):
/// 2(n−1)/n·bytes for an all-reduce, (n−1)/n·bytes otherwise.
int64_t ringBytesSent(Collective kind, int64_t bytes, int64_t ranks);
/// Its seconds: those bytes over the link, plus the link's latency per ring step.
double collectiveSeconds(Collective kind, int64_t bytes, int64_t ranks, const Link &link);

} // namespace mtc

#endif
