// AdamW with global-norm gradient clipping, and the learning-rate schedule
// (linear warm-up, then cosine or linear decay to a floor), as Megatron-LM trains.
#ifndef MT_RUNTIME_TRAIN_OPTIMIZER_H
#define MT_RUNTIME_TRAIN_OPTIMIZER_H

#include "core/Executor.h"

#include <string>
#include <vector>

namespace mt {

struct OptimizerConfig {
  double lr = 6e-4, minLr = 0;
  int64_t warmupSteps = 0;
  int64_t decaySteps = 0; // 0: the whole run
  std::string decayStyle = "cosine"; // cosine | linear | constant
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weightDecay = 0.1;
  double clipGrad = 1.0; // 0: no clipping
};

/// Learning rate of (0-based) `step` of a run of `totalSteps`.
double learningRate(const OptimizerConfig &config, int64_t step, int64_t totalSteps);

class AdamW {
public:
  AdamW(Executor &executor, OptimizerConfig config);
  ~AdamW();
  AdamW(const AdamW &) = delete;
  AdamW &operator=(const AdamW &) = delete;

  /// Updates every parameter from its accumulated gradient times `gradScale`
  /// (1/micro-batches), clipped to `clipGrad` in global norm. `step` is 1-based.
  /// Returns the gradient norm before clipping.
  double step(int64_t step, double lr, double gradScale);

  /// Adam's first and second moments, in parameter order.
  const std::vector<TensorView> &expAvg() const { return expAvg_; }
  const std::vector<TensorView> &expAvgSq() const { return expAvgSq_; }

private:
  Executor &executor_;
  OptimizerConfig config_;
  std::vector<TensorView> expAvg_, expAvgSq_;
};

} // namespace mt

#endif
