#include "train/Optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace mt {
namespace {

/// The part of `t` (rank 1) in [begin, end), as a view.
TensorView slice(const TensorView &t, int64_t begin, int64_t end) {
  return sliceOf(t, dtypeBytes(t.dtype), begin, end);
}

/// The flat stores' sections and the group each is reduced and shared over: the rest
/// over the data-parallel ranks, and (expert parallelism) the experts over the ranks
/// holding the same experts. FlatLayout::shareOf gives a rank one run of each.
struct Section {
  Group group;
  FlatShare::Run run;
};
std::vector<Section> sections(const FlatLayout &layout) {
  std::vector<Section> s{{Group::Data, {0, layout.experts}}};
  if (layout.total > layout.experts)
    s.push_back({Group::ExpertData, {layout.experts, layout.total}});
  return s;
}

constexpr double kPi = 3.14159265358979323846;

/// The share of the way from the minimum to the peak at `progress` (0 to 1) of a decay
/// (scheduleError names the styles; cosine stands for any other).
double decayCoefficient(const std::string &style, double progress) {
  if (style == "linear")
    return 1.0 - progress;
  if (style == "exponential")
    return 2.0 * std::pow(0.5, progress) - 1.0;
  if (style == "minus_sqrt")
    return 1.0 - std::sqrt(progress);
  return 0.5 * (1.0 + std::cos(kPi * progress));
}

/// The schedule in samples, as Megatron counts it whether its lengths were given in
/// iterations (times the global batch) or in samples: a step's worth, the run, where the
/// decay ends, warm-up and WSD's anneal; with `scale`, the samples of one unit of the
/// lengths given, and the names of their flags.
struct Samples {
  double step, run, end, warmup, wsd, scale;
  const char *warmupFlag, *wsdFlag, *unit;
};
Samples samplesOf(const OptimizerConfig &c, int64_t totalSteps) {
  const bool given = c.trainSamples > 0;
  Samples s;
  s.step = static_cast<double>(c.samplesPerStep);
  s.scale = given ? 1 : s.step;
  s.run = given ? static_cast<double>(c.trainSamples) : static_cast<double>(totalSteps) * s.step;
  s.end = c.decay > 0 ? static_cast<double>(c.decay) * s.scale : s.run;
  s.warmup = c.warmupFraction ? *c.warmupFraction * s.end : static_cast<double>(c.warmup) * s.scale;
  s.wsd = static_cast<double>(c.wsdDecay) * s.scale;
  s.warmupFlag = given ? "--lr-warmup-samples" : "--warmup-steps";
  s.wsdFlag = given ? "--lr-wsd-decay-samples" : "--lr-wsd-decay-steps";
  s.unit = given ? "samples" : "steps";
  return s;
}

/// WSD's anneal style: exponential, Megatron's default, where none is given.
const std::string &wsdStyle(const OptimizerConfig &c) {
  static const std::string exponential = "exponential";
  return c.wsdDecayStyle.empty() ? exponential : c.wsdDecayStyle;
}

} // namespace

