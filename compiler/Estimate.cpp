#include "compiler/Estimate.h"
#include "core/SharedMath.h"
#include "dialects/mt/Collectives.h"
#include "dialects/mt/PlanEncoding.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

#include <algorithm>
#include <cmath>
#include <set>

using namespace mlir;

namespace mtc {
namespace {

/// "bf16", "f16", "f64" or "f32": the peak a kernel on `type` runs at.
llvm::StringRef computeType(Type type) {
  Type element = getElementTypeOrSelf(type);
  if (element.isBF16())
    return "bf16";
  if (element.isF16())
    return "f16";
  if (element.isF64())
    return "f64";
  return "f32";
}

/// Seconds of a run of `family` as the system calibrates it, given the model's own
/// `seconds` (the peaks and efficiencies): the family's fixed time per run, plus the
/// run's FLOPs or bytes at the family's rate, or the model's time over the family's
/// efficiency; the model's time where the system calibrates no such family.
double calibrated(const SystemSpec &system, const std::string &family, double flops, int64_t bytes,
                  double seconds) {
  auto it = system.kernels.find(family);
  if (it == system.kernels.end())
    return seconds;
  const KernelRate &rate = it->second;
  if (rate.efficiency > 0)
    return rate.overhead + seconds / rate.efficiency;
  if (rate.flops > 0 && flops > 0)
    return rate.overhead + flops / rate.flops;
  return rate.overhead + (rate.bytes > 0 ? static_cast<double>(bytes) / rate.bytes : seconds);
}

/// Seconds of a memory-bound kernel of `family` moving `bytes`.
double familySeconds(const SystemSpec &system, const std::string &family, int64_t bytes) {
  return calibrated(system, family, 0, bytes, system.kernelOverhead + memorySeconds(system, bytes));
}

/// A group whose ranks lie in blocks of `span` consecutive ranks (of `world`) stays on
/// NVLink when no block straddles two nodes: the node holds whole blocks, or the whole
/// job fits in one node.
Link linkFor(const SystemSpec &system, int64_t span, int64_t world) {
  const int64_t node = system.gpusPerNode;
  return span <= node && (node % span == 0 || world <= node) ? system.intraNode
                                                             : system.interNode;
}

/// The block of cuDNN's flash attention kernels: a causal mask skips those above the
/// diagonal.
constexpr int64_t kFlashBlock = 128;

/// The mask of an attention op (or its gradient).
template <typename Attention>::mt::AttentionMask maskOf(Attention op) {
  return {op.getCausal(), static_cast<int64_t>(op.getWindow().value_or(0))};
}

/// The bytes of one element of a tensor.
int64_t elementBytes(Value v) {
  return (cast<ShapedType>(v.getType()).getElementTypeBitWidth() + 7) / 8;
}

/// The width of an attention op's heads: its qkv's rows hold heads + 2·kv of them.
template <typename Attention> int64_t headDim(Attention op) {
  const uint64_t heads = op.getHeads(), kv = op.getKvHeads().value_or(heads);
  return cast<ShapedType>(op.getQkv().getType()).getShape().back() /
         static_cast<int64_t>(heads + 2 * kv);
}

/// Whether the CUDA backend runs fused attention through cuDNN (CudaBackend.cu,
/// throughCudnn): bf16 or f16, heads of a multiple of 8 up to 256 (cuDNN's), neither a
/// context-parallel share of the queries nor a ring's step.
template <typename Attention> bool viaCudnn(Attention op) {
  const llvm::StringRef type = computeType(op.getQkv().getType());
  const int64_t d = headDim(op);
  return (type == "bf16" || type == "f16") && !op.getContextParallel() && !op.getRing() &&
         d % 8 == 0 && d <= 256;
}

/// Where cuDNN runs attention that drops probabilities, the keep mask our kernel writes
/// for each call, [b, heads, s, s] in the op's 16 bits, its rows padded to 16 bytes
/// (CudaBackend.cu, keepMask); else 0.
template <typename Attention> int64_t keepMaskBytes(Attention op) {
  const std::optional<llvm::APFloat> rate = op.getDropout();
  if (!viaCudnn(op) || !(rate && rate->convertToDouble() > 0))
    return 0;
  auto qkv = cast<ShapedType>(op.getQkv().getType());
  const int64_t s = qkv.getDimSize(1), size = elementBytes(op.getQkv());
  return size * qkv.getDimSize(0) * static_cast<int64_t>(op.getHeads()) * s *
         ::mt::paddedColumn(s, size);
}

/// cuDNN's deterministic backward keeps dP [b, heads, s, s] in 16 bits, each side of the
/// scores rounded up to 64, and each row's sum of dO∘O [b, heads, s] in f32 (the
/// frontend's softmax_sum): of GPT-2 124M's 8 x 12 heads over 1,024 positions,
/// 201,719,808 bytes of the 202,110,488 its workspaces held beyond the GEMMs' 32 MiB;
/// of GPT-3 1.3B's 4 x 16 over 2,048, 537,395,200 of 539,284,376 (bench/results/
/// 2026-11-27, their memory lines).
template <typename Attention> int64_t dpBytes(Attention op) {
  auto qkv = cast<ShapedType>(op.getQkv().getType());
  const int64_t rows = qkv.getDimSize(0) * static_cast<int64_t>(op.getHeads());
  const int64_t s = qkv.getDimSize(1), rounded = (s + 63) / 64 * 64;
  return rows * rounded * rounded * 2 + rows * s * 4;
}

/// Grouped-query heads' queries packed for cuDNN, 256-byte aligned (CudnnAttention.cpp);
/// 0 for other heads.
template <typename Attention> int64_t packedQueryBytes(Attention op) {
  const uint64_t heads = op.getHeads(), kv = op.getKvHeads().value_or(heads);
  if (!(kv > 1 && heads > kv))
    return 0;
  auto qkv = cast<ShapedType>(op.getQkv().getType());
  const int64_t bytes = elementBytes(op.getQkv()) * qkv.getDimSize(0) * qkv.getDimSize(1) *
                        static_cast<int64_t>(heads) * headDim(op);
  return (bytes + 255) / 256 * 256;
}

/// Fused attention as mtrun's CUDA backend runs it (CudaBackend.cu, throughCudnn), with
/// `scores` (QKᵀ per head) and `values` (P·V) the op's products:
/// - bf16 or f16, heads of a multiple of 8 up to 256, not under context parallelism:
///   cuDNN's flash kernels, on tensor cores,
///   computing only the blocks the mask keeps a pair of (under a causal mask those on or
///   below the diagonal; within a window those near it); grouped-query heads' queries
///   copied to a packed buffer first, and backward their gradient back. Forward: QKᵀ
///   and P·V. Backward: cuDNN's backward (QKᵀ again, dP = dO·Vᵀ, dV, dQ, dK), 2 products
///   shaped as the scores and 3 as the values, from the forward's row statistics
///   (mt-keep-attention-stats); where they were not kept, the forward first runs again
///   for them: 3 and 4, in 2 kernels. Dropping probabilities, each call first writes the
///   keep mask, which each of cuDNN's kernels then reads where it computes: a launch,
///   the mask's bytes written, and its computed blocks' read. (On Blackwell, whose deterministic
///   backward cuDNN gives no dropout, our kernels run it; the estimate does not know the
///   architecture.)
/// - otherwise mtrun's own kernels, a warp per row on CUDA cores (the f32 peak), each row
///   up to its last key: forward 2 products; backward 8 (QKᵀ three times, dP twice, dQ,
///   dK, dV), in 2 kernels, or 7 from kept row statistics (QKᵀ twice); a window's rows
///   each over its w keys at most.
template <typename Attention>
double fusedAttentionSeconds(Attention op, mlir::mt::GemmShape scores, mlir::mt::GemmShape values,
                             bool backward, const SystemSpec &system) {
  const llvm::StringRef type = computeType(op.getQkv().getType());
  const double launches = backward ? system.kernelOverhead : 0; // the second kernel
  const ::mt::AttentionMask mask = maskOf(op);
  if (viaCudnn(op)) {
    // The scores stay on chip: each product costs its waves of tiles, never its bytes.
    const double share = blockShare(scores.n, kFlashBlock, mask.causal, mask.window);
    const int again = backward && !op.getStats() ? 1 : 0; // the forward, for the statistics
    // Grouped-query attention's queries copied to a packed buffer by each run of cuDNN's
    // graphs, and backward's gradient back (CudnnAttention.cpp): each copy a launch, read
    // and written.
    const int64_t packed = packedQueryBytes(op);
    const int copies = packed == 0 ? 0 : backward ? 2 + again : 1;
    const double packing = copies * (system.kernelOverhead + memorySeconds(system, 2 * packed));
    // The keep mask written whole, then read by each of cuDNN's kernels where it computes
    // (the blocks the mask keeps).
    const int64_t keep = keepMaskBytes(op);
    const double keeping = keep == 0 ? 0
                                     : system.kernelOverhead + memorySeconds(system, keep) +
                                           (1 + again) * share * memorySeconds(system, keep);
    return (again ? launches : 0) + packing + keeping +
           share * ((backward ? 2 + again : 1) * gemmWaveTime(system, scores, type) +
                    (backward ? 3 + again : 1) * gemmWaveTime(system, values, type));
  }
  const double s = static_cast<double>(scores.n);
  const double share = mask.pairs(scores.n) / (s * s);
  const int products = backward ? (op.getStats() ? 7 : 8) : 2; // kept statistics: QKᵀ once less
  return launches + share * products * static_cast<double>(scores.flops()) / system.peak("f32");
}

/// Attention as a runtime that materializes its scores runs it (RuntimeSpec::
/// materializedAttention): each product a batched GEMM on tensor cores over the whole
/// square (a causal mask computes no fewer blocks), the [b, heads, s, s] scores written
/// by the first and read by the next between memory-bound kernels — the fused
/// scale-mask-softmax (reads the scores, writes the probabilities; backward reads them
/// and their gradient, writes the scores') and, where the op drops probabilities itself,
/// dropout (reads and writes them, and a mask of a byte each; backward reads the mask and
/// the gradient, writes it). The unfused plan's own dropout is an op of its own.
double materializedAttentionSeconds(Operation *op, const SystemSpec &system) {
  SmallVector<mlir::mt::GemmShape> gemms = cast<mlir::mt::CostOpInterface>(op).getGemms();
  const Type type = op->getOperand(0).getType();
  const int64_t size = elementBytes(op->getOperand(0));
  double seconds = 0;
  for (const mlir::mt::GemmShape &g : gemms)
    seconds += system.kernelOverhead + gemmSeconds(system, g, computeType(type), size);
  // The scores' count: of the first product, QKᵀ's result (dQ = dS·K's k, ProbsGrad's).
  const mlir::mt::GemmShape &first = gemms[0];
  const int64_t scores =
      first.batch * first.m * (isa<mlir::mt::AttentionProbsGradOp>(op) ? first.k : first.n);
  auto passes = [&](int64_t bytesPerScore) {
    seconds += system.kernelOverhead + memorySeconds(system, bytesPerScore * scores);
  };
  auto dropping = [](auto attention) {
    const std::optional<llvm::APFloat> rate = attention.getDropout();
    return rate && rate->convertToDouble() > 0;
  };
  if (isa<mlir::mt::AttentionProbsOp>(op))
    passes(2 * size);
  else if (isa<mlir::mt::AttentionProbsGradOp>(op))
    passes(3 * size);
  else if (auto forward = dyn_cast<mlir::mt::AttentionOp>(op)) {
    passes(2 * size);
    if (dropping(forward))
      passes(2 * size + 1);
  } else if (auto backward = dyn_cast<mlir::mt::AttentionGradOp>(op)) {
    passes(3 * size);
    if (dropping(backward))
      passes(2 * size + 1);
  }
  return seconds;
}

/// The matrix products a kernel runs, in seconds: a linear's on tensor cores; attention's
/// as the CUDA backend runs it (fused: above; unfused: its own kernels on CUDA cores).
double productSeconds(mlir::mt::CostOpInterface cost, const SystemSpec &system) {
  Operation *op = cost.getOperation();
  SmallVector<mlir::mt::GemmShape> gemms = cost.getGemms();
  if (op->getNumOperands() == 0 || gemms.empty())
    return 0;
  Type type = op->getOperand(0).getType();
  const int64_t bytes = (getElementTypeOrSelf(type).getIntOrFloatBitWidth() + 7) / 8;
  if (auto forward = dyn_cast<mlir::mt::AttentionOp>(op))
    return fusedAttentionSeconds(forward, gemms[0], gemms[1], false, system);
  if (auto backward = dyn_cast<mlir::mt::AttentionGradOp>(op))
    return fusedAttentionSeconds(backward, gemms[0], gemms[1], true, system);
  double seconds = 0;
  if (isa<mlir::mt::AttentionProbsOp, mlir::mt::AttentionContextOp,
          mlir::mt::AttentionProbsGradOp, mlir::mt::AttentionContextGradOp>(op)) {
    for (const mlir::mt::GemmShape &g : gemms)
      seconds += static_cast<double>(g.flops()) / system.peak("f32");
    return seconds;
  }
  for (const mlir::mt::GemmShape &g : gemms)
    seconds += gemmSeconds(system, g, computeType(type), bytes);
  return seconds;
}

/// The family a kernel or collective is profiled under: its plan opcode's name ("" for an
/// op that writes no instruction).
std::string familyOf(Operation *op) {
  // A constant is written only as a splat (a Fill); asking another to encode itself
  // would report an error.
  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    auto dense = dyn_cast<DenseFPElementsAttr>(constant.getValue());
    return dense && dense.isSplat() ? "Fill" : "";
  }
  auto encodable = dyn_cast<mlir::mt::PlanOpInterface>(op);
  mlir::mt::PlanInstruction inst;
  if (!encodable || failed(encodable.encodeInstruction(inst)))
    return "";
  return ::mt::plan::EnumNameOpcode(inst.opcode);
}

/// Ring attention's messages (Executor::runRing): its share of keys and values on to the
/// next context rank at each step but the last, and backward their gradients at every
/// step as well, one after another with the steps' kernels.
void costRing(Operation *op, const Placement &placement, const CompileOptions &options,
              PassCost &pass) {
  auto attention = dyn_cast<mlir::mt::AttentionOp>(op);
  auto grad = dyn_cast<mlir::mt::AttentionGradOp>(op);
  if (!(attention && attention.getRing()) && !(grad && grad.getRing()))
    return;
  const int64_t share =
      mlir::mt::tensorBytes(attention ? attention.getQkv().getType() : grad.getQkv().getType());
  const int64_t messages = attention ? options.cp - 1 : 2 * options.cp - 1;
  pass.contextParallel +=
      static_cast<double>(messages) *
      (static_cast<double>(share) / placement.context.bandwidth + placement.context.latency);
  pass.contextParallelBytes += messages * share;
}

/// An expert exchange (Executor::runExchange): the counts, then this rank's rows [N, H]
/// but its own experts' share, (ep − 1)/ep of them for a balanced routing, to the other
/// ranks of the expert group, one message each.
void costExchange(Operation *op, const Placement &placement, const CompileOptions &options,
                  PassCost &pass) {
  const Value rows = isa<mlir::mt::MoeExchangeOp>(op) ? op->getOperand(0) : op->getResult(0);
  const int64_t sent = mlir::mt::tensorBytes(rows.getType()) * (options.ep - 1) / options.ep;
  // The all-to-all: a launch of the host, between recorded stretches (the host's wait for
  // the counts before it is not modelled).
  ++pass.launches;
  pass.queued.push_back({0, false});
  pass.expertParallel += static_cast<double>(sent) / placement.expert.bandwidth +
                         2.0 * static_cast<double>(options.ep - 1) * placement.expert.latency;
  pass.expertParallelBytes += sent;
}

/// Whether mtrun's recording of a pass may hold op's kernel: not a collective, nor ring
/// attention (the executor runs its steps), nor a grouped GEMM (Backend::recordable).
bool recordable(Operation *op) {
  if (isa<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp, mlir::mt::GroupedLinearOp,
          mlir::mt::GroupedLinearGradInputOp, mlir::mt::GroupedLinearGradWeightOp>(op))
    return false;
  if (auto attention = dyn_cast<mlir::mt::AttentionOp>(op))
    return !attention.getRing();
  if (auto grad = dyn_cast<mlir::mt::AttentionGradOp>(op))
    return !grad.getRing();
  return true;
}

/// Costs one op of a pass on one rank.
void costOp(Operation *op, const SystemSpec &system, const Placement &placement,
            const CompileOptions &options, PassCost &pass) {
  auto record = [&](double seconds, double flops, double bytes) {
    const std::string family = familyOf(op);
    if (family.empty())
      return;
    ++pass.launches;
    pass.queued.push_back({seconds, recordable(op)});
    pass.families[family].add({1, seconds, flops, bytes});
  };
  if (isa<mlir::mt::MoeExchangeOp, mlir::mt::MoeExchangeBackOp>(op)) {
    costExchange(op, placement, options, pass);
    return;
  }
  if (auto cost = dyn_cast<mlir::mt::CostOpInterface>(op)) {
    costRing(op, placement, options, pass);
    const double seconds = kernelSeconds(op, system);
    (op->hasAttr(mlir::mt::kRecomputedAttr) ? pass.recompute : pass.compute) += seconds;
    pass.gemmFlops += cost.getGemmFlops();
    pass.stagingBytes = std::max(pass.stagingBytes, stagingBytes(op));
    pass.attentionBytes = std::max(pass.attentionBytes, attentionWorkspaceBytes(op));
    record(seconds, profileFlops(op), static_cast<double>(cost.getBytesMoved()));
    return;
  }
  // Sequence parallelism gathers and scatters [b, s, h] activations along s; every
  // other collective of the group is tensor parallelism's.
  Collective kind;
  int64_t bytes;
  bool sequence = false;
  ArrayRef<int16_t> axes;
  if (auto reduce = dyn_cast<shard::AllReduceOp>(op)) {
    kind = Collective::AllReduce;
    bytes = mlir::mt::tensorBytes(op->getResult(0).getType());
    axes = reduce.getGridAxes();
  } else if (auto gather = dyn_cast<shard::AllGatherOp>(op)) {
    kind = Collective::AllGather;
    bytes = mlir::mt::tensorBytes(gather.getResult().getType());
    sequence = gather.getGatherAxis() == 1;
    axes = gather.getGridAxes();
  } else if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op)) {
    kind = Collective::ReduceScatter;
    bytes = mlir::mt::tensorBytes(scatter.getInput().getType());
    sequence = scatter.getScatterAxis() == 1;
    axes = scatter.getGridAxes();
  } else {
    // Any other instruction is a memory-bound kernel (a TpCopy, the Fill of the loss's
    // seed, a ParamGrad adding a gradient into its parameter's buffer: reading both,
    // writing the buffer), but for a ParamGrad whose gradient its producer added there.
    auto grad = dyn_cast<mlir::mt::ParamGradOp>(op);
    const std::string family = familyOf(op);
    if (family.empty() || (grad && mlir::mt::isAccumulated(grad.getGrad())))
      return; // parameters, gradients' homes, returns: no kernel
    const int64_t moved = grad ? 3 * mlir::mt::tensorBytes(grad.getGrad().getType())
                               : mlir::mt::defaultBytesMoved(op);
    const double seconds = familySeconds(system, family, moved);
    pass.compute += seconds;
    record(seconds, 0, static_cast<double>(moved));
    return;
  }
  // Context parallelism's gathers of attention's QKV and their reduce-scatters run over
  // the context-parallel group.
  const bool context = axes.size() == 1 && axes[0] == mlir::mt::kCpAxis;
  const int64_t ranks = context ? options.cp : options.tp;
  const double seconds =
      collectiveSeconds(kind, bytes, ranks, context ? placement.context : placement.tensor);
  const int64_t sent = ringBytesSent(kind, bytes, ranks);
  record(seconds, 0, static_cast<double>(sent));
  if (context) {
    pass.contextParallel += seconds;
    pass.contextParallelBytes += sent;
  } else if (!sequence) {
    pass.tensorParallel += seconds;
    pass.tensorParallelBytes += sent;
  } else {
    pass.sequenceParallel += seconds;
    pass.sequenceParallelBytes += sent;
  }
}

