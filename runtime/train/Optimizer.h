// AdamW with global-norm gradient clipping, the learning-rate schedule (linear warm-up,
// then cosine or linear decay to a floor), and the gradient synchronisation across
// ranks, as Megatron-LM trains.
#ifndef MT_RUNTIME_TRAIN_OPTIMIZER_H
#define MT_RUNTIME_TRAIN_OPTIMIZER_H

#include "exec/Executor.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mt {

struct OptimizerConfig {
  double lr = 6e-4, minLr = 0;
  double warmupInit = 0; // the rate warm-up starts from (Megatron's --lr-warmup-init)
  // The schedule's lengths count steps, or samples where the run is given in samples
  // (Megatron's --train-samples: trainSamples > 0, each step samplesPerStep of them).
  int64_t trainSamples = 0;
  int64_t warmup = 0;
  // Megatron's --lr-warmup-fraction: warm-up over this share of the decay, in place of
  // `warmup` (a length that need not be whole).
  std::optional<double> warmupFraction;
  int64_t decay = 0; // 0: the whole run
  // cosine | linear | constant | inverse-square-root | WSD (Megatron's names)
  std::string decayStyle = "cosine";
  // WSD: the last `wsdDecay` of the decay anneal (-1: not given), in `wsdDecayStyle`
  // (exponential, the default where empty | linear | cosine | minus_sqrt); the rest hold
  // the peak.
  int64_t wsdDecay = -1;
  std::string wsdDecayStyle;
  // Samples a step takes (the global batch): Megatron counts its schedule in them, and so
  // does learningRate, lengths in steps times this (which shows in the last bit of a
  // warm-up ramp, and in inverse-square-root without warm-up: peak/√(n·samples) at step n).
  int64_t samplesPerStep = 1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  // Weight decay: `weightDecay` throughout, or (Megatron's --weight-decay-incr-style
  // linear | cosine) from startWeightDecay at the first step to endWeightDecay at the
  // run's end.
  double weightDecay = 0.1;
  std::string weightDecayIncrStyle = "constant";
  std::optional<double> startWeightDecay, endWeightDecay;
  double clipGrad = 1.0; // 0: no clipping
};

/// Learning rate of (0-based) `step` of a run of `totalSteps`: Megatron's
/// OptimizerParamScheduler at num_steps = the samples before it, step · samplesPerStep,
/// but in warm-up, where update k = step + 1 takes init + (peak − init)·k·B/W (W in
/// samples; Megatron's k − 1).
double learningRate(const OptimizerConfig &config, int64_t step, int64_t totalSteps);
/// Weight decay of (0-based) `step`: Megatron's OptimizerParamScheduler.get_wd at
/// num_steps = step (or its samples).
double weightDecay(const OptimizerConfig &config, int64_t step, int64_t totalSteps);
/// What a checkpoint records of the schedule: each setting that shapes the updates, as
/// "name=value;..." (lengths in samples), so that a resume with another is refused as
/// Megatron's scheduler refuses one (scheduleDifference).
std::string scheduleRecord(const OptimizerConfig &config, int64_t totalSteps);
/// How `resumed`'s record differs from `recorded` ("" where it does not): each setting,
/// "lr 0.0006 there, 0.001 here; ...".
std::string scheduleDifference(const std::string &recorded, const std::string &resumed);
/// Why `config`'s schedule is not one learningRate computes over `totalSteps`, or "".
std::string scheduleError(const OptimizerConfig &config, int64_t totalSteps);

/// Makes every rank's gradients those of the whole global batch (still summed over
/// micro-batches): sums the sequence-parallel partial gradients of replicated
/// parameters over the tensor-parallel group, then sums over the data-parallel group
/// (under expert parallelism the experts' over the ranks holding the same experts) —
/// all-reduce in buckets of `bucketBytes`, or, with the distributed optimizer, a
/// reduce-scatter that leaves each rank the sum over its own shares only.
Status synchronizeGradients(Executor &executor, bool distributedOptimizer,
                            uint64_t bucketBytes);

/// fp16's dynamic loss scaling, with Megatron's defaults and rules: the loss is
/// multiplied by `scale` before backward; a step whose gradients overflow is skipped.
/// The first `hysteresis` - 1 overflows since the scale last grew are tolerated, every
/// later one halves the scale (to at least `minScale`); `window` good steps in a row
/// double it and restore the tolerance.
struct LossScaler {
  double scale = 4294967296.0, minScale = 1;
  int64_t window = 1000, hysteresis = 2;
  int64_t goodSteps = 0, hysteresisLeft = 2; // the state a checkpoint keeps

  /// After a step: `overflow` says whether its gradients were not finite.
  void update(bool overflow) {
    if (overflow) {
      goodSteps = 0;
      hysteresisLeft = std::max<int64_t>(hysteresisLeft - 1, 0);
      if (hysteresisLeft == 0)
        scale = std::max(scale / 2, minScale);
      return;
    }
    if (++goodSteps == window) {
      goodSteps = 0;
      hysteresisLeft = hysteresis;
      scale *= 2;
    }
  }
};

class AdamW {
public:
  /// With `distributed`, this rank keeps Adam's moments for, and updates, only its
  /// shares of the flat parameter store (Megatron's distributed optimizer): 1/dp of the
  /// rest, and 1/(dp/ep) of its experts. The moments start at zero.
  static Status create(Executor &executor, OptimizerConfig config, bool distributed,
                       std::unique_ptr<AdamW> &out);
  AdamW(const AdamW &) = delete; // the moments' views point into memory it owns
  AdamW &operator=(const AdamW &) = delete;

  /// Collective: norm = the global norm of the synchronised gradients times `gradScale`.
  Status gradientNorm(double gradScale, double &norm);

  /// Updates from the synchronised gradients times `gradScale` (1/micro-batches, and
  /// 1/loss scale), clipped to `clipGrad` in global norm (`gradNorm`, from
  /// gradientNorm, which must be finite); with the distributed optimizer, gathers the
  /// updated shards back to every rank. `step` is 1-based; `weightDecay` decays the
  /// matrices (biases and norms' vectors are not decayed, as in Megatron).
  Status step(int64_t step, double lr, double weightDecay, double gradScale, double gradNorm);

  /// The elements of the flat stores this rank updates (FlatLayout's, or with the
  /// distributed optimizer its shares), and Adam's first and second moments over them.
  const FlatShare &share() const { return share_; }
  const TensorView &expAvg() const { return expAvg_; }
  const TensorView &expAvgSq() const { return expAvgSq_; }
  bool distributed() const { return distributed_; }

private:
  AdamW(Executor &executor, OptimizerConfig config, bool distributed);

  Executor &executor_;
  OptimizerConfig config_;
  bool distributed_;
  FlatShare share_;
  TensorView expAvg_, expAvgSq_;
  DeviceMemory expAvgMemory_, expAvgSqMemory_;
};

} // namespace mt

#endif