std::string scheduleError(const OptimizerConfig &c, int64_t totalSteps) {
  static const char *const kStyles[] = {"cosine", "linear", "constant", "inverse-square-root",
                                        "WSD"};
  static const char *const kWsdStyles[] = {"exponential", "linear", "cosine", "minus_sqrt"};
  static const char *const kIncrStyles[] = {"constant", "linear", "cosine"};
  const auto named = [](const auto &names, const std::string &s) {
    return std::find(std::begin(names), std::end(names), s) != std::end(names);
  };
  const Samples s = samplesOf(c, totalSteps);
  if (!named(kStyles, c.decayStyle))
    return "--lr-decay must be cosine, linear, constant, inverse-square-root or WSD";
  if (!(c.minLr >= 0 && c.lr >= c.minLr && c.warmupInit >= 0 && c.warmupInit <= c.lr))
    return "the learning rates need 0 <= --min-lr <= --lr and 0 <= --lr-warmup-init <= --lr";
  if (c.decayStyle != "WSD" && (c.wsdDecay >= 0 || !c.wsdDecayStyle.empty()))
    return cat(s.wsdFlag, " and --lr-wsd-decay-style apply to --lr-decay WSD");
  if (c.warmupFraction && c.warmup > 0)
    return cat("warm-up is ", s.warmupFlag, " or --lr-warmup-fraction, not both");
  if (c.warmupFraction && !(*c.warmupFraction >= 0 && *c.warmupFraction < 1))
    return "--lr-warmup-fraction must be at least 0 and below 1";
  if (!named(kIncrStyles, c.weightDecayIncrStyle))
    return "--weight-decay-incr-style must be constant, linear or cosine";
  // As Megatron's arguments and scheduler: constant weight decay is --weight-decay's, an
  // increment names both ends, and does not fall.
  if (c.weightDecayIncrStyle == "constant" && (c.startWeightDecay || c.endWeightDecay))
    return "--start-weight-decay and --end-weight-decay apply to --weight-decay-incr-style "
           "linear or cosine (constant: --weight-decay)";
  if (c.weightDecayIncrStyle != "constant" && !(c.startWeightDecay && c.endWeightDecay))
    return cat("--weight-decay-incr-style ", c.weightDecayIncrStyle,
               " needs --start-weight-decay and --end-weight-decay");
  if (c.startWeightDecay && !(*c.startWeightDecay >= 0 && *c.endWeightDecay >= *c.startWeightDecay))
    return "the weight decay increment needs 0 <= --start-weight-decay <= --end-weight-decay";
  // Megatron's scheduler asserts the decay outlasts warm-up; mtc's older styles keep the
  // peak after a warm-up that does not end before the decay would.
  if ((c.decayStyle == "WSD" || c.decayStyle == "inverse-square-root") && s.warmup >= s.end)
    return cat("--lr-decay ", c.decayStyle, " needs more decay ", s.unit, " (", s.end / s.scale,
               ") than warm-up (", s.warmup / s.scale, ")");
  if (c.decayStyle != "WSD")
    return "";
  if (!named(kWsdStyles, wsdStyle(c)))
    return "--lr-wsd-decay-style must be exponential, linear, cosine or minus_sqrt";
  if (c.wsdDecay < 0)
    return cat("--lr-decay WSD needs ", s.wsdFlag, ": the decay ", s.unit, " it anneals over");
  return "";
}

double learningRate(const OptimizerConfig &c, int64_t step, int64_t totalSteps) {
  const Samples s = samplesOf(c, totalSteps);
  const double n = static_cast<double>(step) * s.step;
  // Megatron's warm-up, to num_steps = W, one update ahead: the peak once the update
  // reaches W (a warm-up that ends within a step ends at it).
  if (s.warmup > 0 && n <= s.warmup)
    return n + s.step > s.warmup ? c.lr
                                 : c.warmupInit + (c.lr - c.warmupInit) * (n + s.step) / s.warmup;
  if (c.decayStyle == "constant" || s.end <= s.warmup) // nothing to decay over
    return c.lr;
  if (n > s.end)
    return c.minLr;
  if (c.decayStyle == "inverse-square-root")
    return std::max(c.minLr,
                    c.lr * std::sqrt(std::max(s.warmup, 1.0)) / std::sqrt(std::max(n, 1.0)));
  double coefficient = 1;
  if (c.decayStyle == "WSD") {
    const double annealFrom = s.end - s.wsd; // n <= end: no anneal of 0 samples
    if (n > annealFrom)
      coefficient = decayCoefficient(wsdStyle(c), (n - annealFrom) / s.wsd);
  } else {
    coefficient = decayCoefficient(c.decayStyle, (n - s.warmup) / (s.end - s.warmup));
  }
  return c.minLr + coefficient * (c.lr - c.minLr);
}