/// What a stage's rank spends after its last backward (mtrun's GradSync and
/// OptimizerStep): reducing its gradients (seconds, and bytes it sends) and stepping
/// Adam over its share. Of the reduction, the data-parallel part (the gradients'
/// all-reduce or reduce-scatter, `data`, in buckets of `dataBucket` seconds at most) and
/// the distributed optimizer's all-gather of the weights (`gather`, `gatherBucket`) are
/// kept apart: a runtime may overlap them with the passes.
struct StageTail {
  double gradients = 0, optimizer = 0;
  double data = 0, dataBucket = 0, gather = 0, gatherBucket = 0;
  int64_t sent = 0;
  Families families; // zeroing, the gradient norm and the update
};

/// `bytes` reduced over `ranks` in buckets of at most `bucketBytes`: the seconds of all
/// of them and of the largest.
std::pair<double, double> bucketed(Collective kind, int64_t bytes, int64_t bucketBytes,
                                   int64_t ranks, const Link &link, int64_t &sent) {
  const int64_t bucket = std::max<int64_t>(1, std::min(bytes, bucketBytes));
  const int64_t whole = bytes / bucket, rest = bytes % bucket;
  const double one = collectiveSeconds(kind, bucket, ranks, link);
  sent += whole * ringBytesSent(kind, bucket, ranks) + ringBytesSent(kind, rest, ranks);
  return {static_cast<double>(whole) * one +
              (rest > 0 ? collectiveSeconds(kind, rest, ranks, link) : 0),
          one};
}
StageTail stageTail(const StageParameters &params, const std::map<std::string, int64_t> &holders,
                    const BytesPerParameter &b, const StepLayout &layout,
                    const Placement &placement, const SystemSpec &system) {
  const CompileOptions &o = layout.options;
  const int64_t p = o.pp;
  StageTail tail;
  auto reduce = [&](Collective kind, int64_t bytes, int64_t ranks, const Link &link) {
    tail.gradients += collectiveSeconds(kind, bytes, ranks, link);
    tail.sent += ringBytesSent(kind, bytes, ranks);
  };
  if (o.tp > 1 && params.tpReduced > 0)
    reduce(Collective::AllReduce, params.tpReduced * b.gradients, o.tp, placement.tensor);
  for (const auto &[name, elements] : params.shared)
    if (holders.at(name) > 1)
      reduce(Collective::AllReduce, elements * b.gradients, holders.at(name),
             placement.pipeline);
  // mtrun's buckets: whole ones of the bucket size (whole gradients), and the rest; the
  // distributed optimizer reduce-scatters and gathers in one piece each (a runtime that
  // overlaps them buckets them alike). Under expert parallelism the experts' section
  // reduces (and its shares gather) over the d / ep ranks holding the same experts.
  const int64_t bucket = std::max<int64_t>(1, layout.bucketBytes / b.gradients) * b.gradients;
  const int64_t d = layout.dataParts(); // context-parallel ranks reduce with data-parallel
  auto add = [](double &seconds, double &largest, std::pair<double, double> section) {
    seconds += section.first;
    largest = std::max(largest, section.second);
  };
  const std::pair<int64_t, int64_t> sections[] = {{params.all - params.experts, d},
                                                  {params.experts, d / o.ep}};
  for (const auto &[elements, ranks] : sections) {
    if (ranks <= 1 || elements == 0)
      continue;
    const int64_t gradientBytes = elements * b.gradients, weightBytes = elements * b.weights;
    if (layout.distributedOptimizer) {
      add(tail.data, tail.dataBucket,
          bucketed(Collective::ReduceScatter, gradientBytes,
                   system.runtime.overlapGradientReduction ? bucket : gradientBytes, ranks,
                   placement.data, tail.sent));
      add(tail.gather, tail.gatherBucket,
          bucketed(Collective::AllGather, weightBytes,
                   system.runtime.overlapParameterGather ? bucket / b.gradients * b.weights
                                                         : weightBytes,
                   ranks, placement.data, tail.sent));
    } else {
      add(tail.data, tail.dataBucket,
          bucketed(Collective::AllReduce, gradientBytes, bucket, ranks, placement.data, tail.sent));
    }
  }
  // The loss, and the gradient norm's sum of squares: one number each.
  reduce(Collective::AllReduce, 8, p, placement.pipeline);
  reduce(Collective::AllReduce, 8, d, placement.data);
  reduce(Collective::AllReduce, 8, o.tp, placement.tensor);
  reduce(Collective::AllReduce, 8, p, placement.pipeline);
  if (layout.distributedOptimizer)
    reduce(Collective::AllReduce, 8, d, placement.data);
  else if (o.ep > 1 && params.experts > 0) // the experts' squares over their group
    reduce(Collective::AllReduce, 8, o.ep, placement.expert);

  // Before the passes the gradients are zeroed; after them, over this rank's share, the
  // norm reads the gradients, and Adam reads them again, reads and writes the moments and
  // the master weights (or the weights), and mixed precision rounds the master weights
  // into the compute copy.
  const int64_t updated = layout.distributedOptimizer
                              ? (params.all - params.experts) / d + params.experts / (d / o.ep)
                              : params.all;
  auto part = [&](const char *family, int64_t bytes) {
    const double seconds = familySeconds(system, family, bytes);
    tail.optimizer += seconds;
    tail.families[family].add({1, seconds, 0, static_cast<double>(bytes)});
  };
  part(kZeroGradients, params.all * b.gradients);
  part(kGradientNorm, updated * b.gradients);
  part(kOptimizer, updated * (b.gradients + 2 * b.optimizer + (b.mixed ? 1 : 2) * b.weights));
  return tail;
}

} // namespace

