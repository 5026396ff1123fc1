#include "train/Optimizer.h"

#include <algorithm>
#include <cmath>

namespace mt {

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

AdamW::AdamW(Executor &executor, OptimizerConfig config)
    : executor_(executor), config_(std::move(config)) {
  Backend &backend = executor_.backend();
  for (const Executor::Parameter &p : executor_.parameters()) {
    for (auto *moments : {&expAvg_, &expAvgSq_}) {
      TensorView v = p.weight;
      v.data = backend.allocate(p.bytes);
      backend.setZero(v.data, p.bytes);
      moments->push_back(v);
    }
  }
}

AdamW::~AdamW() {
  for (auto *moments : {&expAvg_, &expAvgSq_})
    for (TensorView &v : *moments)
      executor_.backend().release(v.data);
}

double AdamW::step(int64_t step, double lr, double gradScale) {
  Backend &backend = executor_.backend();
  auto &params = executor_.parameters();
  double sumSquares = 0;
  for (const Executor::Parameter &p : params)
    sumSquares += backend.sumOfSquares(p.grad);
  const double norm = std::sqrt(sumSquares) * gradScale;
  double clip = 1.0;
  if (config_.clipGrad > 0 && norm > config_.clipGrad)
    clip = config_.clipGrad / norm;

  AdamWStep update;
  update.lr = lr;
  update.beta1 = config_.beta1;
  update.beta2 = config_.beta2;
  update.eps = config_.eps;
  update.gradScale = gradScale * clip;
  update.step = step;
  for (size_t i = 0; i < params.size(); ++i) {
    // Biases and LayerNorm parameters (vectors) are not decayed, as in Megatron.
    update.weightDecay = params[i].weight.rank >= 2 ? config_.weightDecay : 0.0;
    backend.adamw(params[i].weight, params[i].grad, expAvg_[i], expAvgSq_[i], update);
  }
  return norm;
}

} // namespace mt
