#include "train/Optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mt {
namespace {

/// The part of `t` (rank 1) in [begin, end), as a view.
TensorView slice(const TensorView &t, int64_t begin, int64_t end) {
  return sliceOf(t, dtypeBytes(t.dtype), begin, end);
}

} // namespace

double learningRate(const OptimizerConfig &c, int64_t step, int64_t totalSteps) {
  if (c.warmupSteps > 0 && step < c.warmupSteps)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmupSteps);
  if (c.decayStyle == "constant")
    return c.lr;
  const int64_t decaySteps = (c.decaySteps > 0 ? c.decaySteps : totalSteps) - c.warmupSteps;
  if (decaySteps <= 0)
    return c.lr;
  double progress = std::min(1.0, static_cast<double>(step - c.warmupSteps) / decaySteps);
  double coefficient = c.decayStyle == "linear"
                           ? 1.0 - progress
                           : 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  return c.minLr + coefficient * (c.lr - c.minLr);
}

Status synchronizeGradients(Executor &executor, bool distributedOptimizer,
                            uint64_t bucketBytes) {
  Comm &comm = executor.comm();
  if (comm.size(Group::Tensor) > 1)
    for (Executor::Parameter &p : executor.parameters())
      if (p.spec->tp_grad_reduce())
        MT_TRY(comm.allReduceSum(Group::Tensor, p.grad, p.grad));
  // A parameter several pipeline stages hold (the tied embedding) gets each stage's part.
  for (Executor::Parameter &p : executor.parameters())
    if (p.holders.size() > 1)
      MT_TRY(comm.allReduceSumAmong(Group::Pipeline, p.holders, p.grad));
  const int parts = comm.size(Group::Data);
  if (parts == 1)
    return Status::success();
  const TensorView &grads = executor.flatGrads();
  const int64_t total = grads.numel();
  if (comm.size(Group::Expert) > 1) {
    // Under expert parallelism an expert's weight reduces over the ranks holding the same
    // experts, the rest over all data-parallel ranks (no distributed optimizer then).
    for (Executor::Parameter &p : executor.parameters())
      MT_TRY(comm.allReduceSum(p.spec->expert_parallel() ? Group::ExpertData : Group::Data, p.grad,
                               p.grad));
    return Status::success();
  }
  if (distributedOptimizer) {
    const int64_t shard = total / parts, first = comm.rank(Group::Data) * shard;
    // In place: the sum of this rank's share replaces it (the rest is not read again).
    return comm.reduceScatter(Group::Data, grads, slice(grads, first, first + shard), 0);
  }
  const int64_t bucket = std::max<int64_t>(
      1, static_cast<int64_t>(bucketBytes / dtypeBytes(grads.dtype)));
  for (int64_t begin = 0; begin < total; begin += bucket) {
    TensorView b = slice(grads, begin, std::min(total, begin + bucket));
    MT_TRY(comm.allReduceSum(Group::Data, b, b));
  }
  return Status::success();
}

AdamW::AdamW(Executor &executor, OptimizerConfig config, bool distributed)
    : executor_(executor), config_(std::move(config)), distributed_(distributed) {}

Status AdamW::create(Executor &executor, OptimizerConfig config, bool distributed,
                     std::unique_ptr<AdamW> &out) {
  std::unique_ptr<AdamW> adam(new AdamW(executor, std::move(config), distributed));
  Backend &backend = executor.backend();
  const TensorView &flat = executor.flatGrads();
  int64_t count = flat.numel();
  if (distributed) {
    count /= executor.comm().size(Group::Data);
    adam->first_ = executor.comm().rank(Group::Data) * count;
  }
  const size_t bytes = dtypeBytes(flat.dtype) * count;
  for (auto [moments, memory] : {std::pair{&adam->expAvg_, &adam->expAvgMemory_},
                                 std::pair{&adam->expAvgSq_, &adam->expAvgSqMemory_}}) {
    MT_TRY(memory->allocate(backend, bytes));
    *moments = slice(flat, 0, count);
    moments->data = memory->data();
    MT_TRY(backend.setZero(moments->data, bytes));
  }
  out = std::move(adam);
  return Status::success();
}

