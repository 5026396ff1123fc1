// The optimizer's kernels: the sum of squares of an f32 gradient (for the global norm)
// and the AdamW update, both in f64 arithmetic over f32 storage.
#ifndef MT_RUNTIME_BACKENDS_CUDA_OPTIMIZER_CUH
#define MT_RUNTIME_BACKENDS_CUDA_OPTIMIZER_CUH

#include "backends/cuda/Common.cuh"

namespace mt {
namespace {

/// Reads x, writes one partial Σ x² per block (f64), summed by a tree over the block's
/// kThreads threads; the host adds the partials in block order.
__global__ void sumOfSquaresKernel(const float *x, int64_t n, double *partial) {
  __shared__ double shared[kThreads];
  double acc = 0;
  GRID_STRIDE(i, n) acc += static_cast<double>(x[i]) * x[i];
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride)
      shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    partial[blockIdx.x] = shared[0];
}

/// Reads g, updates w, m and v in place: the moments and the decoupled weight decay in one
/// pass (AdamWStep::update, the CPU backend's arithmetic).
__global__ void adamwKernel(float *w, const float *g, float *m, float *v, int64_t n,
                            AdamWStep a, double c1, double c2) {
  GRID_STRIDE(i, n) {
    double mi = m[i], vi = v[i];
    const double wi = a.update(w[i], g[i], mi, vi, c1, c2);
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    w[i] = static_cast<float>(wi);
  }
}

/// The blocks (and so the partial sums) of a sum of squares over n elements.
inline unsigned sumOfSquaresBlocks(int64_t n) { return std::min<unsigned>(blocksFor(n), 1024); }

inline void launchSumOfSquares(const float *x, int64_t n, double *partial, cudaStream_t stream) {
  sumOfSquaresKernel<<<sumOfSquaresBlocks(n), kThreads, 0, stream>>>(x, n, partial);
}

inline void launchAdamw(float *w, const float *g, float *m, float *v, int64_t n,
                        const AdamWStep &a, cudaStream_t stream) {
  adamwKernel<<<blocksFor(n), kThreads, 0, stream>>>(w, g, m, v, n, a, a.correction1(),
                                                     a.correction2());
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_OPTIMIZER_CUH