double weightDecay(const OptimizerConfig &c, int64_t step, int64_t totalSteps) {
  if (c.weightDecayIncrStyle == "constant")
    return c.weightDecay;
  const Samples s = samplesOf(c, totalSteps);
  const double n = static_cast<double>(step) * s.step;
  if (n > s.run)
    return *c.endWeightDecay;
  const double ratio = n / s.run, coefficient = c.weightDecayIncrStyle == "linear"
                                                    ? ratio
                                                    : 0.5 * (std::cos(kPi * (1 - ratio)) + 1.0);
  return *c.startWeightDecay + coefficient * (*c.endWeightDecay - *c.startWeightDecay);
}

std::string scheduleRecord(const OptimizerConfig &c, int64_t totalSteps) {
  const Samples s = samplesOf(c, totalSteps);
  auto number = [](double v) { // whole numbers whole; others the shortest text of v
    char text[32];
    if (v == std::floor(v) && std::fabs(v) < 1e15)
      return std::to_string(static_cast<int64_t>(v));
    for (int digits = 1; digits <= 17; ++digits)
      if (std::snprintf(text, sizeof text, "%.*g", digits, v), std::strtod(text, nullptr) == v)
        break;
    return std::string(text);
  };
  // Megatron's names for the settings, lengths always in samples.
  std::string record = cat("lr=", number(c.lr), ";lr-decay-style=", c.decayStyle,
                           ";lr-warmup-samples=", number(s.warmup));
  if (s.warmup > 0)
    record += ";lr-warmup-init=" + number(c.warmupInit);
  if (c.decayStyle != "constant")
    record += cat(";min-lr=", number(c.minLr), ";lr-decay-samples=", number(s.end));
  if (c.decayStyle == "WSD")
    record += cat(";lr-wsd-decay-samples=", number(s.wsd), ";lr-wsd-decay-style=", wsdStyle(c));
  if (c.weightDecayIncrStyle == "constant")
    return record + ";weight-decay=" + number(c.weightDecay);
  return record + cat(";weight-decay-incr-style=", c.weightDecayIncrStyle,
                      ";start-weight-decay=", number(*c.startWeightDecay),
                      ";end-weight-decay=", number(*c.endWeightDecay),
                      ";weight-decay-incr-samples=", number(s.run));
}