/// The device waiting for the host to launch `launches`, as the launch queue has it: each
/// kernel and collective launched one by one; or, where the runtime records graphs, each
/// stretch of recordable kernels between the rest as one launch.
double hostWaiting(const SystemSpec &system, const std::vector<Launch> &launches) {
  LaunchQueue queue;
  double stretch = 0;
  bool open = false;
  for (const Launch &l : launches) {
    if (system.runtime.graphs && l.recordable) {
      stretch += l.seconds;
      open = true;
      continue;
    }
    if (std::exchange(open, false))
      queue.launch(system.runtime.launchGap, std::exchange(stretch, 0));
    queue.launch(system.runtime.launchGap, l.seconds);
  }
  if (open)
    queue.launch(system.runtime.launchGap, stretch);
  return queue.waiting();
}

void FamilyCost::add(const FamilyCost &other, double times) {
  runs += times * other.runs;
  seconds += times * other.seconds;
  flops += times * other.flops;
  bytes += times * other.bytes;
}

double profileFlops(Operation *op) {
  auto cost = dyn_cast<mlir::mt::CostOpInterface>(op);
  if (!cost)
    return 0;
  SmallVector<mlir::mt::GemmShape> gemms = cost.getGemms();
  // QKᵀ and P·V over the keys, of which the mask's share (mtrun's Executor counts alike).
  auto attention = [&](auto op, double times) {
    return times * maskOf(op).share(gemms[0].n) *
           static_cast<double>(gemms[0].flops() + gemms[1].flops());
  };
  if (auto forward = dyn_cast<mlir::mt::AttentionOp>(op))
    return attention(forward, 1);
  if (auto backward = dyn_cast<mlir::mt::AttentionGradOp>(op))
    return attention(backward, 2.5);
  if (!isa<mlir::mt::LinearOp, mlir::mt::LinearGeluOp, mlir::mt::LinearGradInputOp,
           mlir::mt::LinearGradInputGeluOp, mlir::mt::LinearGradWeightOp,
           mlir::mt::LinearGradWeightBiasOp, mlir::mt::GroupedLinearOp,
           mlir::mt::GroupedLinearGradInputOp, mlir::mt::GroupedLinearGradWeightOp>(op))
    return 0;
  double flops = 0;
  for (const mlir::mt::GemmShape &g : gemms)
    flops += static_cast<double>(g.flops());
  return flops;
}

