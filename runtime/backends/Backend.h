// What the executor needs from a device: memory, one call per plan instruction, and
// the optimizer's arithmetic. The CPU backend is the numerical reference; the CUDA
// backend implements the same interface.
#ifndef MT_RUNTIME_BACKENDS_BACKEND_H
#define MT_RUNTIME_BACKENDS_BACKEND_H

#include "core/Status.h"
#include "core/Tensor.h"

#include <cstddef>
#include <memory>

namespace mt {

/// Where in training an instruction runs: the counters of every random number, and
/// this rank's place in the tensor-parallel group (which vocabulary rows or sequence
/// block it holds).
struct StepContext {
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t microBatch = 0;
  int tpRank = 0, tpSize = 1;
  /// The factor of the loss seed (a Fill marked `loss_seed`): fp16's dynamic loss
  /// scale, else 1.
  double lossScale = 1;
};

/// One AdamW update (Loshchilov & Hutter 2019), with the gradient scaled first
/// (1/micro-batches and the clipping factor folded into one number).
struct AdamWStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  double gradScale = 1;
  int64_t step = 1; // 1-based, for the bias corrections
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual const char *name() const = 0;

  virtual void *allocate(size_t bytes) = 0;
  virtual void release(void *data) = 0;
  virtual void copyToDevice(void *device, const void *host, size_t bytes) = 0;
  virtual void copyToHost(void *host, const void *device, size_t bytes) = 0;
  virtual void setZero(void *device, size_t bytes) = 0;
  /// dst = src element by element, between any float types (rounding to nearest even).
  virtual void convert(const TensorView &dst, const TensorView &src) = 0;

  /// Runs one instruction. For ParamGrad, `outputs[0]` is the parameter's gradient,
  /// which the input is added into.
  virtual Status run(const plan::Instruction &inst, const TensorView *inputs,
                     const TensorView *outputs, const StepContext &context) = 0;

  /// Writes the initial values of this rank's shard of `param` (block `tpRank` of
  /// `tpSize` along its shard dimension), as a function of (seed, name, global
  /// element index) only.
  virtual void initParameter(const TensorView &weight, const plan::Param &param,
                             uint64_t seed, int tpRank, int tpSize) = 0;

  /// Σ x², accumulated in double.
  virtual double sumOfSquares(const TensorView &x) = 0;
  virtual void adamw(const TensorView &weight, const TensorView &grad,
                     const TensorView &expAvg, const TensorView &expAvgSq,
                     const AdamWStep &step) = 0;
};

std::unique_ptr<Backend> makeCpuBackend();

/// GPUs this process sees (0 without a driver, a device, or a CUDA build).
int cudaDevices();
/// The CUDA backend on `device`; fails with the reason (no device, a build without
/// CUDA).
Status makeCudaBackend(int device, std::unique_ptr<Backend> &out);

} // namespace mt

#endif
