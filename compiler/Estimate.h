// `mtc estimate`: the iteration time of a lowered training step on a described system,
// by part, from the step's own ops, collectives, pipeline messages and schedule.
//
// Two steps. `profileChunks` reads a lowered module once: per virtual pipeline stage
// (chunk), the seconds its forward and backward take per micro-batch on one rank (each
// op costed by the system's model), its collectives, the bytes it sends on, its arena,
// its stash and its parameters. `estimateStep` then runs the schedule with those times,
// adds the gradient reduction and the optimizer, and accounts memory exactly as
// `mtc compile` does. `mtc tune` profiles a few chunk shapes and estimates many layouts
// from them.
#ifndef MT_COMPILER_ESTIMATE_H
#define MT_COMPILER_ESTIMATE_H

#include "compiler/Accounting.h"
#include "compiler/Pipeline.h"
#include "compiler/System.h"
#include "plan/Schedule.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace mtc {

/// What the kernels of one family (a plan opcode, as `mtrun --profile` names it) cost:
/// their runs, seconds, FLOPs (counted as the profile counts them) and bytes moved.
struct FamilyCost {
  double runs = 0, seconds = 0, flops = 0, bytes = 0;
  void add(const FamilyCost &other, double times = 1);
};
using Families = std::map<std::string, FamilyCost>;

/// Kernels launched one by one into the device's queue: the host takes `gap` seconds per
/// launch, and a kernel starts when it is launched and the one before it has finished.
/// What the device waits for the host is the time to the last kernel's end less the
/// kernels' own.
struct LaunchQueue {
  double host = 0, device = 0, kernels = 0;
  void launch(double gap, double seconds) {
    host += gap;
    device = std::max(device, host) + seconds;
    kernels += seconds;
  }
  double waiting() const { return device - kernels; }
};

/// One launch of a pass, in order: its seconds on the device, and whether a recording
/// may hold it (mtrun records a pass in the stretches between its collectives, and the
/// GPU's grouped GEMMs, which read their row counts from the device, run between too).
struct Launch {
  double seconds;
  bool recordable;
};
/// The device waiting for the host to launch `launches`, as the launch queue has it: each
/// kernel and collective launched one by one; or, where the runtime records graphs, each
/// stretch of recordable kernels between the rest as one launch.
double hostWaiting(const SystemSpec &system, const std::vector<Launch> &launches);

/// What one pass (forward or backward) of one chunk costs one rank per micro-batch.
struct PassCost {
  double compute = 0;          // kernels, recomputation apart
  double recompute = 0;        // kernels mt-recompute copied into backward
  double tensorParallel = 0;   // the tensor-parallel group's collectives, but for
  double sequenceParallel = 0; // its gathers and scatters along the sequence
  double contextParallel = 0;  // the context-parallel group's (attention's keys and values)
  double expertParallel = 0;   // the expert group's all-to-all (a mixture's tokens)
  double host = 0;             // the device waiting for the host to launch kernels
  int64_t tensorParallelBytes = 0, sequenceParallelBytes = 0; // sent by each rank
  int64_t contextParallelBytes = 0, expertParallelBytes = 0;
  int64_t launches = 0;                                       // kernels and collectives
  int64_t stagingBytes = 0;   // the most any kernel's copies need (stagingBytes)
  int64_t attentionBytes = 0; // and cuDNN's attention (attentionWorkspaceBytes)
  int64_t gemmFlops = 0;      // the products' FLOPs (CostOpInterface::getGemmFlops)
  int64_t wholeLayerFlops = 0; // of them, whole layers rerun (RuntimeSpec::recomputeWholeLayers)
  std::vector<Launch> queued;                                 // the pass's launches, in order
  Families families;        // the kernels and collectives, by family
  double total() const {
    return compute + recompute + tensorParallel + sequenceParallel + contextParallel +
           expertParallel + host;
  }
};

/// One chunk (virtual pipeline stage) as one rank runs it.
struct ChunkProfile {
  ChunkFootprint footprint;
  PassCost forward, backward;
};

/// Adds a recomputed layer's forward (`layer`, costed as its forward pass) to a backward
/// pass as recomputation: its kernels, collectives, launches and families.
void addRecomputed(PassCost &backward, const PassCost &layer);

/// Profiles every chunk of a module lowered by `lowerToTrainStep`: one (@train_step)
/// without a pipeline, else one per virtual stage (@forward_v, @backward_v). Under a
/// runtime that recomputes whole layers (RuntimeSpec::recomputeWholeLayers), each layer
/// mt-recompute copied ops of costs its whole forward again, in place of the copies.
std::vector<ChunkProfile> profileChunks(mlir::ModuleOp module, const SystemSpec &system,
                                        const CompileOptions &options);