std::string scheduleDifference(const std::string &recorded, const std::string &resumed) {
  // Each record's settings in its order: the recorded ones first, then any only here.
  auto settings = [](const std::string &record) {
    std::vector<std::pair<std::string, std::string>> out;
    std::istringstream in(record);
    for (std::string item; std::getline(in, item, ';');) {
      const size_t eq = item.find('=');
      out.emplace_back(item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1));
    }
    return out;
  };
  const auto there = settings(recorded), here = settings(resumed);
  auto valueIn = [](const auto &side, const std::string &name) {
    for (const auto &[key, value] : side)
      if (key == name)
        return value;
    return std::string("none");
  };
  std::string difference;
  for (const auto *side : {&there, &here})
    for (const auto &[name, value] : *side) {
      const std::string was = valueIn(there, name), is = valueIn(here, name);
      if (was != is && (side == &there || was == "none"))
        difference += cat(difference.empty() ? "" : "; ", name, " ", was, " there, ", is, " here");
    }
  return difference;
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
  if (comm.size(Group::Data) == 1)
    return Status::success();
  const TensorView &grads = executor.flatGrads();
  const int64_t bucket = std::max<int64_t>(
      1, static_cast<int64_t>(bucketBytes / dtypeBytes(grads.dtype)));
  for (const auto &[group, run] : sections(executor.flatLayout())) {
    const TensorView all = slice(grads, run.begin, run.end);
    if (distributedOptimizer) {
      const int64_t shard = (run.end - run.begin) / comm.size(group),
                    first = run.begin + comm.rank(group) * shard;
      // In place: the sum of this rank's share replaces it (the rest is not read again).
      MT_TRY(comm.reduceScatter(group, all, slice(grads, first, first + shard), 0));
      continue;
    }
    for (int64_t begin = run.begin; begin < run.end; begin += bucket) {
      TensorView b = slice(grads, begin, std::min(run.end, begin + bucket));
      MT_TRY(comm.allReduceSum(group, b, b));
    }
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
  const FlatLayout &layout = executor.flatLayout();
  adam->share_ = distributed ? layout.shareOf(executor.comm().rank(Group::Data)) : layout.whole();
  const int64_t count = adam->share_.numel();
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
  const bool tpLeader = comm.rank(Group::Tensor) == 0;
  const int stage = comm.rank(Group::Pipeline);

  // Global norm over the parameters this rank updates; a parameter replicated across
  // the tensor-parallel group (an expert's weight too) counts once (on its first rank),
  // and one several pipeline stages hold counts on the first of them.
  // The experts' weights of an expert-parallel group are each rank's own: their squares
  // are summed over the group (with the distributed optimizer, over Group::Data with the
  // rest: each share of each rank's experts is one rank's).
  std::vector<TensorView> counted, experts;
  for (Executor::Parameter &p : executor_.parameters()) {
    const bool tpSplit = p.spec->shard_dim() >= 0 && !p.spec->expert_parallel();
    if (!(tpSplit || tpLeader) || !(p.holders.empty() || p.holders.front() == stage))
      continue;
    std::vector<TensorView> &into = p.spec->expert_parallel() && !distributed_ ? experts : counted;
    share_.forEachIn(p.offset, p.offset + p.numel, [&](int64_t begin, int64_t end) {
      into.push_back(slice(executor_.flatGrads(), begin, end));
    });
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

Status AdamW::step(int64_t step, double lr, double weightDecay, double gradScale, double gradNorm) {
  Backend &backend = executor_.backend();
  Comm &comm = executor_.comm();
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
  // The programs' 16-bit copy follows the master weights it is rounded from: written by
  // the update itself where the weights it updates are all the copy needs (without a
  // distributed optimizer, or with the master weights sharded, each rank's share);
  // otherwise converted once the master weights are gathered.
  const bool sharded = executor_.masterSharded();
  const TensorView &compute = executor_.flatCompute();
  const bool copies = compute.data && (!distributed_ || sharded);
  std::vector<AdamWTensors> tensors;
  for (Executor::Parameter &p : executor_.parameters())
    share_.forEachIn(p.offset, p.offset + p.numel, [&](int64_t begin, int64_t end) {
      const int64_t at = share_.local(begin);
      // Biases and LayerNorm parameters (vectors) are not decayed, as in Megatron.
      tensors.push_back(
          {executor_.masterSlice(begin, end), slice(executor_.flatGrads(), begin, end),
           slice(expAvg_, at, at + end - begin), slice(expAvgSq_, at, at + end - begin),
           p.weight.rank >= 2 ? weightDecay : 0.0,
           copies ? slice(compute, begin, end) : TensorView{}});
    });
  MT_TRY(backend.adamw(tensors, update));
  if (!distributed_)
    return Status::success();
  // Each section's shares are gathered: of the master weights, or, where each rank keeps
  // only its share of those, of the compute copy each rounded its share into.
  const TensorView &gathered = sharded ? compute : executor_.flatWeights();
  const std::vector<Section> all = sections(executor_.flatLayout());
  for (size_t i = 0; i < all.size(); ++i) {
    const FlatShare::Run mine = share_.runs[i], run = all[i].run;
    MT_TRY(comm.allGather(all[i].group, slice(gathered, mine.begin, mine.end),
                          slice(gathered, run.begin, run.end), 0));
  }
  return sharded ? Status::success() : executor_.refreshComputeWeights();
}

} // namespace mt