namespace {

/// A kernel's seconds by the peaks and efficiencies: its matrix products or its bytes,
/// whichever is longer, plus the kernel overhead.
double modelSeconds(mlir::mt::CostOpInterface cost, const SystemSpec &system) {
  Operation *op = cost.getOperation();
  const double product = productSeconds(cost, system);
  // In f32 the CUDA backend runs a GELU epilogue as the pair (CudaBackend.cu, gemm): the
  // GEMM stores its product, then GELU's kernel reads it (and the pre-activation).
  if (isa<mlir::mt::LinearGeluOp, mlir::mt::LinearGradInputGeluOp>(op) &&
      getElementTypeOrSelf(op->getResult(0).getType()).isF32()) {
    const int64_t t = mlir::mt::tensorBytes(op->getResult(0).getType());
    const bool forward = isa<mlir::mt::LinearGeluOp>(op);
    const int64_t gemm = cost.getBytesMoved() - (forward ? t : 0);
    return 2 * system.kernelOverhead + std::max(product, memorySeconds(system, gemm)) +
           memorySeconds(system, (forward ? 2 : 3) * t);
  }
  const double kernel =
      system.kernelOverhead + std::max(product, memorySeconds(system, cost.getBytesMoved()));
  // Where it accumulates, the CUDA backend's epilogue writes the bias gradient to f32
  // scratch and a kernel of its own adds it into the parameter's gradient (CudaBackend.cu,
  // LinearGradWeightBias): the scratch read, the gradient read and written.
  if (auto fused = dyn_cast<mlir::mt::LinearGradWeightBiasOp>(op); fused && fused.getAccumulate())
    return kernel + system.kernelOverhead +
           memorySeconds(system, 3 * mlir::mt::tensorBytes(fused.getBiasGrad().getType()));
  return kernel;
}

} // namespace