/// Seconds one kernel (an op with costs: mt.linear, mt.attention_grad…) takes on one
/// rank: by its family's calibrated rate where the system has one; else its matrix
/// products or its bytes, whichever is longer, plus the kernel overhead; 0 for ops that
/// launch none.
double kernelSeconds(mlir::Operation *op, const SystemSpec &system);
/// The seconds of the copies the CUDA backend makes around a GEMM whose rows (of B or of
/// a plain C) are not a whole number of 16 bytes, which cuBLASLt runs far slower
/// (CudaBackend.cu, stagedB and stagingFor): B (the first operand) padded before it, or
/// else C (the first result) after it; none for a B the linear before it copied (a weight
/// gradient after its input gradient, both reading dy). One copy per expert of a grouped
/// product. In kernelSeconds.
double stagingSeconds(mlir::Operation *op, const SystemSpec &system);
/// The bytes of the CUDA backend's buffer for those copies that the op needs (0: none):
/// beyond the plan's memory, among the backend's workspaces.
int64_t stagingBytes(mlir::Operation *op);
/// The bytes of the CUDA backend's workspace for cuDNN's attention that the op needs (0:
/// none, or not through cuDNN): backward's deterministic algorithm keeps dP, grouped-
/// query heads their packed queries, and dropped probabilities our keep mask. Beyond the
/// plan's memory, as stagingBytes.
int64_t attentionWorkspaceBytes(mlir::Operation *op);
/// The FLOPs of one run of a kernel as `mtrun --profile` counts them (runtime/exec/
/// Executor.cpp): a linear's products, 2·m·n·k each; fused attention's QKᵀ and P·V, half
/// of them under a causal mask, 2.5 times that backward; 0 for the rest.
double profileFlops(mlir::Operation *op);

/// A layout as `mtc compile` takes it, beyond what lowering needs.
struct StepLayout {
  CompileOptions options;
  bool distributedOptimizer = false;
  int64_t bucketBytes = 40000000;
  ::mt::ScheduleKind schedule = ::mt::ScheduleKind::OneFOneB;
  int64_t microBatches() const {
    return options.globalBatchSize / (options.microBatchSize * options.dp);
  }
  int64_t gpus() const { return options.tp * options.cp * options.pp * options.dp; }
  /// The ranks that reduce gradients and share the distributed optimizer's state.
  int64_t dataParts() const { return options.dp * options.cp; }
};

/// The links the groups of a layout cross, with Megatron's rank order (tp fastest, then
/// dp, then pp): a group stays on NVLink while it fits in one node.
struct Placement {
  Link tensor, context, data, pipeline;
  Link expert; // ep consecutive data-parallel ranks
};
Placement placeGroups(const SystemSpec &system, const StepLayout &layout);

/// Seconds a pipeline message of `bytes` takes from one stage to the next: over the
/// pipeline's link whole, or, where the runtime scatters and gathers it, a tensor-parallel
/// share of it there and an all-gather in the group.
double pipelineMessageSeconds(const SystemSpec &system, const StepLayout &layout,
                              const Placement &placement, int64_t bytes);

struct StepEstimate {
  double iteration = 0;
  /// The parts of the slowest stage's iteration; they add up to `iteration`.
  struct Parts {
    double forward = 0, backward = 0, recompute = 0; // kernels
    double tensorParallel = 0, sequenceParallel = 0; // collectives inside the passes
    double contextParallel = 0, expertParallel = 0;
    double host = 0;      // the device waiting for kernels to be launched
    double pipeline = 0;  // waiting: the bubble and the messages on its critical path
    double gradients = 0; // reduction after the last backward, what is not overlapped
    double overlapped = 0; // of the reduction, what the runtime hides behind the passes
                           // (not a part of the iteration)
    double optimizer = 0; // zeroing the gradients, their norm, Adam over this rank's share
  } parts;
  /// The critical stage's kernels per step by family, with the step's parts beyond its
  /// instructions ("zero gradients", "gradient norm", "optimizer"), as `mtrun --profile`
  /// lists them.
  Families families;
  int64_t criticalStage = 0;
  double bubble = 0; // the critical stage's waiting over its busy time
  unsigned __int128 modelFlops = 0, hardwareFlops = 0; // per step, every rank
  int64_t tensorParallelBytes = 0, sequenceParallelBytes = 0; // per micro-batch, one rank
  int64_t contextParallelBytes = 0, expertParallelBytes = 0;  // per micro-batch, one rank
  int64_t pipelineMessageBytes = 0, gradientBytes = 0;        // per message; per step
  StepAccount account; // memory, exactly as `mtc compile` accounts it
  /// The memory a rank needs on a GPU: the most any pipeline stage needs, its account's and
  /// beyond it the CUDA backend's workspaces that grow with the model (stagingBytes,
  /// attentionWorkspaceBytes: each buffer the most a kernel of the stage's chunks needs);
  /// and that stage's workspaces.
  int64_t gpuBytes = 0, workspaceBytes = 0;
  std::vector<int64_t> inFlight;
};

/// Estimates a step from its chunks' profiles (`chunks[c]` for virtual stage c, as
/// profileChunks returns them for the layout's lowering). Returns an error or "".
std::string estimateStep(const std::vector<ChunkProfile> &chunks, const SystemSpec &system,
                         const StepLayout &layout, StepEstimate &out);

} // namespace mtc

#endif
