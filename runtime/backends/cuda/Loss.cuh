// Cross-entropy: one block per row for the row losses and gradients, the mean over rows
// by one block in a fixed order; and the vocabulary-parallel form, where each shard
// reduces its columns to per-row statistics and the merged statistics give the loss and
// the gradient.
#ifndef MT_RUNTIME_BACKENDS_CUDA_LOSS_CUH
#define MT_RUNTIME_BACKENDS_CUDA_LOSS_CUH

#include "backends/cuda/Common.cuh"

namespace mt {
namespace {

/// Row r's target, or -1 when it lies outside [0, classes): then the row is reported
/// through *bad (the smallest such row wins) and the block leaves the row alone.
__device__ int64_t rowTarget(const void *targets, bool wide, int64_t r, int64_t classes,
                             unsigned long long *bad) {
  const int64_t t = indexAt(targets, wide, r);
  if (t >= 0 && t < classes)
    return t;
  if (threadIdx.x == 0)
    atomicMin(bad, static_cast<unsigned long long>(r));
  return -1;
}

/// max and Σ exp(x − max) of row[0, n), computed by the whole block.
template <typename T>
__device__ void blockSoftmaxStats(const T *row, int64_t n, float *shared, float &max,
                                  float &sum) {
  max = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    max = fmaxf(max, ld(row, j));
  max = blockMax(max, shared);
  sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    sum += expf(ld(row, j) - max);
  sum = blockSum(sum, shared);
}

/// One block per row: reads the row's logits and target, writes the row's loss
/// log Σ exp − target logit; targets outside [0, classes) are reported through *bad.
template <typename T>
__global__ void crossEntropyRowsKernel(const T *logits, const void *targets, bool wide,
                                       float *rowLoss, int64_t v, int64_t classes,
                                       unsigned long long *bad) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *row = logits + r * v;
  const int64_t t = rowTarget(targets, wide, r, classes, bad);
  if (t < 0)
    return;
  float max, sum;
  blockSoftmaxStats(row, classes, shared, max, sum);
  if (threadIdx.x == 0)
    rowLoss[r] = logf(sum) + max - ld(row, t);
}

/// out[0] = Σ values / n, summed in a fixed order.
__global__ void meanKernel(const float *values, int64_t n, float *out) {
  __shared__ float shared[32];
  float acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += values[i];
  acc = blockSum(acc, shared);
  if (threadIdx.x == 0)
    out[0] = acc / n;
}

/// One block per row: reads dloss, the row's logits and target, writes the row of dlogits
/// (softmax − one-hot, times dloss/m; zero past `classes`).
template <typename T>
__global__ void crossEntropyGradKernel(const float *dloss, const T *logits, const void *targets,
                                       bool wide, T *dlogits, int64_t m, int64_t v,
                                       int64_t classes, unsigned long long *bad) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const int64_t t = rowTarget(targets, wide, r, classes, bad);
  if (t < 0)
    return;
  const T *row = logits + r * v;
  T *g = dlogits + r * v;
  const float factor = dloss[0] / m;
  float max, sum;
  blockSoftmaxStats(row, classes, shared, max, sum);
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
    st(g, j, j < classes ? factor * expf(ld(row, j) - max) / sum - (j == t ? factor : 0.f) : 0.f);
}

/// Vocabulary-parallel statistics of this shard: [max, Σ exp(x − max), target logit].
template <typename T>
__global__ void crossEntropyStatsKernel(const T *logits, const void *targets, bool wide,
                                        float *stats, int64_t m, int64_t v, int64_t first,
                                        int64_t valid, int64_t classes,
                                        unsigned long long *bad) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *row = logits + r * v;
  const int64_t target = rowTarget(targets, wide, r, classes, bad);
  if (target < 0)
    return;
  float max, sum;
  blockSoftmaxStats(row, valid, shared, max, sum);
  if (threadIdx.x == 0) {
    const int64_t t = target - first;
    stats[r] = max;
    stats[m + r] = sum;
    stats[2 * m + r] = t >= 0 && t < valid ? ld(row, t) : 0.f;
  }
}

/// Reads every shard's statistics, writes each row's loss.
__global__ void crossEntropyMergeRowsKernel(const float *all, float *rowLoss, int64_t m,
                                            int64_t parts) {
  GRID_STRIDE(r, m) {
    float max, sum, target;
    mergeSoftmaxStats(all + r, m, parts, max, sum, target);
    rowLoss[r] = logf(sum) + max - target;
  }
}

/// One block per row: reads the merged statistics and this shard's logits, writes this
/// shard's columns of dlogits.
template <typename T>
__global__ void vocabParallelCrossEntropyGradKernel(const float *dloss, const T *logits,
                                                    const void *targets, bool wide,
                                                    const float *all, T *dlogits, int64_t m,
                                                    int64_t v, int64_t parts, int64_t first,
                                                    int64_t valid) {
  const int64_t r = blockIdx.x;
  float max, sum, target;
  mergeSoftmaxStats(all + r, m, parts, max, sum, target);
  const float factor = dloss[0] / m;
  const int64_t t = indexAt(targets, wide, r) - first;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
    st(dlogits, r * v + j,
       j < valid ? factor * expf(ld(logits, r * v + j) - max) / sum - (j == t ? factor : 0.f)
                 : 0.f);
}

template <typename T>
void launchCrossEntropyRows(const T *logits, const void *targets, bool wide, float *rowLoss,
                            int64_t m, int64_t v, int64_t classes, unsigned long long *bad,
                            cudaStream_t stream) {
  crossEntropyRowsKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      logits, targets, wide, rowLoss, v, classes, bad);
}

/// One block of 1024 threads: the mean is summed in the same order whatever m is.
inline void launchMean(const float *values, int64_t n, float *out, cudaStream_t stream) {
  meanKernel<<<1, 1024, 0, stream>>>(values, n, out);
}

template <typename T>
void launchCrossEntropyGrad(const float *dloss, const T *logits, const void *targets, bool wide,
                            T *dlogits, int64_t m, int64_t v, int64_t classes,
                            unsigned long long *bad, cudaStream_t stream) {
  crossEntropyGradKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      dloss, logits, targets, wide, dlogits, m, v, classes, bad);
}

template <typename T>
void launchCrossEntropyStats(const T *logits, const void *targets, bool wide, float *stats,
                             int64_t m, int64_t v, int64_t first, int64_t valid, int64_t classes,
                             unsigned long long *bad, cudaStream_t stream) {
  crossEntropyStatsKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      logits, targets, wide, stats, m, v, first, valid, classes, bad);
}

inline void launchCrossEntropyMergeRows(const float *all, float *rowLoss, int64_t m,
                                        int64_t parts, cudaStream_t stream) {
  crossEntropyMergeRowsKernel<<<blocksFor(m), kThreads, 0, stream>>>(all, rowLoss, m, parts);
}

template <typename T>
void launchVocabParallelCrossEntropyGrad(const float *dloss, const T *logits, const void *targets,
                                         bool wide, const float *all, T *dlogits, int64_t m,
                                         int64_t v, int64_t parts, int64_t first, int64_t valid,
                                         cudaStream_t stream) {
  vocabParallelCrossEntropyGradKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      dloss, logits, targets, wide, all, dlogits, m, v, parts, first, valid);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_LOSS_CUH