Status AdamW::gradientNorm(double gradScale, double &norm) {
  Backend &backend = executor_.backend();
  Comm &comm = executor_.comm();
  const int64_t last = first_ + expAvg_.numel();
  const bool tpLeader = comm.rank(Group::Tensor) == 0;
  const int stage = comm.rank(Group::Pipeline);

  // Global norm over the parameters this rank updates; a parameter replicated across
  // the tensor-parallel group (an expert's weight too) counts once (on its first rank),
  // and one several pipeline stages hold counts on the first of them.
  // The experts' weights of an expert-parallel group are each rank's own: their squares
  // are summed over the group.
  std::vector<TensorView> counted, experts;
  for (Executor::Parameter &p : executor_.parameters()) {
    int64_t begin = std::max(first_, p.offset), end = std::min(last, p.offset + p.numel);
    const bool tpSplit = p.spec->shard_dim() >= 0 && !p.spec->expert_parallel();
    if (begin < end && (tpSplit || tpLeader) && (p.holders.empty() || p.holders.front() == stage))
      (p.spec->expert_parallel() ? experts : counted)
          .push_back(slice(executor_.flatGrads(), begin, end));
  }
  double sumSquares = 0, expertSquares = 0;
  MT_TRY(backend.sumOfSquares(counted, sumSquares));
  if (!experts.empty()) {
    MT_TRY(backend.sumOfSquares(experts, expertSquares));
    MT_TRY(comm.allReduceSum(Group::Expert, expertSquares));
    sumSquares += expertSquares;
  }
  MT_TRY(comm.allReduceSum(Group::Tensor, sumSquares));
  MT_TRY(comm.allReduceSum(Group::Pipeline, sumSquares));
  if (distributed_)
    MT_TRY(comm.allReduceSum(Group::Data, sumSquares));
  norm = std::sqrt(sumSquares) * gradScale;
  return Status::success();
}

Status AdamW::step(int64_t step, double lr, double gradScale, double gradNorm) {
  Backend &backend = executor_.backend();
  Comm &comm = executor_.comm();
  const int64_t last = first_ + expAvg_.numel();
  if (!std::isfinite(gradNorm))
    return Status::failure(cat("the gradient norm is ", std::isnan(gradNorm) ? "NaN" : "infinite",
                               ": the update is not applied"));
  double clip = 1.0;
  if (config_.clipGrad > 0 && gradNorm > config_.clipGrad)
    clip = config_.clipGrad / gradNorm;

  AdamWStep update;
  update.lr = lr;
  update.beta1 = config_.beta1;
  update.beta2 = config_.beta2;
  update.eps = config_.eps;
  update.gradScale = gradScale * clip;
  update.step = step;
  std::vector<AdamWTensors> tensors;
  for (Executor::Parameter &p : executor_.parameters()) {
    int64_t begin = std::max(first_, p.offset), end = std::min(last, p.offset + p.numel);
    if (begin >= end)
      continue;
    // Biases and LayerNorm parameters (vectors) are not decayed, as in Megatron.
    tensors.push_back({executor_.masterSlice(begin, end), slice(executor_.flatGrads(), begin, end),
                       slice(expAvg_, begin - first_, end - first_),
                       slice(expAvgSq_, begin - first_, end - first_),
                       p.weight.rank >= 2 ? config_.weightDecay : 0.0});
  }
  MT_TRY(backend.adamw(tensors, update));
  // The programs' 16-bit copy follows the master weights it was rounded from.
  if (!distributed_)
    return executor_.refreshComputeWeights();
  if (executor_.masterSharded()) {
    // Each rank rounds its share into the compute copy, and the copies are gathered.
    MT_TRY(executor_.refreshComputeWeights(first_, last));
    const TensorView &copy = executor_.flatCompute();
    return comm.allGather(Group::Data, slice(copy, first_, last), copy, 0);
  }
  const TensorView &weights = executor_.flatWeights();
  MT_TRY(comm.allGather(Group::Data, slice(weights, first_, last), weights, 0));
  return executor_.refreshComputeWeights();
}

} // namespace mt
