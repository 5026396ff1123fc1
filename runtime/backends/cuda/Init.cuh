// Parameter initialisation on the device: the CPU backend's values, bit for bit
// (rng::standardNormal is written to round alike on both), without a host pass over
// every weight and a copy across PCIe. Zeros and ones are Activations.cuh's fill.
#ifndef MT_RUNTIME_BACKENDS_CUDA_INIT_CUH
#define MT_RUNTIME_BACKENDS_CUDA_INIT_CUH

#include "backends/cuda/Common.cuh"
#include "core/Rng.h"
#include "core/Tensor.h"

namespace mt {
namespace {

/// Writes w (this rank's shard): std · N(0, 1) of each element's global index.
__global__ void normalInitKernel(float *w, int64_t n, uint64_t seed, uint64_t stream, double std,
                                 ShardMap shard) {
  GRID_STRIDE(i, n) {
    w[i] = static_cast<float>(rng::exact::mul(std, rng::standardNormal(seed, stream, shard.global(i))));
  }
}

inline void launchNormalInit(float *w, int64_t n, uint64_t seed, uint64_t stream, double std,
                             const ShardMap &shard, cudaStream_t queue) {
  normalInitKernel<<<blocksFor(n), kThreads, 0, queue>>>(w, n, seed, stream, std, shard);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_INIT_CUH