namespace {

bool isGrouped(Operation *op) {
  return isa<mlir::mt::GroupedLinearOp, mlir::mt::GroupedLinearGradInputOp,
             mlir::mt::GroupedLinearGradWeightOp>(op);
}

bool isDenseLinear(Operation *op) {
  return isa<mlir::mt::LinearOp, mlir::mt::LinearGeluOp, mlir::mt::LinearGradInputOp,
             mlir::mt::LinearGradInputGeluOp, mlir::mt::LinearGradWeightOp,
             mlir::mt::LinearGradWeightBiasOp>(op);
}

int64_t lastDim(Value v) { return cast<ShapedType>(v.getType()).getShape().back(); }

/// A grouped product's weights (or their gradient) [E, O, I].
ShapedType expertWeights(Operation *op) {
  return cast<ShapedType>(
      (isa<mlir::mt::GroupedLinearGradWeightOp>(op) ? op->getResult(0) : op->getOperand(2))
          .getType());
}

bool misaligned(Value v) { return ::mt::paddedColumn(lastDim(v), elementBytes(v)) != lastDim(v); }

/// The operand the CUDA backend copies around a GEMM op (CudaBackend.cu, stagedB and
/// stagingFor): B, the first operand (x, or dy), where its rows are misaligned; else C,
/// the first result, where its are and it is written plainly (not by an activation's
/// epilogue, nor into an accumulated gradient, nor beside the bias gradient); else none.
Value stagedOperand(Operation *op) {
  if (!isGrouped(op) && !isDenseLinear(op))
    return {};
  const Value b = op->getOperand(0), c = op->getResult(0);
  if (misaligned(b))
    return b;
  auto accumulates = dyn_cast<mlir::mt::GradAccumulatingOpInterface>(op);
  const bool plain =
      isGrouped(op) ||
      isa<mlir::mt::LinearOp, mlir::mt::LinearGradInputOp, mlir::mt::LinearGradWeightOp>(op);
  return plain && !(accumulates && accumulates.accumulates()) && misaligned(c) ? c : Value{};
}

} // namespace

