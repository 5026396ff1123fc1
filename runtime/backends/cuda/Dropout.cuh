// Dropout: keep masks drawn from core/Rng.h's Philox counters, the same draw as the CPU
// backend, so both backends drop the same elements. The counters are shared with the
// attention kernels, which drop probabilities the same way.
#ifndef MT_RUNTIME_BACKENDS_CUDA_DROPOUT_CUH
#define MT_RUNTIME_BACKENDS_CUDA_DROPOUT_CUH

#include "backends/cuda/Common.cuh"
#include "core/Rng.h"

namespace mt {
namespace {

// Each thread takes four consecutive elements: one Philox block serves the four, and they
// move as one access where `vector` (quadsAligned).

/// Reads x, writes out = x·keep/(1 − rate) and, when given, the keep mask (one byte per
/// element): the mask is drawn and applied in one pass.
template <typename T>
__global__ void dropoutKernel(const T *x, T *out, uint8_t *mask, int64_t n, double rate,
                              uint32_t stream, ShardMap shard, const StepCounters *counters,
                              bool vector) {
  const float scale = keptScale(rate);
  const StepCounters c = *counters;
  GRID_STRIDE(q, quadsOf(n)) {
    const int64_t i = 4 * q;
    const int count = quadCount(n, i);
    float v[4] = {};
    uint8_t keep[4] = {};
    loadQuad(x, i, count, vector, v);
    rng::dropoutKeepsQuad(c.seed, c.step, c.microBatch, stream, shard, i, count, rate, keep);
    forQuad(count, [&](int k) { v[k] = keep[k] ? v[k] * scale : 0.f; });
    storeQuad(out, i, count, vector, v);
    if (mask)
      storeQuad(mask, i, count, vector, keep);
  }
}

/// out = residual + dropout(x (+ bias per row of `cols`)), and the mask when given: the
/// bias add, the dropout and the add in one pass, each step rounded to T as the three
/// kernels store it, so the sum has the three's bits.
template <typename T>
__global__ void biasDropoutAddKernel(const T *x, const T *residual, const T *bias, int64_t cols,
                                     T *out, uint8_t *mask, int64_t n, double rate, uint32_t stream,
                                     ShardMap shard, const StepCounters *counters, bool vector) {
  const float scale = keptScale(rate);
  const StepCounters c = *counters;
  // Each product and sum rounded on its own (no contraction into a fused multiply-add),
  // as the separate kernels compute them.
  GRID_STRIDE(q, quadsOf(n)) {
    const int64_t i = 4 * q;
    const int count = quadCount(n, i);
    float v[4] = {}, r[4] = {};
    uint8_t keep[4] = {};
    loadQuad(x, i, count, vector, v);
    loadQuad(residual, i, count, vector, r);
    rng::dropoutKeepsQuad(c.seed, c.step, c.microBatch, stream, shard, i, count, rate, keep);
    // The quad's first column: a 32-bit remainder where both fit (a 64-bit one is a long
    // sequence of instructions, per thread).
    int64_t column = 0;
    if (bias)
      column =
          (i | cols) >> 32 == 0 ? static_cast<uint32_t>(i) % static_cast<uint32_t>(cols) : i % cols;
    forQuad(count, [&](int k) {
      if (bias) {
        v[k] = roundTo<T>(__fadd_rn(v[k], ld(bias, column)));
        column = column + 1 == cols ? 0 : column + 1;
      }
      v[k] = __fadd_rn(r[k], roundTo<T>(keep[k] ? __fmul_rn(v[k], scale) : 0.f));
    });
    storeQuad(out, i, count, vector, v);
    if (mask)
      storeQuad(mask, i, count, vector, keep);
  }
}

/// Reads dy and the saved mask, writes dx = dy·mask·scale.
template <typename T>
__global__ void dropoutGradKernel(const T *dy, const uint8_t *mask, T *dx, int64_t n, float scale,
                                  bool vector) {
  GRID_STRIDE(q, quadsOf(n)) {
    const int64_t i = 4 * q;
    const int count = quadCount(n, i);
    float v[4] = {};
    uint8_t keep[4] = {};
    loadQuad(dy, i, count, vector, v);
    loadQuad(mask, i, count, vector, keep);
    forQuad(count, [&](int k) { v[k] = keep[k] ? v[k] * scale : 0.f; });
    storeQuad(dx, i, count, vector, v);
  }
}

template <typename T>
void launchDropout(const T *x, T *out, uint8_t *mask, int64_t n, double rate, uint32_t rngStream,
                   ShardMap shard, const StepCounters *c, cudaStream_t stream) {
  const bool vector = quadsAligned(x, out, mask);
  dropoutKernel<<<blocksFor(quadsOf(n)), kThreads, 0, stream>>>(x, out, mask, n, rate, rngStream,
                                                                shard, c, vector);
}

template <typename T>
void launchBiasDropoutAdd(const T *x, const T *residual, const T *bias, int64_t cols, T *out,
                          uint8_t *mask, int64_t n, double rate, uint32_t rngStream, ShardMap shard,
                          const StepCounters *c, cudaStream_t stream) {
  const bool vector = quadsAligned(x, residual, out, mask);
  biasDropoutAddKernel<<<blocksFor(quadsOf(n)), kThreads, 0, stream>>>(
      x, residual, bias, cols, out, mask, n, rate, rngStream, shard, c, vector);
}

template <typename T>
void launchDropoutGrad(const T *dy, const uint8_t *mask, T *dx, int64_t n, float scale,
                       cudaStream_t stream) {
  const bool vector = quadsAligned(dy, mask, dx);
  dropoutGradKernel<<<blocksFor(quadsOf(n)), kThreads, 0, stream>>>(dy, mask, dx, n, scale, vector);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_DROPOUT_CUH
