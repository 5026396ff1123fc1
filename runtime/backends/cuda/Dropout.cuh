// Dropout: keep masks drawn from core/Rng.h's Philox counters, the same draw as the CPU
// backend, so both backends drop the same elements. The counters are shared with the
// attention kernels, which drop probabilities the same way.
#ifndef MT_RUNTIME_BACKENDS_CUDA_DROPOUT_CUH
#define MT_RUNTIME_BACKENDS_CUDA_DROPOUT_CUH

#include "backends/cuda/Common.cuh"
#include "core/Rng.h"

namespace mt {
namespace {

/// Reads x, writes out = x·keep/(1 − rate) and, when given, the keep mask (one byte per
/// element): the mask is drawn and applied in one pass.
template <typename T>
__global__ void dropoutKernel(const T *x, T *out, uint8_t *mask, int64_t n, double rate,
                              uint32_t stream, ShardMap shard, const StepCounters *counters) {
  const float scale = rate == 0 ? 1.f : static_cast<float>(1.0 / (1.0 - rate));
  const StepCounters c = *counters;
  GRID_STRIDE(i, n) {
    const bool keep = rate == 0 ||
                      rng::dropoutKeeps(c.seed, c.step, c.microBatch, stream, shard.global(i), rate);
    st(out, i, keep ? ld(x, i) * scale : 0.f);
    if (mask)
      mask[i] = keep;
  }
}

/// out = residual + dropout(x (+ bias per row of `cols`)), and the mask when given: the
/// bias add, the dropout and the add in one pass, each step rounded to T as the three
/// kernels store it, so the sum has the three's bits.
template <typename T>
__global__ void biasDropoutAddKernel(const T *x, const T *residual, const T *bias, int64_t cols,
                                     T *out, uint8_t *mask, int64_t n, double rate,
                                     uint32_t stream, ShardMap shard,
                                     const StepCounters *counters) {
  const float scale = rate == 0 ? 1.f : static_cast<float>(1.0 / (1.0 - rate));
  const StepCounters c = *counters;
  // Each product and sum rounded on its own (no contraction into a fused multiply-add),
  // as the separate kernels compute them.
  GRID_STRIDE(i, n) {
    float v = ld(x, i);
    if (bias)
      v = roundTo<T>(__fadd_rn(v, ld(bias, i % cols)));
    const bool keep = rate == 0 ||
                      rng::dropoutKeeps(c.seed, c.step, c.microBatch, stream, shard.global(i), rate);
    st(out, i, __fadd_rn(ld(residual, i), roundTo<T>(keep ? __fmul_rn(v, scale) : 0.f)));
    if (mask)
      mask[i] = keep;
  }
}

/// Reads dy and the saved mask, writes dx = dy·mask·scale.
template <typename T>
__global__ void dropoutGradKernel(const T *dy, const uint8_t *mask, T *dx, int64_t n,
                                  float scale) {
  GRID_STRIDE(i, n) st(dx, i, mask[i] ? ld(dy, i) * scale : 0.f);
}

template <typename T>
void launchDropout(const T *x, T *out, uint8_t *mask, int64_t n, double rate, uint32_t rngStream,
                   ShardMap shard, const StepCounters *c, cudaStream_t stream) {
  dropoutKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, out, mask, n, rate, rngStream, shard,
                                                       c);
}

template <typename T>
void launchBiasDropoutAdd(const T *x, const T *residual, const T *bias, int64_t cols, T *out,
                          uint8_t *mask, int64_t n, double rate, uint32_t rngStream,
                          ShardMap shard, const StepCounters *c, cudaStream_t stream) {
  biasDropoutAddKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, residual, bias, cols, out, mask,
                                                              n, rate, rngStream, shard, c);
}

template <typename T>
void launchDropoutGrad(const T *dy, const uint8_t *mask, T *dx, int64_t n, float scale,
                       cudaStream_t stream) {
  dropoutGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(dy, mask, dx, n, scale);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_DROPOUT_CUH