int64_t stagingBytes(Operation *op) {
  const Value staged = stagedOperand(op);
  if (!staged)
    return 0;
  const int64_t size = elementBytes(staged);
  if (isGrouped(op)) {
    // Sized once for any expert's rows (runGroupedLinear): max(n, o) columns of the
    // wider of o and i.
    const ShapedType w = expertWeights(op);
    const int64_t n = cast<ShapedType>(op->getOperand(0).getType()).getDimSize(0);
    const int64_t o = w.getDimSize(1), i = w.getDimSize(2);
    return size * std::max(n, o) *
           std::max(::mt::paddedColumn(o, size), ::mt::paddedColumn(i, size));
  }
  const int64_t rows = mlir::mt::tensorBytes(staged.getType()) / size / lastDim(staged);
  return size * rows * ::mt::paddedColumn(lastDim(staged), size);
}

int64_t attentionWorkspaceBytes(Operation *op) {
  // Forward: the packed queries; backward: dP, the packed queries and their gradient;
  // both, dropping probabilities, the keep mask.
  auto bytes = [](auto attention, bool backward) -> int64_t {
    if (!viaCudnn(attention))
      return 0;
    const int64_t packed = packedQueryBytes(attention);
    return keepMaskBytes(attention) + (backward ? dpBytes(attention) + 2 * packed : packed);
  };
  if (auto forward = dyn_cast<mlir::mt::AttentionOp>(op))
    return bytes(forward, false);
  if (auto backward = dyn_cast<mlir::mt::AttentionGradOp>(op))
    return bytes(backward, true);
  return 0;
}

double stagingSeconds(Operation *op, const SystemSpec &system) {
  const Value staged = stagedOperand(op);
  if (!staged)
    return 0;
  if (staged == op->getOperand(0) && isDenseLinear(op)) {
    // The instruction before (ops that write none skipped) copied the same B.
    Operation *before = op->getPrevNode();
    while (before && familyOf(before).empty())
      before = before->getPrevNode();
    if (before && isDenseLinear(before) && before->getOperand(0) == staged)
      return 0;
  }
  // A copy per expert's rows of a grouped product.
  const int64_t copies = isGrouped(op) ? expertWeights(op).getDimSize(0) : 1;
  return static_cast<double>(copies) * system.kernelOverhead +
         memorySeconds(system, 2 * mlir::mt::tensorBytes(staged.getType()));
}

double kernelSeconds(Operation *op, const SystemSpec &system) {
  auto cost = dyn_cast<mlir::mt::CostOpInterface>(op);
  if (!cost)
    return 0;
  // Another runtime's attention: the system's calibrated families are mtrun's kernels.
  if (system.runtime.materializedAttention &&
      isa<mlir::mt::AttentionOp, mlir::mt::AttentionGradOp, mlir::mt::AttentionProbsOp,
          mlir::mt::AttentionContextOp, mlir::mt::AttentionProbsGradOp,
          mlir::mt::AttentionContextGradOp>(op))
    return materializedAttentionSeconds(op, system);
  return calibrated(system, familyOf(op), profileFlops(op), cost.getBytesMoved(),
                    modelSeconds(cost, system)) +
         stagingSeconds(op, system);
}

Placement placeGroups(const SystemSpec &system, const StepLayout &layout) {
  const CompileOptions &o = layout.options;
  // Ranks run tp fastest, then cp, then dp: a group spans the ranks up to its own axis.
  const int64_t world = o.tp * o.cp * o.dp * o.pp;
  return {linkFor(system, o.tp, world), linkFor(system, o.tp * o.cp, world),
          linkFor(system, o.tp * o.cp * o.dp, world), linkFor(system, world, world),
          linkFor(system, o.tp * o.ep, world)};
}

