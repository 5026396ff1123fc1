// Dropout: keep masks drawn from core/Rng.h's Philox counters, the same draw as the CPU
// backend, so both backends drop the same elements. The counters are shared with the
// attention kernels, which drop probabilities the same way.
#ifndef MT_RUNTIME_BACKENDS_CUDA_DROPOUT_CUH
#define MT_RUNTIME_BACKENDS_CUDA_DROPOUT_CUH

#include "backends/cuda/Common.cuh"
#include "core/Rng.h"

namespace mt {
namespace {

/// The step's counters of the dropout draw (each use passes its own RNG stream).
struct Counters {
  uint64_t seed;
  uint32_t step, microBatch;
};

/// Reads x, writes out = x·keep/(1 − rate) and, when given, the keep mask (one byte per
/// element): the mask is drawn and applied in one pass.
template <typename T>
__global__ void dropoutKernel(const T *x, T *out, uint8_t *mask, int64_t n, double rate,
                              uint32_t stream, ShardMap shard, Counters c) {
  const float scale = rate == 0 ? 1.f : static_cast<float>(1.0 / (1.0 - rate));
  GRID_STRIDE(i, n) {
    const bool keep = rate == 0 ||
                      rng::dropoutKeeps(c.seed, c.step, c.microBatch, stream, shard.global(i), rate);
    st(out, i, keep ? ld(x, i) * scale : 0.f);
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
                   ShardMap shard, Counters c, cudaStream_t stream) {
  dropoutKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, out, mask, n, rate, rngStream, shard,
                                                       c);
}

template <typename T>
void launchDropoutGrad(const T *dy, const uint8_t *mask, T *dx, int64_t n, float scale,
                       cudaStream_t stream) {
  dropoutGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(dy, mask, dx, n, scale);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_DROPOUT_CUH
