// Cross-entropy: one block per row for the row losses and gradients, the mean over rows
// by one block in a fixed order; the fused loss and gradient (one kernel: the row's
// statistics in one read, then its gradient written over it); and the vocabulary-parallel
// form, where each shard reduces its columns to per-row statistics and the merged
// statistics give the loss and the gradient. A row is read in 16-byte vectors from its
// first 16-byte boundary on (an odd vocabulary's rows start anywhere), and its
// statistics in one pass (an online softmax: each thread
// rescales its running sum when its maximum grows; the block then merges them).
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

/// The elements of row[0, n) before its first 16-byte boundary (all n where the row is
/// not even aligned to its elements, or the boundary lies past it).
template <typename T>
__device__ __forceinline__ int64_t elementsBeforeVectors(const T *row, int64_t n) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(row);
  if (at % sizeof(T) != 0)
    return n;
  const int64_t head = static_cast<int64_t>((16 - at % 16) % 16 / sizeof(T));
  return head < n ? head : n;
}

/// f(j, row[j]) for j in [0, n), the block's threads taking the elements in turn: one by
/// one to the row's first 16-byte boundary, then whole 16-byte vectors, then the rest
/// one by one.
template <typename T, typename F>
__device__ __forceinline__ void forEachOfRow(const T *row, int64_t n, F &&f) {
  constexpr int kVector = 16 / sizeof(T);
  const int64_t head = elementsBeforeVectors(row, n), vectors = (n - head) / kVector;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x)
    f(j, ld(row, j));
  const uint4 *aligned = reinterpret_cast<const uint4 *>(row + head);
  for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
    const uint4 raw = aligned[i];
    const T *x = reinterpret_cast<const T *>(&raw);
#pragma unroll
    for (int k = 0; k < kVector; ++k)
      f(head + i * kVector + k, ld(x, k));
  }
  for (int64_t j = head + vectors * kVector + threadIdx.x; j < n; j += blockDim.x)
    f(j, ld(row, j));
}

/// out[j] = f(j, in[j]) for j in [0, n): as forEachOfRow reads, in 16-byte vectors where
/// both rows reach a 16-byte boundary at the same element (one by one elsewhere). A
/// thread reads each of its elements just before writing the same element, so `out` may
/// be `in`.
template <typename T, typename F>
__device__ __forceinline__ void transformRow(const T *in, T *out, int64_t n, F &&f) {
  constexpr int kVector = 16 / sizeof(T);
  const bool inPhase =
      reinterpret_cast<uintptr_t>(in) % 16 == reinterpret_cast<uintptr_t>(out) % 16;
  const int64_t head = inPhase ? elementsBeforeVectors(in, n) : n;
  const int64_t vectors = (n - head) / kVector;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x)
    st(out, j, f(j, ld(in, j)));
  const uint4 *from = reinterpret_cast<const uint4 *>(in + head);
  uint4 *to = reinterpret_cast<uint4 *>(out + head);
  for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
    const uint4 raw = from[i];
    const T *x = reinterpret_cast<const T *>(&raw);
    uint4 result;
    T *y = reinterpret_cast<T *>(&result);
#pragma unroll
    for (int k = 0; k < kVector; ++k)
      st(y, k, f(head + i * kVector + k, ld(x, k)));
    to[i] = result;
  }
  for (int64_t j = head + vectors * kVector + threadIdx.x; j < n; j += blockDim.x)
    st(out, j, f(j, ld(in, j)));
}

/// max and Σ exp(x − max) of row[0, n), computed by the whole block in one read of the
/// row: each thread keeps its own maximum and its sum relative to it, and the block
/// rescales every sum to the row's maximum before adding them.
template <typename T>
__device__ void blockSoftmaxStats(const T *row, int64_t n, float *shared, float &max,
                                  float &sum) {
  float mine = -INFINITY, partial = 0;
  forEachOfRow(row, n, [&](int64_t, float x) {
    if (x > mine) {
      partial = partial * expf(mine - x) + 1.f; // exp(-inf) = 0 for the first element
      mine = x;
    } else if (x != -INFINITY) { // adds 0; and exp(-inf - -inf) would be NaN
      partial += expf(x - mine);
    }
  });
  max = blockMax(mine, shared);
  sum = blockSum(mine == -INFINITY ? 0.f : partial * expf(mine - max), shared);
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

/// One block per row, the gradient (and with `rowLoss`, the loss) from one read of the
/// row for its statistics and one more for the gradient: reads dloss, the row's logits
/// and target, writes the row's loss and the row of dlogits (softmax − one-hot, times
/// dloss/m; zero past `classes`), which may be the logits' own buffer: every thread reads
/// its elements for the statistics before the block's reductions, and each element again
/// just before writing it.
template <typename T>
__global__ void crossEntropyWithGradKernel(const float *dloss, const T *logits,
                                           const void *targets, bool wide, float *rowLoss,
                                           T *dlogits, int64_t m, int64_t v, int64_t classes,
                                           unsigned long long *bad) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const int64_t t = rowTarget(targets, wide, r, classes, bad);
  if (t < 0)
    return;
  const T *row = logits + r * v;
  float max, sum;
  blockSoftmaxStats(row, classes, shared, max, sum); // ends with the block synchronised
  if (rowLoss) {
    const float target = ld(row, t);
    if (threadIdx.x == 0)
      rowLoss[r] = logf(sum) + max - target;
    __syncthreads(); // the target logit is read before any thread writes over it
  }
  const float factor = dloss[0] / m;
  transformRow(row, dlogits + r * v, v, [&](int64_t j, float x) {
    return j < classes ? factor * expf(x - max) / sum - (j == t ? factor : 0.f) : 0.f;
  });
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
  const T *row = logits + r * v;
  transformRow(row, dlogits + r * v, v, [&](int64_t j, float x) {
    return j < valid ? factor * expf(x - max) / sum - (j == t ? factor : 0.f) : 0.f;
  });
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
  crossEntropyWithGradKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      dloss, logits, targets, wide, nullptr, dlogits, m, v, classes, bad);
}

template <typename T>
void launchCrossEntropyWithGrad(const float *dloss, const T *logits, const void *targets,
                                bool wide, float *rowLoss, T *dlogits, int64_t m, int64_t v,
                                int64_t classes, unsigned long long *bad, cudaStream_t stream) {
  crossEntropyWithGradKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      dloss, logits, targets, wide, rowLoss, dlogits, m, v, classes, bad);
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