std::vector<ChunkProfile> profileChunks(ModuleOp module, const SystemSpec &system,
                                        const CompileOptions &options) {
  std::vector<ChunkProfile> chunks;
  for (ChunkFootprint &f : chunkFootprints(module))
    chunks.push_back({std::move(f), {}, {}});
  StepLayout layout;
  layout.options = options;
  const Placement placement = placeGroups(system, layout);
  // A runtime that reruns a recomputed layer's whole forward under full recomputation
  // (selective recomputation's copies are the attention core it reruns): each layer's
  // forward apart, and the layers whose ops mt-recompute copied (those copies not costed).
  const bool whole = system.runtime.recomputeWholeLayers && options.recompute == "full";
  std::vector<std::map<int64_t, PassCost>> layers(chunks.size());
  std::vector<std::set<int64_t>> recomputed(chunks.size());
  auto cost = [&](Operation *op, size_t chunk, bool forward) {
    auto layer = op->getAttrOfType<IntegerAttr>(mlir::mt::kLayerAttr);
    if (whole && layer && op->hasAttr(mlir::mt::kRecomputedAttr)) {
      recomputed[chunk].insert(layer.getInt());
      return;
    }
    costOp(op, system, placement, options,
           forward ? chunks[chunk].forward : chunks[chunk].backward);
    if (whole && layer && forward)
      costOp(op, system, placement, options, layers[chunk][layer.getInt()]);
  };
  module.walk([&](func::FuncOp fn) {
    if (fn.getName() == "train_step") {
      Block &body = fn.getFunctionBody().front();
      DenseMap<Operation *, int64_t> position;
      const int64_t backwardStart = mlir::mt::numberOps(body, position);
      for (Operation &op : body)
        cost(&op, 0, position[&op] < backwardStart);
      return;
    }
    bool forward = false;
    std::optional<int64_t> v = chunkOf(fn, forward);
    if (!v || *v >= static_cast<int64_t>(chunks.size()))
      return;
    fn.walk([&](Operation *op) { cost(op, static_cast<size_t>(*v), forward); });
  });
  for (size_t c = 0; c < chunks.size(); ++c)
    for (int64_t layer : recomputed[c])
      addRecomputed(chunks[c].backward, layers[c][layer]);
  for (ChunkProfile &c : chunks) {
    c.forward.host = hostWaiting(system, c.forward.queued);
    c.backward.host = hostWaiting(system, c.backward.queued);
  }
  // Without a pipeline the step is one program, whose stretch across the forward's end
  // and the backward's start is one recording: its gaps are counted with the backward.
  if (chunks.size() == 1 && system.runtime.graphs) {
    std::vector<Launch> program = chunks[0].forward.queued;
    program.insert(program.end(), chunks[0].backward.queued.begin(),
                   chunks[0].backward.queued.end());
    chunks[0].forward.host = 0;
    chunks[0].backward.host = hostWaiting(system, program);
  }
  return chunks;
}

void addRecomputed(PassCost &backward, const PassCost &layer) {
  backward.recompute += layer.compute + layer.recompute;
  backward.wholeLayerFlops += layer.gemmFlops;
  backward.tensorParallel += layer.tensorParallel;
  backward.sequenceParallel += layer.sequenceParallel;
  backward.contextParallel += layer.contextParallel;
  backward.expertParallel += layer.expertParallel;
  backward.tensorParallelBytes += layer.tensorParallelBytes;
  backward.sequenceParallelBytes += layer.sequenceParallelBytes;
  backward.contextParallelBytes += layer.contextParallelBytes;
  backward.expertParallelBytes += layer.expertParallelBytes;
  backward.launches += layer.launches;
  backward.queued.insert(backward.queued.end(), layer.queued.begin(), layer.queued.end());
  for (const auto &[name, cost] : layer.families)
    backward.families[name].add(cost);
}

double pipelineMessageSeconds(const SystemSpec &system, const StepLayout &layout,
                              const Placement &placement, int64_t bytes) {
  // Under sequence parallelism the message is each rank's share already.
  const int64_t tp = layout.options.tp;
  if (!system.runtime.pipelineScatterGather || tp == 1 || layout.options.sequenceParallel)
    return static_cast<double>(bytes) / placement.pipeline.bandwidth + placement.pipeline.latency;
  // Scattered: each tensor-parallel rank sends its share, and the receivers gather it.
  return static_cast<double>(bytes / tp) / placement.pipeline.bandwidth +
         placement.pipeline.latency +
         collectiveSeconds(Collective::AllGather, bytes, tp, placement.tensor);
}

namespace {

/// Adds a chunk's forward and backward passes, `mb` micro-batches of each, to the parts,
/// families and bytes of `e`.
void addPasses(const ChunkProfile &chunk, double mb, StepEstimate &e) {
  const PassCost &f = chunk.forward, &bw = chunk.backward;
  e.parts.forward += mb * f.compute;
  e.parts.backward += mb * bw.compute;
  e.parts.host += mb * (f.host + bw.host);
  for (const Families *families : {&f.families, &bw.families})
    for (const auto &[name, cost] : *families)
      e.families[name].add(cost, mb);
  e.parts.recompute += mb * (f.recompute + bw.recompute);
  e.parts.tensorParallel += mb * (f.tensorParallel + bw.tensorParallel);
  e.parts.sequenceParallel += mb * (f.sequenceParallel + bw.sequenceParallel);
  e.parts.contextParallel += mb * (f.contextParallel + bw.contextParallel);
  e.parts.expertParallel += mb * (f.expertParallel + bw.expertParallel);
  e.expertParallelBytes += f.expertParallelBytes + bw.expertParallelBytes;
  e.tensorParallelBytes += f.tensorParallelBytes + bw.tensorParallelBytes;
  e.sequenceParallelBytes += f.sequenceParallelBytes + bw.sequenceParallelBytes;
  e.contextParallelBytes += f.contextParallelBytes + bw.contextParallelBytes;
}

/// On a GPU each stage also holds the CUDA backend's buffers that grow with the model,
/// each to the most any kernel of its chunks needs (the staging copies; cuDNN's
/// attention workspace and keep mask, counted together as the kernel that needs the
/// most of both: exact where a model's attention is of one shape): the stage needing the
/// most, its account and its buffers together, is the rank's figure (e.gpuBytes).
void addWorkspaces(const std::vector<ChunkProfile> &chunks, int64_t p, StepEstimate &e) {
  const int64_t all = static_cast<int64_t>(chunks.size());
  for (int64_t s = 0; s < p; ++s) {
    int64_t staging = 0, attention = 0;
    for (int64_t c = s; c < all; c += p)
      for (const PassCost *pass : {&chunks[c].forward, &chunks[c].backward}) {
        staging = std::max(staging, pass->stagingBytes);
        attention = std::max(attention, pass->attentionBytes);
      }
    const int64_t total = e.account.stages[s].total() + staging + attention;
    if (total > e.gpuBytes) {
      e.gpuBytes = total;
      e.workspaceBytes = staging + attention;
    }
  }
}

} // namespace

std::string estimateStep(const std::vector<ChunkProfile> &chunks, const SystemSpec &system,
                         const StepLayout &layout, StepEstimate &out) {
  const CompileOptions &o = layout.options;
  const int64_t p = o.pp, v = o.virtualStages, m = layout.microBatches();
  if (static_cast<int64_t>(chunks.size()) != p * v)
    return "the step has " + std::to_string(chunks.size()) + " chunks, not pp x vpp = " +
           std::to_string(p * v);
  const Placement placement = placeGroups(system, layout);
  StepEstimate e;

  // The passes, on the schedule's clock.
  ::mt::ScheduleTiming timing;
  if (p > 1) {
    ::mt::PipelineSchedule schedule;
    if (std::string error = ::mt::buildSchedule(layout.schedule, p, v, m, schedule);
        !error.empty())
      return error;
    e.pipelineMessageBytes = chunks[0].footprint.messageBytes;
    const double message =
        pipelineMessageSeconds(system, layout, placement, e.pipelineMessageBytes);
    ::mt::ScheduleCheck check = ::mt::timeSchedule(
        schedule,
        [&](int64_t stage, bool forward) {
          return forward ? chunks[stage].forward.total() : chunks[stage].backward.total();
        },
        message, timing);
    if (!check.deadlockFree)
      return check.problem;
    e.inFlight = check.maxInFlight;
  } else {
    const double busy = static_cast<double>(m) *
                        (chunks[0].forward.total() + chunks[0].backward.total());
    timing.busy = timing.finish = {busy};
  }

  std::vector<ChunkFootprint> footprints;
  for (const ChunkProfile &c : chunks)
    footprints.push_back(c.footprint);
  e.account = accountChunks(footprints, o.precision, p, e.inFlight, layout.dataParts(), o.ep,
                            layout.distributedOptimizer);
  if (e.account.costs.overflowed || e.account.recompute.overflowed)
    return kFlopsOverflow;
  addWorkspaces(chunks, p, e);
  const BytesPerParameter &b = e.account.bytesPerParameter;

  // Parameters several stages hold (a tied embedding): their gradients are summed.
  std::vector<StageParameters> stages;
  std::map<std::string, int64_t> holders;
  for (int64_t s = 0; s < p; ++s) {
    stages.push_back(stageParameters(footprints, p, s));
    for (const auto &shared : stages.back().shared)
      ++holders[shared.first];
  }

  // After its last backward, each stage reduces its gradients and steps its optimizer
  // (mtrun's GradSync and OptimizerStep). A runtime that overlaps the data-parallel
  // reduction hides it behind the stage's last backward (its first chunk's), and the
  // weights' gather behind its first forward, but for a bucket each.
  const RuntimeSpec &runtime = system.runtime;
  double iteration = -1;
  for (int64_t s = 0; s < p; ++s) {
    const StageTail tail = stageTail(stages[s], holders, b, layout, placement, system);
    auto exposed = [](bool overlapped, double all, double bucket, double behind) {
      return overlapped ? std::max(bucket, all - behind) : all;
    };
    const double data = exposed(runtime.overlapGradientReduction, tail.data, tail.dataBucket,
                                chunks[s].backward.total());
    const double gather = exposed(runtime.overlapParameterGather, tail.gather, tail.gatherBucket,
                                  chunks[s].forward.total());
    const double gradients = tail.gradients + data + gather;
    // Zeroing, the norm and the update are launched one by one.
    const double host = runtime.launchGap * static_cast<double>(tail.families.size());
    const double end = timing.finish[s] + gradients + tail.optimizer + host;
    if (end > iteration) {
      iteration = end;
      e.criticalStage = s;
      e.parts.gradients = gradients;
      e.parts.overlapped = tail.data + tail.gather - data - gather;
      e.parts.optimizer = tail.optimizer;
      e.parts.host = host;
      e.gradientBytes = tail.sent;
      // As mtrun's profile has them: the distributed optimizer's gather of the weights
      // within "optimizer", the rest of the reduction as "gradient sync".
      e.families = tail.families;
      e.families[kOptimizer].seconds += gather;
      e.families["gradient sync"] = {1, gradients - gather, 0, static_cast<double>(tail.sent)};
    }
  }
  if (!std::isfinite(iteration) || iteration <= 0)
    return "the step's time is not a finite positive number of seconds (check the system "
           "file's rates)";
  e.iteration = iteration;
  const int64_t crit = e.criticalStage;
  for (int64_t c = crit; c < p * v; c += p)
    addPasses(chunks[c], static_cast<double>(m), e);
  e.parts.pipeline = timing.finish[crit] - timing.busy[crit];
  e.bubble = timing.busy[crit] > 0 ? e.parts.pipeline / timing.busy[crit] : 0;
  using U = unsigned __int128;
  const U replicas =
      static_cast<U>(m) * static_cast<U>(o.tp) * static_cast<U>(o.cp) * static_cast<U>(o.dp);
  e.modelFlops = static_cast<U>(e.account.costs.gemmFlops) * replicas;
  // Recomputation's products: mt-recompute's copies, or the whole layers a runtime reruns.
  U wholeLayers = 0;
  for (const ChunkProfile &c : chunks)
    wholeLayers += static_cast<U>(c.backward.wholeLayerFlops);
  e.hardwareFlops =
      (static_cast<U>(e.account.costs.gemmFlops) +
       (wholeLayers > 0 ? wholeLayers : static_cast<U>(e.account.recompute.gemmFlops))) *
      replicas;
  out = std::move(e);
  return "";
}

} // namespace mtc
