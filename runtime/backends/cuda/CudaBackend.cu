// The CUDA backend: every opcode for f32, bf16 and f16 plans, with f32 arithmetic and
// accumulation; GEMMs through cuBLASLt (the bias fused as an epilogue); attention that
// never materialises the s×s scores (one warp per query row, online softmax; its
// backward recomputes the probabilities); dropout masks from the same Philox counters
// as the CPU backend, so both draw the same masks. The CPU backend is the reference
// these kernels are tested against.
#include "backends/Backend.h"
#include "backends/cuda/DeviceBuffer.h"
#include "core/HostDevice.h"
#include "core/Rng.h"
#include "core/DType.h"

#include <cub/device/device_radix_sort.cuh>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace mt {
namespace {

using plan::DType;
using plan::Opcode;

void check(cudaError_t code, const char *what) {
  if (code != cudaSuccess)
    throw std::runtime_error(std::string("cuda backend: ") + what + ": " +
                             cudaGetErrorString(code));
}

void check(cublasStatus_t code, const char *what) {
  if (code != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuda backend: ") + what + ": cuBLAS status " +
                             std::to_string(static_cast<int>(code)));
}

//===----------------------------------------------------------------------===//
// Element access: storage in T, arithmetic in float.
//===----------------------------------------------------------------------===//

template <typename T> __device__ __forceinline__ float ld(const T *p, int64_t i) {
  return static_cast<float>(p[i]);
}
template <typename T> __device__ __forceinline__ void st(T *p, int64_t i, float v) {
  p[i] = static_cast<T>(v);
}

__device__ __forceinline__ int64_t indexAt(const void *ids, bool wide, int64_t i) {
  return wide ? static_cast<const int64_t *>(ids)[i] : static_cast<const int32_t *>(ids)[i];
}

__device__ __forceinline__ float warpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Sum over a block of up to 1024 threads; every thread gets the result.
__device__ float blockSum(float v, float *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpSum(v);
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : 0.f;
  if (warp == 0)
    v = warpSum(v);
  if (threadIdx.x == 0)
    shared[0] = v;
  __syncthreads();
  return shared[0];
}

__device__ float blockMax(float v, float *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : -INFINITY;
  if (warp == 0)
    for (int offset = 16; offset > 0; offset >>= 1)
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x == 0)
    shared[0] = v;
  __syncthreads();
  return shared[0];
}

constexpr int kThreads = 256;
/// Blocks for a grid-stride loop over n elements: at least one, so an empty tensor
/// launches a grid that does nothing rather than an invalid one.
inline unsigned blocksFor(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t{1} << 20));
}
#define GRID_STRIDE(i, n)                                                                      \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n);      \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

//===----------------------------------------------------------------------===//
// Elementwise kernels
//===----------------------------------------------------------------------===//

template <typename O> __global__ void fillKernel(O *out, int64_t n, float value) {
  GRID_STRIDE(i, n) st(out, i, value);
}

template <typename A, typename B> __global__ void convertKernel(B *out, const A *in, int64_t n) {
  GRID_STRIDE(i, n) st(out, i, ld(in, i));
}

template <typename T> __global__ void addKernel(const T *a, const T *b, T *out, int64_t n) {
  GRID_STRIDE(i, n) st(out, i, ld(a, i) + ld(b, i));
}

/// out = x + bias per row of `cols`, rounded once to T (x may be an f32 GEMM result).
template <typename X, typename T>
__global__ void biasAddKernel(const X *x, const T *bias, T *out, int64_t n, int64_t cols) {
  GRID_STRIDE(i, n) st(out, i, ld(x, i) + ld(bias, i % cols));
}

/// into (f32) += g: a parameter's gradient accumulates in f32.
template <typename T> __global__ void accumulateKernel(const T *g, float *into, int64_t n) {
  GRID_STRIDE(i, n) into[i] += ld(g, i);
}

/// An activation of core/HostDevice.h (Gelu, Silu), in f32.
template <typename F, typename T> __global__ void activationKernel(const T *x, T *out, int64_t n) {
  GRID_STRIDE(i, n) st(out, i, F::value(ld(x, i)));
}

/// dx = dy · the activation's derivative at x, in f32.
template <typename F, typename T>
__global__ void activationGradKernel(const T *dy, const T *x, T *dx, int64_t n) {
  GRID_STRIDE(i, n) st(dx, i, ld(dy, i) * F::derivative(ld(x, i)));
}

struct Counters {
  uint64_t seed;
  uint32_t step, microBatch;
};

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

template <typename T>
__global__ void dropoutGradKernel(const T *dy, const uint8_t *mask, T *dx, int64_t n,
                                  float scale) {
  GRID_STRIDE(i, n) st(dx, i, mask[i] ? ld(dy, i) * scale : 0.f);
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

/// One block per token; ids outside [0, vocabulary) are reported through *bad (the
/// first such position + 1).
template <typename T>
__global__ void embeddingKernel(const T *table, const void *ids, bool wide, T *out,
                                int64_t rows, int64_t h, int64_t first, int64_t vocabulary,
                                unsigned long long *bad) {
  const int64_t t = blockIdx.x;
  const int64_t id = indexAt(ids, wide, t);
  if (id < 0 || id >= vocabulary) {
    if (threadIdx.x == 0)
      atomicMin(bad, static_cast<unsigned long long>(t));
    return;
  }
  const bool mine = id >= first && id < first + rows;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    st(out, t * h + j, mine ? ld(table, (id - first) * h + j) : 0.f);
}

// The embedding gradient is a scatter-add of token rows into table rows. Atomics would
// add them in whatever order the hardware chose, so two runs would differ in their last
// bits. Instead (as Megatron's deterministic mode and llm.c's encoder backward do): sort
// the tokens by row, stably, then one block per run of equal rows sums that row's tokens
// in token order (the CPU backend's order) and rounds once.

/// keys[t]: token t's row of this shard, or `rows` (sorts last) when another shard holds
/// it; order[t] = t.
__global__ void embeddingGradKeysKernel(const void *ids, bool wide, int64_t tokens,
                                        int64_t rows, int64_t first, uint32_t *keys,
                                        uint32_t *order) {
  GRID_STRIDE(t, tokens) {
    const int64_t id = indexAt(ids, wide, t) - first;
    keys[t] = static_cast<uint32_t>(id >= 0 && id < rows ? id : rows);
    order[t] = static_cast<uint32_t>(t);
  }
}

/// Block b, where sorted position b starts a run of equal rows: that row's gradient, the
/// sum of its tokens' rows in token order. Rows no token names stay zero.
template <typename T>
__global__ void embeddingGradRowsKernel(const T *grad, const uint32_t *keys,
                                        const uint32_t *order, int64_t tokens, int64_t rows,
                                        int64_t h, T *out) {
  const int64_t start = blockIdx.x;
  const uint32_t row = keys[start];
  if (row == rows || (start > 0 && keys[start - 1] == row))
    return;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    float acc = 0;
    for (int64_t u = start; u < tokens && keys[u] == row; ++u)
      acc += ld(grad, order[u] * h + j);
    st(out, row * h + j, acc);
  }
}

template <typename T>
__global__ void positionEmbeddingKernel(const T *x, const T *table, T *out, int64_t n,
                                        int64_t s, int64_t h, int64_t first) {
  GRID_STRIDE(i, n) {
    const int64_t p = (i / h) % s, j = i % h;
    st(out, i, ld(x, i) + ld(table, (first + p) * h + j));
  }
}

/// out[first + p, j] = Σ_b grad[b, p, j]; other rows zero. One thread per output element.
template <typename T>
__global__ void positionEmbeddingGradKernel(const T *grad, T *out, int64_t positions,
                                            int64_t b, int64_t s, int64_t h, int64_t first) {
  GRID_STRIDE(i, positions * h) {
    const int64_t p = i / h - first, j = i % h;
    float acc = 0;
    if (p >= 0 && p < s)
      for (int64_t k = 0; k < b; ++k)
        acc += ld(grad, (k * s + p) * h + j);
    st(out, i, acc);
  }
}

//===----------------------------------------------------------------------===//
// LayerNorm: one block per row
//===----------------------------------------------------------------------===//

template <typename T>
__device__ void rowMoments(const T *x, int64_t h, float eps, float &mean, float &rstd,
                           float *shared) {
  float sum = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    sum += ld(x, j);
  mean = blockSum(sum, shared) / h;
  float sq = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float d = ld(x, j) - mean;
    sq += d * d;
  }
  rstd = rsqrtf(blockSum(sq, shared) / h + eps);
}

template <typename T>
__global__ void layerNormKernel(const T *x, const T *w, const T *b, T *out, int64_t h,
                                float eps) {
  __shared__ float shared[32];
  const T *xr = x + blockIdx.x * h;
  float mean, rstd;
  rowMoments(xr, h, eps, mean, rstd, shared);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    st(out, blockIdx.x * h + j, (ld(xr, j) - mean) * rstd * ld(w, j) + ld(b, j));
}

/// dx per row; the row's mean and rstd are kept for the column sums of dw and db.
template <typename T>
__global__ void layerNormGradRowsKernel(const T *dy, const T *x, const T *w, T *dx,
                                        float2 *moments, int64_t h, float eps) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * h, *g = dy + r * h;
  float mean, rstd;
  rowMoments(xr, h, eps, mean, rstd, shared);
  float sumG = 0, sumGX = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float gw = ld(g, j) * ld(w, j), xhat = (ld(xr, j) - mean) * rstd;
    sumG += gw;
    sumGX += gw * xhat;
  }
  const float meanG = blockSum(sumG, shared) / h, meanGX = blockSum(sumGX, shared) / h;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float xhat = (ld(xr, j) - mean) * rstd;
    st(dx, r * h + j, rstd * (ld(g, j) * ld(w, j) - meanG - xhat * meanGX));
  }
  if (threadIdx.x == 0)
    moments[r] = make_float2(mean, rstd);
}

template <typename T>
__global__ void layerNormGradColumnsKernel(const T *dy, const T *x, const float2 *moments,
                                           T *dw, T *db, int64_t rows, int64_t h) {
  GRID_STRIDE(j, h) {
    float accW = 0, accB = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float g = ld(dy, r * h + j);
      accW += g * (ld(x, r * h + j) - moments[r].x) * moments[r].y;
      accB += g;
    }
    st(dw, j, accW);
    st(db, j, accB);
  }
}

template <typename T>
__global__ void biasGradKernel(const T *dy, T *db, int64_t rows, int64_t n) {
  GRID_STRIDE(j, n) {
    float acc = 0;
    for (int64_t r = 0; r < rows; ++r)
      acc += ld(dy, r * n + j);
    st(db, j, acc);
  }
}

//===----------------------------------------------------------------------===//
// Cross-entropy: one block per row; per-row results summed in row order by one block
//===----------------------------------------------------------------------===//

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

template <typename T>
__global__ void crossEntropyRowsKernel(const T *logits, const void *targets, bool wide,
                                       float *rowLoss, int64_t v, int64_t classes,
                                       unsigned long long *bad) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *row = logits + r * v;
  const int64_t t = indexAt(targets, wide, r);
  if (t < 0 || t >= classes) {
    if (threadIdx.x == 0)
      atomicMin(bad, static_cast<unsigned long long>(r));
    return;
  }
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

template <typename T>
__global__ void crossEntropyGradKernel(const float *dloss, const T *logits, const void *targets,
                                       bool wide, T *dlogits, int64_t m, int64_t v,
                                       int64_t classes, unsigned long long *bad) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  if (const int64_t target = indexAt(targets, wide, r); target < 0 || target >= classes) {
    if (threadIdx.x == 0)
      atomicMin(bad, static_cast<unsigned long long>(r));
    return;
  }
  const T *row = logits + r * v;
  T *g = dlogits + r * v;
  const float factor = dloss[0] / m;
  float max, sum;
  blockSoftmaxStats(row, classes, shared, max, sum);
  const int64_t t = indexAt(targets, wide, r);
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
  const int64_t target = indexAt(targets, wide, r);
  if (target < 0 || target >= classes) {
    if (threadIdx.x == 0)
      atomicMin(bad, static_cast<unsigned long long>(r));
    return;
  }
  float max, sum;
  blockSoftmaxStats(row, valid, shared, max, sum);
  if (threadIdx.x == 0) {
    const int64_t t = target - first;
    stats[r] = max;
    stats[m + r] = sum;
    stats[2 * m + r] = t >= 0 && t < valid ? ld(row, t) : 0.f;
  }
}

__device__ void mergeRow(const float *all, int64_t m, int64_t parts, int64_t r, float &max,
                         float &sum, float &target) {
  max = -INFINITY;
  for (int64_t p = 0; p < parts; ++p)
    max = fmaxf(max, all[3 * p * m + r]);
  sum = 0;
  target = 0;
  for (int64_t p = 0; p < parts; ++p) {
    const float localMax = all[3 * p * m + r];
    if (localMax > -INFINITY)
      sum += all[(3 * p + 1) * m + r] * expf(localMax - max);
    target += all[(3 * p + 2) * m + r];
  }
}

__global__ void crossEntropyMergeRowsKernel(const float *all, float *rowLoss, int64_t m,
                                            int64_t parts) {
  GRID_STRIDE(r, m) {
    float max, sum, target;
    mergeRow(all, m, parts, r, max, sum, target);
    rowLoss[r] = logf(sum) + max - target;
  }
}

template <typename T>
__global__ void vocabParallelCrossEntropyGradKernel(const float *dloss, const T *logits,
                                                    const void *targets, bool wide,
                                                    const float *all, T *dlogits, int64_t m,
                                                    int64_t v, int64_t parts, int64_t first,
                                                    int64_t valid) {
  const int64_t r = blockIdx.x;
  float max, sum, target;
  mergeRow(all, m, parts, r, max, sum, target);
  const float factor = dloss[0] / m;
  const int64_t t = indexAt(targets, wide, r) - first;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
    st(dlogits, r * v + j,
       j < valid ? factor * expf(ld(logits, r * v + j) - max) / sum - (j == t ? factor : 0.f)
                 : 0.f);
}

//===----------------------------------------------------------------------===//
// Attention: one warp per (batch, head, row). qkv [B, S, 3H] holds, per token,
// (head, {q, k, v}, head_dim); the warp's lanes split head_dim (at most 32·kMaxPerLane).
//===----------------------------------------------------------------------===//

constexpr int kMaxPerLane = 8; // head_dim up to 256

struct AttentionShape {
  int64_t b, s, h, heads, d;
  float scale;
  bool causal;
  // Probability dropout: the keep mask of global element ((b·A + head)·S + i)·S + j.
  double rate;
  uint32_t stream;
  int64_t globalHeads, headOffset;
  Counters counters;

  __device__ int64_t qkvRow(int64_t bi, int64_t t) const { return (bi * s + t) * 3 * h; }
  __device__ uint64_t maskIndex(int64_t bi, int64_t hi, int64_t i, int64_t j) const {
    return static_cast<uint64_t>(((bi * globalHeads + headOffset + hi) * s + i) * s + j);
  }
  /// mask/(1 − rate) of probability (i, j), or 1 without dropout.
  __device__ float dropFactor(int64_t bi, int64_t hi, int64_t i, int64_t j) const {
    if (rate == 0)
      return 1.f;
    return rng::dropoutKeeps(counters.seed, counters.step, counters.microBatch, stream,
                             maskIndex(bi, hi, i, j), rate)
               ? static_cast<float>(1.0 / (1.0 - rate))
               : 0.f;
  }
  __device__ int64_t lastKey(int64_t i) const { return causal ? i : s - 1; }
  /// The row this warp works on: (batch, head, position); false past the last one.
  __device__ bool warpRow(int64_t &row, int64_t &bi, int64_t &hi, int64_t &t) const {
    row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    t = row % s;
    hi = (row / s) % heads;
    bi = row / (s * heads);
    return row < b * heads * s;
  }
};

/// Loads head_dim values of one row into registers, lane-strided.
template <typename T>
__device__ void loadRow(const T *p, int64_t d, float (&r)[kMaxPerLane]) {
  const int lane = threadIdx.x & 31;
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int64_t c = lane + 32 * k;
    r[k] = c < d ? ld(p, c) : 0.f;
  }
}

template <typename T>
__device__ float rowDot(const float (&q)[kMaxPerLane], const T *k, int64_t d) {
  const int lane = threadIdx.x & 31;
  float acc = 0;
  for (int c = 0; c < kMaxPerLane; ++c) {
    const int64_t col = lane + 32 * c;
    if (col < d)
      acc += q[c] * ld(k, col);
  }
  return warpSum(acc);
}

/// The row's softmax statistics: max and Σ exp(score − max), over keys 0..lastKey(i).
template <typename T>
__device__ void rowStatistics(const T *qkv, const AttentionShape &a, int64_t bi, int64_t hi,
                              int64_t i, const float (&q)[kMaxPerLane], float &max,
                              float &sum) {
  max = -INFINITY;
  sum = 0;
  for (int64_t j = 0; j <= a.lastKey(i); ++j) {
    const float score = a.scale * rowDot(q, qkv + a.qkvRow(bi, j) + hi * 3 * a.d + a.d, a.d);
    const float next = fmaxf(max, score);
    sum = sum * expf(max - next) + expf(score - next);
    max = next;
  }
}

template <typename T>
__global__ void attentionForwardKernel(const T *qkv, T *out, AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float q[kMaxPerLane], acc[kMaxPerLane] = {};
  loadRow(qkv + a.qkvRow(bi, i) + hi * 3 * a.d, a.d, q);
  float max = -INFINITY, sum = 0;
  for (int64_t j = 0; j <= a.lastKey(i); ++j) {
    const T *k = qkv + a.qkvRow(bi, j) + hi * 3 * a.d + a.d, *v = k + a.d;
    const float score = a.scale * rowDot(q, k, a.d);
    const float next = fmaxf(max, score), correction = expf(max - next), p = expf(score - next);
    sum = sum * correction + p;
    const float kept = p * a.dropFactor(bi, hi, i, j);
    float vr[kMaxPerLane];
    loadRow(v, a.d, vr);
    for (int c = 0; c < kMaxPerLane; ++c)
      acc[c] = acc[c] * correction + kept * vr[c];
    max = next;
  }
  const int lane = threadIdx.x & 31;
  T *o = out + (bi * a.s + i) * a.h + hi * a.d;
  for (int c = 0; c < kMaxPerLane; ++c)
    if (lane + 32 * c < a.d)
      st(o, lane + 32 * c, acc[c] / sum);
}

/// Backward, per query row i: logsumexp L_i and delta_i = dO_i·O_i (kept for the key
/// pass), and dQ_i = scale·Σ_j dS_ij·K_j with dS_ij = P_ij·(dP_ij − delta_i).
template <typename T>
__global__ void attentionBackwardQueryKernel(const T *qkv, const T *out, const T *dout, T *dqkv,
                                             float2 *rowStats, AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float q[kMaxPerLane], dO[kMaxPerLane], o[kMaxPerLane], dq[kMaxPerLane] = {};
  loadRow(qkv + a.qkvRow(bi, i) + hi * 3 * a.d, a.d, q);
  loadRow(dout + (bi * a.s + i) * a.h + hi * a.d, a.d, dO);
  loadRow(out + (bi * a.s + i) * a.h + hi * a.d, a.d, o);
  float delta = 0;
  for (int c = 0; c < kMaxPerLane; ++c)
    delta += dO[c] * o[c];
  delta = warpSum(delta);
  float max, sum;
  rowStatistics(qkv, a, bi, hi, i, q, max, sum);
  const float logSumExp = max + logf(sum);
  for (int64_t j = 0; j <= a.lastKey(i); ++j) {
    const T *k = qkv + a.qkvRow(bi, j) + hi * 3 * a.d + a.d, *v = k + a.d;
    const float p = expf(a.scale * rowDot(q, k, a.d) - logSumExp);
    float dP = 0;
    {
      float vr[kMaxPerLane];
      loadRow(v, a.d, vr);
      for (int c = 0; c < kMaxPerLane; ++c)
        dP += dO[c] * vr[c];
      dP = warpSum(dP) * a.dropFactor(bi, hi, i, j);
    }
    const float dS = p * (dP - delta);
    float kr[kMaxPerLane];
    loadRow(k, a.d, kr);
    for (int c = 0; c < kMaxPerLane; ++c)
      dq[c] += a.scale * dS * kr[c];
  }
  const int lane = threadIdx.x & 31;
  T *dqRow = dqkv + a.qkvRow(bi, i) + hi * 3 * a.d;
  for (int c = 0; c < kMaxPerLane; ++c)
    if (lane + 32 * c < a.d)
      st(dqRow, lane + 32 * c, dq[c]);
  if (lane == 0)
    rowStats[row] = make_float2(logSumExp, delta);
}

/// Backward, per key row j: dK_j = scale·Σ_i dS_ij·Q_i and dV_j = Σ_i P'_ij·dO_i.
template <typename T>
__global__ void attentionBackwardKeyKernel(const T *qkv, const T *dout, T *dqkv,
                                           const float2 *rowStats, AttentionShape a) {
  int64_t row, bi, hi, j;
  if (!a.warpRow(row, bi, hi, j))
    return;
  float k[kMaxPerLane], v[kMaxPerLane], dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
  loadRow(qkv + a.qkvRow(bi, j) + hi * 3 * a.d + a.d, a.d, k);
  loadRow(qkv + a.qkvRow(bi, j) + hi * 3 * a.d + 2 * a.d, a.d, v);
  for (int64_t i = a.causal ? j : 0; i < a.s; ++i) {
    const float2 stats = rowStats[(bi * a.heads + hi) * a.s + i];
    float q[kMaxPerLane], dO[kMaxPerLane];
    loadRow(qkv + a.qkvRow(bi, i) + hi * 3 * a.d, a.d, q);
    loadRow(dout + (bi * a.s + i) * a.h + hi * a.d, a.d, dO);
    float score = 0, dPv = 0;
    for (int c = 0; c < kMaxPerLane; ++c) {
      score += q[c] * k[c];
      dPv += dO[c] * v[c];
    }
    const float p = expf(a.scale * warpSum(score) - stats.x);
    const float drop = a.dropFactor(bi, hi, i, j);
    const float dS = p * (warpSum(dPv) * drop - stats.y);
    for (int c = 0; c < kMaxPerLane; ++c) {
      dk[c] += a.scale * dS * q[c];
      dv[c] += p * drop * dO[c];
    }
  }
  const int lane = threadIdx.x & 31;
  T *kRow = dqkv + a.qkvRow(bi, j) + hi * 3 * a.d + a.d;
  for (int c = 0; c < kMaxPerLane; ++c)
    if (lane + 32 * c < a.d) {
      st(kRow, lane + 32 * c, dk[c]);
      st(kRow + a.d, lane + 32 * c, dv[c]);
    }
}

// The unfused chain (selective recomputation's path): probabilities [B, heads, S, S].

template <typename T>
__global__ void attentionProbsKernel(const T *qkv, T *probs, AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float q[kMaxPerLane];
  loadRow(qkv + a.qkvRow(bi, i) + hi * 3 * a.d, a.d, q);
  float max, sum;
  rowStatistics(qkv, a, bi, hi, i, q, max, sum);
  T *p = probs + row * a.s;
  const int lane = threadIdx.x & 31;
  for (int64_t j = 0; j < a.s; ++j) {
    float value = 0;
    if (j <= a.lastKey(i))
      value = expf(a.scale * rowDot(q, qkv + a.qkvRow(bi, j) + hi * 3 * a.d + a.d, a.d) - max) / sum;
    if (lane == 0)
      st(p, j, value);
  }
}

template <typename T>
__global__ void attentionContextKernel(const T *probs, const T *qkv, T *out, AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float acc[kMaxPerLane] = {};
  for (int64_t j = 0; j < a.s; ++j) {
    const float p = ld(probs, row * a.s + j);
    float v[kMaxPerLane];
    loadRow(qkv + a.qkvRow(bi, j) + hi * 3 * a.d + 2 * a.d, a.d, v);
    for (int c = 0; c < kMaxPerLane; ++c)
      acc[c] += p * v[c];
  }
  const int lane = threadIdx.x & 31;
  for (int c = 0; c < kMaxPerLane; ++c)
    if (lane + 32 * c < a.d)
      st(out + (bi * a.s + i) * a.h + hi * a.d, lane + 32 * c, acc[c]);
}

/// dS_ij = P_ij·(dP_ij − Σ_j dP_ij·P_ij) and dQ_i; delta kept for the key pass.
template <typename T>
__global__ void attentionProbsGradQueryKernel(const T *dprobs, const T *probs, const T *qkv,
                                              T *dqkv, float *deltas, AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  const int lane = threadIdx.x & 31;
  float delta = 0;
  for (int64_t j = lane; j < a.s; j += 32)
    delta += ld(dprobs, row * a.s + j) * ld(probs, row * a.s + j);
  delta = warpSum(delta);
  float dq[kMaxPerLane] = {};
  for (int64_t j = 0; j < a.s; ++j) {
    const float dS = ld(probs, row * a.s + j) * (ld(dprobs, row * a.s + j) - delta);
    float k[kMaxPerLane];
    loadRow(qkv + a.qkvRow(bi, j) + hi * 3 * a.d + a.d, a.d, k);
    for (int c = 0; c < kMaxPerLane; ++c)
      dq[c] += a.scale * dS * k[c];
  }
  T *dqRow = dqkv + a.qkvRow(bi, i) + hi * 3 * a.d;
  for (int c = 0; c < kMaxPerLane; ++c)
    if (lane + 32 * c < a.d) {
      st(dqRow, lane + 32 * c, dq[c]);
      st(dqRow + 2 * a.d, lane + 32 * c, 0.f); // the V part: no gradient through P
    }
  if (lane == 0)
    deltas[row] = delta;
}

template <typename T>
__global__ void attentionProbsGradKeyKernel(const T *dprobs, const T *probs, const T *qkv,
                                            T *dqkv, const float *deltas, AttentionShape a) {
  int64_t row, bi, hi, j;
  if (!a.warpRow(row, bi, hi, j))
    return;
  const int64_t base = (bi * a.heads + hi) * a.s;
  float dk[kMaxPerLane] = {};
  for (int64_t i = 0; i < a.s; ++i) {
    const int64_t at = (base + i) * a.s + j;
    const float dS = ld(probs, at) * (ld(dprobs, at) - deltas[base + i]);
    float q[kMaxPerLane];
    loadRow(qkv + a.qkvRow(bi, i) + hi * 3 * a.d, a.d, q);
    for (int c = 0; c < kMaxPerLane; ++c)
      dk[c] += a.scale * dS * q[c];
  }
  const int lane = threadIdx.x & 31;
  for (int c = 0; c < kMaxPerLane; ++c)
    if (lane + 32 * c < a.d)
      st(dqkv + a.qkvRow(bi, j) + hi * 3 * a.d + a.d, lane + 32 * c, dk[c]);
}

/// dP_ij = dO_i·V_j, per query row.
template <typename T>
__global__ void attentionContextGradProbsKernel(const T *dout, const T *qkv, T *dprobs,
                                                AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float dO[kMaxPerLane];
  loadRow(dout + (bi * a.s + i) * a.h + hi * a.d, a.d, dO);
  const int lane = threadIdx.x & 31;
  for (int64_t j = 0; j < a.s; ++j) {
    const float dP = rowDot(dO, qkv + a.qkvRow(bi, j) + hi * 3 * a.d + 2 * a.d, a.d);
    if (lane == 0)
      st(dprobs, row * a.s + j, dP);
  }
}

/// dV_j = Σ_i P_ij·dO_i, per key row; the Q and K parts of dqkv are zero.
template <typename T>
__global__ void attentionContextGradValuesKernel(const T *dout, const T *probs, T *dqkv,
                                                 AttentionShape a) {
  int64_t row, bi, hi, j;
  if (!a.warpRow(row, bi, hi, j))
    return;
  const int64_t base = (bi * a.heads + hi) * a.s;
  float dv[kMaxPerLane] = {};
  for (int64_t i = 0; i < a.s; ++i) {
    const float p = ld(probs, (base + i) * a.s + j);
    float dO[kMaxPerLane];
    loadRow(dout + (bi * a.s + i) * a.h + hi * a.d, a.d, dO);
    for (int c = 0; c < kMaxPerLane; ++c)
      dv[c] += p * dO[c];
  }
  const int lane = threadIdx.x & 31;
  T *r = dqkv + a.qkvRow(bi, j) + hi * 3 * a.d;
  for (int c = 0; c < kMaxPerLane; ++c)
    if (lane + 32 * c < a.d) {
      st(r, lane + 32 * c, 0.f);
      st(r + a.d, lane + 32 * c, 0.f);
      st(r + 2 * a.d, lane + 32 * c, dv[c]);
    }
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

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

__global__ void adamwKernel(float *w, const float *g, float *m, float *v, int64_t n,
                            AdamWStep a, double c1, double c2) {
  GRID_STRIDE(i, n) {
    const double grad = g[i] * a.gradScale;
    const double mi = a.beta1 * m[i] + (1 - a.beta1) * grad;
    const double vi = a.beta2 * v[i] + (1 - a.beta2) * grad * grad;
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    const double update = (mi / c1) / (sqrt(vi / c2) + a.eps) + a.weightDecay * w[i];
    w[i] = static_cast<float>(w[i] - a.lr * update);
  }
}

//===----------------------------------------------------------------------===//
// The backend
//===----------------------------------------------------------------------===//

/// f(value of the storage type `dtype` names): bf16, f16, or f32 for anything else.
template <typename F> decltype(auto) withStorage(DType dtype, F &&f) {
  switch (dtype) {
  case DType::BF16:
    return f(__nv_bfloat16{});
  case DType::F16:
    return f(__half{});
  default:
    return f(float{});
  }
}

cudaDataType_t cudaTypeOf(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  default:
    return CUDA_R_32F;
  }
}

/// MT_CUDA_SYNC=1: wait for every kernel, so a fault is reported at the instruction
/// that caused it rather than at a later copy (slow; for debugging).
bool synchronousLaunches() {
  const char *sync = std::getenv("MT_CUDA_SYNC");
  return sync && std::strcmp(sync, "0") != 0;
}

/// MT_CUDA_GEMM=cublas: every GEMM through cuBLAS's general GEMM, the path taken where
/// cuBLASLt has no algorithm or fails (to test it, or to rule cuBLASLt out);
/// MT_CUDA_GEMM=cublaslt: cuBLASLt or an error, never the fallback (to test cuBLASLt).
enum class GemmPath { Any, CublasOnly, CublasLtOnly };
GemmPath gemmPath() {
  const char *gemm = std::getenv("MT_CUDA_GEMM");
  if (gemm && std::strcmp(gemm, "cublas") == 0)
    return GemmPath::CublasOnly;
  if (gemm && std::strcmp(gemm, "cublaslt") == 0)
    return GemmPath::CublasLtOnly;
  return GemmPath::Any;
}

class CudaBackend final : public Backend {
public:
  explicit CudaBackend(int device) {
    check(cudaSetDevice(device), "selecting the device");
    check(cublasLtCreate(&lt_), "creating the cuBLASLt handle");
    check(cublasCreate(&blas_), "creating the cuBLAS handle");
    check(cudaMalloc(&workspace_, kWorkspaceBytes), "allocating the GEMM workspace");
    check(cudaMalloc(&flag_, sizeof(unsigned long long)), "allocating the error flag");
  }
  ~CudaBackend() override {
    cudaFree(flag_);
    cudaFree(workspace_);
    cublasDestroy(blas_);
    cublasLtDestroy(lt_);
  }
  // (scratch_, gemmOut_ and biasCopy_ free themselves.)
  const char *name() const override { return "cuda"; }

  void *allocate(size_t bytes) override {
    void *p = nullptr;
    cudaError_t code = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (code == cudaErrorMemoryAllocation) {
      cudaGetLastError(); // not sticky: clear it
      throw std::bad_alloc();
    }
    check(code, "allocating device memory");
    return p;
  }
  void release(void *data) override { cudaFree(data); }
  void copyToDevice(void *device, const void *host, size_t bytes) override {
    check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "copying to the device");
  }
  void copyToHost(void *host, const void *device, size_t bytes) override {
    check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "copying to the host");
  }
  void setZero(void *device, size_t bytes) override {
    check(cudaMemset(device, 0, bytes), "zeroing device memory");
  }

  void convert(const TensorView &dst, const TensorView &src) override {
    launchConvert(dst.data, dst.dtype, src.data, src.dtype, src.numel());
  }

  Status run(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
             const StepContext &ctx) override {
    // The storage type of the instruction's activations: its first non-index,
    // non-accumulator operand; plans of f32, bf16 and f16 run here.
    DType t = DType::F32;
    const size_t numIn = inst.inputs()->size();
    for (size_t i = 0; i < numIn; ++i)
      if (in[i].dtype == DType::BF16 || in[i].dtype == DType::F16 || in[i].dtype == DType::F64)
        t = in[i].dtype;
    if (inst.opcode() != Opcode::ParamGrad && inst.outputs()->size() > 0 &&
        (out[0].dtype == DType::BF16 || out[0].dtype == DType::F16))
      t = out[0].dtype;
    if (t == DType::F64)
      return Status::failure(cat("cuda backend: ", plan::EnumNameOpcode(inst.opcode()), " in ",
                                 plan::EnumNameDType(t), " is not supported (f32, bf16, f16)"));
    // Nothing to write: no kernel (a grid of zero blocks is a launch error). Plans have
    // no zero-sized dimension (the reader refuses them); per-row kernels whose outputs
    // are not empty check their row count where it can be zero.
    bool empty = inst.outputs()->size() > 0;
    for (size_t i = 0; i < inst.outputs()->size(); ++i)
      empty = empty && out[i].numel() == 0;
    if (empty)
      return Status::success();
    try {
      return withStorage(t, [&](auto tag) {
        return dispatch<decltype(tag)>(inst, in, out, ctx);
      });
    } catch (const std::exception &e) {
      return Status::failure(e.what());
    }
  }

  void initParameter(const TensorView &w, const plan::Param &param, uint64_t seed, int tpRank,
                     int tpSize) override {
    // The CPU backend's rule, on the host, then copied: the same bits by construction.
    std::vector<char> host(dtypeBytes(w.dtype) * w.numel());
    TensorView h = w;
    h.data = host.data();
    cpu_->initParameter(h, param, seed, tpRank, tpSize);
    copyToDevice(w.data, host.data(), host.size());
  }

  double sumOfSquares(const TensorView &x) override {
    if (x.dtype != DType::F32)
      throw std::runtime_error("cuda backend: gradient norms are taken over f32 gradients");
    const unsigned blocks = std::min<unsigned>(blocksFor(x.numel()), 1024);
    double *partial = static_cast<double *>(scratch(sizeof(double) * blocks));
    sumOfSquaresKernel<<<blocks, kThreads>>>(x.as<float>(), x.numel(), partial);
    launched("sum of squares");
    std::vector<double> host(blocks);
    copyToHost(host.data(), partial, sizeof(double) * blocks);
    double sum = 0;
    for (double p : host)
      sum += p;
    return sum;
  }

  void adamw(const TensorView &w, const TensorView &g, const TensorView &m, const TensorView &v,
             const AdamWStep &step) override {
    const double c1 = 1 - std::pow(step.beta1, static_cast<double>(step.step));
    const double c2 = 1 - std::pow(step.beta2, static_cast<double>(step.step));
    adamwKernel<<<blocksFor(w.numel()), kThreads>>>(w.as<float>(), g.as<float>(), m.as<float>(),
                                                     v.as<float>(), w.numel(), step, c1, c2);
    launched("AdamW");
  }

private:
  static constexpr size_t kWorkspaceBytes = 32u << 20;

  /// At least `bytes` of `buffer`, or an exception naming `what`.
  static void *grow(DeviceBuffer &buffer, size_t bytes, const char *what) {
    void *data = nullptr;
    check(buffer.get(bytes, data), what);
    return data;
  }
  /// One instruction's temporaries.
  void *scratch(size_t bytes) { return grow(scratch_, bytes, "allocating scratch memory"); }

  /// Checks the launch just made; in synchronous mode, also waits for it to finish.
  void launched(const char *what) {
    check(cudaGetLastError(), what);
    if (synchronous_)
      check(cudaDeviceSynchronize(), what);
  }

  void launchConvert(void *dst, DType to, const void *src, DType from, int64_t n) {
    if (to == from) {
      check(cudaMemcpy(dst, src, dtypeBytes(to) * n, cudaMemcpyDeviceToDevice), "copying");
      return;
    }
    if (to != DType::F32 && to != DType::BF16 && to != DType::F16)
      throw std::runtime_error("cuda backend: no conversion to this type");
    withStorage(to, [&](auto outTag) {
      using O = decltype(outTag);
      withStorage(from, [&](auto inTag) {
        using I = decltype(inTag);
        convertKernel<<<blocksFor(n), kThreads>>>(static_cast<O *>(dst),
                                                  static_cast<const I *>(src), n);
      });
    });
    launched("conversion");
  }

  /// Resets the error flag before a kernel that checks ids; returns the first bad
  /// position afterwards, or -1.
  void resetFlag() {
    const unsigned long long none = ~0ull;
    copyToDevice(flag_, &none, sizeof none);
  }
  int64_t badPosition() {
    unsigned long long value;
    copyToHost(&value, flag_, sizeof value);
    return value == ~0ull ? -1 : static_cast<int64_t>(value);
  }

  /// C = op(A)·op(B) (+ bias per row of C), column-major, C contiguous (ldc = m): f32
  /// compute, A, B and C in `dtype`, bias in `dtype` of length m. Through cuBLASLt, the
  /// bias fused as an epilogue; where cuBLASLt has no algorithm or fails, through
  /// cuBLAS's general GEMM. Either way a biased result is rounded to `dtype` once, as
  /// the CPU backend rounds it.
  void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const void *a,
            int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc, DType dtype,
            const void *bias) {
    // cuBLASLt's bias epilogue wants a 16-byte aligned vector; a parameter at an odd
    // offset of the flat store is copied to an aligned buffer first.
    if (bias && reinterpret_cast<uintptr_t>(bias) % 16 != 0) {
      void *aligned = grow(biasCopy_, dtypeBytes(dtype) * m, "allocating the bias copy");
      check(cudaMemcpyAsync(aligned, bias, dtypeBytes(dtype) * m, cudaMemcpyDeviceToDevice),
            "copying the bias");
      bias = aligned;
    }
    if (gemmPath_ != GemmPath::CublasOnly &&
        gemmLt(transA, transB, m, n, k, a, lda, b, ldb, c, ldc, dtype, bias))
      return;
    if (gemmPath_ == GemmPath::CublasLtOnly)
      throw std::runtime_error("cuda backend: cuBLASLt has no algorithm for this GEMM, and "
                               "MT_CUDA_GEMM=cublaslt forbids the cuBLAS fallback");
    const cudaDataType_t type = cudaTypeOf(dtype);
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const float one = 1.f, zero = 0.f;
    // With a bias: the product in f32, then bias added and rounded once.
    void *product = bias ? grow(gemmOut_, sizeof(float) * m * n, "allocating the GEMM output")
                         : c;
    check(cublasGemmEx(blas_, opA, opB, static_cast<int>(m), static_cast<int>(n),
                       static_cast<int>(k), &one, a, type, static_cast<int>(lda), b, type,
                       static_cast<int>(ldb), &zero, product, bias ? CUDA_R_32F : type,
                       static_cast<int>(bias ? m : ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    if (bias) {
      const int64_t count = m * n;
      withStorage(dtype, [&](auto tag) {
        using T = decltype(tag);
        biasAddKernel<<<blocksFor(count), kThreads>>>(static_cast<const float *>(product),
                                                       static_cast<const T *>(bias),
                                                       static_cast<T *>(c), count, m);
      });
      launched("bias");
    }
  }

  /// The GEMM through cuBLASLt; false where it has no algorithm for these shapes and
  /// alignments (tiny, odd dimensions) or the call fails, and the caller falls back.
  bool gemmLt(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const void *a,
              int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc, DType dtype,
              const void *bias) {
    const cudaDataType_t type = cudaTypeOf(dtype);
    cublasLtMatmulDesc_t desc;
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB);
    if (bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                     sizeof epilogue);
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type);
    }
    cublasLtMatrixLayout_t la, lb, lc;
    check(cublasLtMatrixLayoutCreate(&la, type, transA ? k : m, transA ? m : k, lda), "layout A");
    check(cublasLtMatrixLayoutCreate(&lb, type, transB ? n : k, transB ? k : n, ldb), "layout B");
    check(cublasLtMatrixLayoutCreate(&lc, type, m, n, ldc), "layout C");
    cublasLtMatmulPreference_t preference;
    cublasLtMatmulPreferenceCreate(&preference);
    const size_t workspace = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &workspace, sizeof workspace);
    // Parameters sit at element offsets of one flat store: tell the heuristic how aligned
    // each operand really is.
    auto alignment = [](const void *ptr) {
      uint32_t a = 256;
      while (a > 1 && reinterpret_cast<uintptr_t>(ptr) % a != 0)
        a /= 2;
      return a;
    };
    const uint32_t alignA = alignment(a), alignB = alignment(b), alignC = alignment(c);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                         &alignA, sizeof alignA);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                         &alignB, sizeof alignB);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                         &alignC, sizeof alignC);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                         &alignC, sizeof alignC);
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_, desc, la, lb, lc, lc, preference,
                                                           1, &heuristic, &found);
    const float one = 1.f, zero = 0.f;
    const bool haveAlgorithm = status == CUBLAS_STATUS_SUCCESS && found > 0;
    if (haveAlgorithm)
      status = cublasLtMatmul(lt_, desc, &one, a, la, b, lb, &zero, c, lc, c, lc,
                              &heuristic.algo, workspace_, kWorkspaceBytes, 0);
    cublasLtMatmulPreferenceDestroy(preference);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    if (haveAlgorithm && status != CUBLAS_STATUS_SUCCESS && !warnedLtFailure_) {
      std::fprintf(stderr, "cuda backend: cublasLtMatmul failed (cuBLAS status %d) for an "
                           "%lld x %lld x %lld GEMM; using cublasGemmEx\n",
                   static_cast<int>(status), static_cast<long long>(m),
                   static_cast<long long>(n), static_cast<long long>(k));
      warnedLtFailure_ = true;
    }
    return haveAlgorithm && status == CUBLAS_STATUS_SUCCESS;
  }

  AttentionShape attentionShape(const TensorView &qkv, int64_t heads, bool causal,
                                const plan::Instruction &inst, const StepContext &ctx,
                                bool dropout) {
    AttentionShape a;
    a.b = qkv.dim(0);
    a.s = qkv.dim(1);
    a.h = qkv.dim(2) / 3;
    a.heads = heads;
    a.d = a.h / heads;
    a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.d)));
    a.causal = causal;
    a.rate = dropout ? inst.rate() : 0.0;
    a.stream = static_cast<uint32_t>(inst.stream());
    a.globalHeads = heads * (inst.head_parallel() ? ctx.tpSize : 1);
    a.headOffset = inst.head_parallel() ? ctx.tpRank * heads : 0;
    a.counters = {ctx.seed, ctx.step, ctx.microBatch};
    if (a.d > 32 * kMaxPerLane)
      throw std::runtime_error("cuda backend: attention head_dim " + std::to_string(a.d) +
                               " exceeds " + std::to_string(32 * kMaxPerLane));
    return a;
  }
  static unsigned warpBlocks(const AttentionShape &a) {
    return static_cast<unsigned>((a.b * a.heads * a.s * 32 + kThreads - 1) / kThreads);
  }

  template <typename T>
  Status dispatch(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
                  const StepContext &ctx) {
    auto p = [](const TensorView &v) { return static_cast<T *>(v.data); };
    auto f = [](const TensorView &v) { return static_cast<float *>(v.data); };
    const DType type = std::is_same_v<T, float>           ? DType::F32
                       : std::is_same_v<T, __nv_bfloat16> ? DType::BF16
                                                          : DType::F16;
    const bool vocabParallel = inst.vocab_parallel();
    auto vocabFirst = [&](const TensorView &sharded, int dim) -> int64_t {
      return vocabParallel ? ctx.tpRank * sharded.dim(dim) : 0;
    };
    auto sequenceFirst = [&](const TensorView &x) -> int64_t {
      return inst.sequence_parallel() ? ctx.tpRank * x.dim(1) : 0;
    };
    auto wide = [](const TensorView &ids) { return ids.dtype == DType::I64; };
    auto idsError = [&](const char *what, int64_t limit) -> Status {
      int64_t at = badPosition();
      if (at < 0)
        return Status::success();
      return Status::failure(cat(what, " at position ", at, " is outside the ", limit,
                                 " classes or rows it indexes"));
    };
    const int64_t n = inst.outputs()->size() ? out[0].numel() : 0;
    switch (inst.opcode()) {
    case Opcode::Fill: {
      const float value =
          static_cast<float>(inst.value() * (inst.loss_seed() ? ctx.lossScale : 1.0));
      if (out[0].dtype == DType::F32)
        fillKernel<<<blocksFor(n), kThreads>>>(f(out[0]), n, value);
      else
        fillKernel<<<blocksFor(n), kThreads>>>(p(out[0]), n, value);
      break;
    }
    case Opcode::Embedding: {
      const int64_t parts = vocabParallel ? ctx.tpSize : 1;
      resetFlag();
      embeddingKernel<<<static_cast<unsigned>(in[1].numel()), kThreads>>>(
          p(in[0]), in[1].data, wide(in[1]), p(out[0]), in[0].dim(0), in[0].dim(1),
          vocabFirst(in[0], 0), in[0].dim(0) * parts, flag_);
      launched("embedding");
      return idsError("a token id", in[0].dim(0) * parts);
    }
    case Opcode::EmbeddingGrad: {
      const int64_t rows = out[0].dim(0), h = out[0].dim(1), tokens = in[1].numel();
      check(cudaMemsetAsync(out[0].data, 0, dtypeBytes(type) * rows * h), "zeroing");
      if (tokens == 0)
        break;
      // Keys need the bits of 0..rows (`rows` marks another shard's token).
      int endBit = 1;
      while (endBit < 32 && (uint64_t{1} << endBit) <= static_cast<uint64_t>(rows))
        ++endBit;
      // Scratch: keys and token order, sorted copies of both, then CUB's temporaries.
      size_t sortBytes = 0;
      check(cub::DeviceRadixSort::SortPairs(nullptr, sortBytes, static_cast<uint32_t *>(nullptr),
                                            static_cast<uint32_t *>(nullptr),
                                            static_cast<uint32_t *>(nullptr),
                                            static_cast<uint32_t *>(nullptr), tokens, 0, endBit),
            "sizing the embedding gradient's sort");
      const size_t words = 4 * static_cast<size_t>(tokens);
      uint32_t *keys = static_cast<uint32_t *>(scratch(sizeof(uint32_t) * words + sortBytes));
      uint32_t *order = keys + tokens, *sortedKeys = order + tokens, *sortedOrder = sortedKeys + tokens;
      void *sortScratch = keys + words;
      embeddingGradKeysKernel<<<blocksFor(tokens), kThreads>>>(
          in[1].data, wide(in[1]), tokens, rows, vocabFirst(out[0], 0), keys, order);
      launched("embedding gradient (keys)");
      check(cub::DeviceRadixSort::SortPairs(sortScratch, sortBytes, keys, sortedKeys, order,
                                            sortedOrder, tokens, 0, endBit),
            "sorting tokens by embedding row");
      embeddingGradRowsKernel<<<static_cast<unsigned>(tokens), kThreads>>>(
          p(in[0]), sortedKeys, sortedOrder, tokens, rows, h, p(out[0]));
      break;
    }
    case Opcode::PositionEmbedding:
      positionEmbeddingKernel<<<blocksFor(n), kThreads>>>(p(in[0]), p(in[1]), p(out[0]), n,
                                                           in[0].dim(1), in[0].dim(2),
                                                           sequenceFirst(in[0]));
      break;
    case Opcode::PositionEmbeddingGrad:
      positionEmbeddingGradKernel<<<blocksFor(n), kThreads>>>(
          p(in[0]), p(out[0]), out[0].dim(0), in[0].dim(0), in[0].dim(1), in[0].dim(2),
          sequenceFirst(in[0]));
      break;
    case Opcode::LayerNorm:
      layerNormKernel<<<static_cast<unsigned>(in[0].rows()), kThreads>>>(
          p(in[0]), p(in[1]), p(in[2]), p(out[0]), in[0].cols(), static_cast<float>(inst.epsilon()));
      break;
    case Opcode::LayerNormGrad: {
      const int64_t rows = in[1].rows(), h = in[1].cols();
      float2 *moments = static_cast<float2 *>(scratch(sizeof(float2) * std::max<int64_t>(rows, 1)));
      if (rows > 0)
        layerNormGradRowsKernel<<<static_cast<unsigned>(rows), kThreads>>>(
          p(in[0]), p(in[1]), p(in[2]), p(out[0]), moments, h, static_cast<float>(inst.epsilon()));
      launched("layer norm gradient");
      layerNormGradColumnsKernel<<<blocksFor(h), kThreads>>>(p(in[0]), p(in[1]), moments,
                                                              p(out[1]), p(out[2]), rows, h);
      break;
    }
    case Opcode::Linear: {
      // Row-major out[M×N] = x[M×K]·W[N×K]ᵀ + b is column-major outᵀ = W·xᵀ.
      const int64_t m = in[0].rows(), k = in[0].cols(), nOut = in[1].dim(0);
      gemm(true, false, nOut, m, k, in[1].data, k, in[0].data, k, out[0].data, nOut, type,
           inst.inputs()->size() == 3 ? in[2].data : nullptr);
      break;
    }
    case Opcode::LinearGradInput: {
      // dx[M×K] = dy[M×N]·W[N×K]: column-major dxᵀ = Wᵀ·dyᵀ.
      const int64_t m = in[0].rows(), nOut = in[0].cols(), k = in[1].dim(1);
      gemm(false, false, k, m, nOut, in[1].data, k, in[0].data, nOut, out[0].data, k, type,
           nullptr);
      break;
    }
    case Opcode::LinearGradWeight: {
      // dW[N×K] = dy[M×N]ᵀ·x[M×K]: column-major dWᵀ = xᵀ·dy.
      const int64_t m = in[0].rows(), nOut = in[0].cols(), k = in[1].cols();
      gemm(false, true, k, nOut, m, in[1].data, k, in[0].data, nOut, out[0].data, k, type,
           nullptr);
      break;
    }
    case Opcode::BiasGrad:
      biasGradKernel<<<blocksFor(out[0].numel()), kThreads>>>(p(in[0]), p(out[0]), in[0].rows(),
                                                               in[0].cols());
      break;
    case Opcode::BiasAdd:
      biasAddKernel<<<blocksFor(n), kThreads>>>(p(in[0]), p(in[1]), p(out[0]), n, in[0].cols());
      break;
    case Opcode::Add:
      addKernel<<<blocksFor(n), kThreads>>>(p(in[0]), p(in[1]), p(out[0]), n);
      break;
    case Opcode::Gelu:
      activationKernel<Gelu><<<blocksFor(n), kThreads>>>(p(in[0]), p(out[0]), n);
      break;
    case Opcode::GeluGrad:
      activationGradKernel<Gelu><<<blocksFor(n), kThreads>>>(p(in[0]), p(in[1]), p(out[0]), n);
      break;
    case Opcode::Silu:
      activationKernel<Silu><<<blocksFor(n), kThreads>>>(p(in[0]), p(out[0]), n);
      break;
    case Opcode::SiluGrad:
      activationGradKernel<Silu><<<blocksFor(n), kThreads>>>(p(in[0]), p(in[1]), p(out[0]), n);
      break;
    case Opcode::TpCopy:
      launchConvert(out[0].data, type, in[0].data, type, n);
      break;
    case Opcode::ParamGrad:
      accumulateKernel<<<blocksFor(out[0].numel()), kThreads>>>(p(in[0]), f(out[0]),
                                                                 out[0].numel());
      break;
    case Opcode::Dropout:
    case Opcode::DropoutGrad: {
      // A dropout gradient without its mask draws the mask again: the same dropout.
      if (inst.opcode() == Opcode::DropoutGrad && inst.inputs()->size() == 2) {
        dropoutGradKernel<<<blocksFor(n), kThreads>>>(
            p(in[0]), static_cast<const uint8_t *>(in[1].data), p(out[0]), n,
            static_cast<float>(1.0 / (1.0 - inst.rate())));
        break;
      }
      const ShardMap shard = inst.sequence_parallel()
                                 ? ShardMap(in[0], 1, ctx.tpRank, ctx.tpSize)
                             : inst.feature_parallel()
                                 ? ShardMap(in[0], in[0].rank - 1, ctx.tpRank, ctx.tpSize)
                                 : ShardMap();
      uint8_t *mask = inst.opcode() == Opcode::Dropout && inst.outputs()->size() == 2
                          ? static_cast<uint8_t *>(out[1].data)
                          : nullptr;
      dropoutKernel<<<blocksFor(n), kThreads>>>(p(in[0]), p(out[0]), mask, n, inst.rate(),
                                                static_cast<uint32_t>(inst.stream()), shard,
                                                Counters{ctx.seed, ctx.step, ctx.microBatch});
      break;
    }
    case Opcode::Attention: {
      AttentionShape a = attentionShape(in[0], inst.heads(), inst.causal(), inst, ctx, true);
      attentionForwardKernel<<<warpBlocks(a), kThreads>>>(p(in[0]), p(out[0]), a);
      break;
    }
    case Opcode::AttentionGrad: {
      AttentionShape a = attentionShape(in[1], inst.heads(), inst.causal(), inst, ctx, true);
      float2 *stats = static_cast<float2 *>(scratch(sizeof(float2) * a.b * a.heads * a.s));
      attentionBackwardQueryKernel<<<warpBlocks(a), kThreads>>>(p(in[1]), p(in[2]), p(in[0]),
                                                                p(out[0]), stats, a);
      launched("attention backward (queries)");
      attentionBackwardKeyKernel<<<warpBlocks(a), kThreads>>>(p(in[1]), p(in[0]), p(out[0]),
                                                              stats, a);
      break;
    }
    case Opcode::AttentionProbs: {
      AttentionShape a = attentionShape(in[0], inst.heads(), inst.causal(), inst, ctx, false);
      attentionProbsKernel<<<warpBlocks(a), kThreads>>>(p(in[0]), p(out[0]), a);
      break;
    }
    case Opcode::AttentionContext: {
      AttentionShape a = attentionShape(in[1], in[0].dim(1), false, inst, ctx, false);
      attentionContextKernel<<<warpBlocks(a), kThreads>>>(p(in[0]), p(in[1]), p(out[0]), a);
      break;
    }
    case Opcode::AttentionProbsGrad: {
      AttentionShape a = attentionShape(in[2], in[1].dim(1), false, inst, ctx, false);
      float *deltas = static_cast<float *>(scratch(sizeof(float) * a.b * a.heads * a.s));
      attentionProbsGradQueryKernel<<<warpBlocks(a), kThreads>>>(p(in[0]), p(in[1]), p(in[2]),
                                                                 p(out[0]), deltas, a);
      launched("attention probabilities gradient (queries)");
      attentionProbsGradKeyKernel<<<warpBlocks(a), kThreads>>>(p(in[0]), p(in[1]), p(in[2]),
                                                               p(out[0]), deltas, a);
      break;
    }
    case Opcode::AttentionContextGrad: {
      AttentionShape a = attentionShape(in[2], in[1].dim(1), false, inst, ctx, false);
      attentionContextGradProbsKernel<<<warpBlocks(a), kThreads>>>(p(in[0]), p(in[2]),
                                                                   p(out[0]), a);
      launched("attention context gradient (probabilities)");
      attentionContextGradValuesKernel<<<warpBlocks(a), kThreads>>>(p(in[0]), p(in[1]),
                                                                    p(out[1]), a);
      break;
    }
    case Opcode::CrossEntropy: {
      const int64_t m = in[0].rows(), v = in[0].cols();
      const int64_t classes = inst.num_classes() ? inst.num_classes() : v;
      float *rowLoss = static_cast<float *>(scratch(sizeof(float) * m));
      resetFlag();
      crossEntropyRowsKernel<<<static_cast<unsigned>(m), kThreads>>>(
          p(in[0]), in[1].data, wide(in[1]), rowLoss, v, classes, flag_);
      launched("cross-entropy");
      if (Status s = idsError("a target id", classes); !s.ok())
        return s;
      meanKernel<<<1, 1024>>>(rowLoss, m, f(out[0]));
      break;
    }
    case Opcode::CrossEntropyGrad: {
      const int64_t m = in[1].rows(), v = in[1].cols();
      const int64_t classes = inst.num_classes() ? inst.num_classes() : v;
      resetFlag();
      crossEntropyGradKernel<<<static_cast<unsigned>(m), kThreads>>>(
          f(in[0]), p(in[1]), in[2].data, wide(in[2]), p(out[0]), m, v, classes, flag_);
      launched("cross-entropy gradient");
      return idsError("a target id", classes);
    }
    case Opcode::CrossEntropyStats: {
      const int64_t m = in[0].rows(), v = in[0].cols(), first = vocabFirst(in[0], in[0].rank - 1);
      const int64_t classes = inst.num_classes() ? inst.num_classes() : v * ctx.tpSize;
      const int64_t valid = std::clamp<int64_t>(classes - first, 0, v);
      resetFlag();
      crossEntropyStatsKernel<<<static_cast<unsigned>(m), kThreads>>>(
          p(in[0]), in[1].data, wide(in[1]), f(out[0]), m, v, first, valid, classes, flag_);
      launched("cross-entropy statistics");
      return idsError("a target id", classes);
    }
    case Opcode::CrossEntropyMerge: {
      const int64_t m = in[0].cols(), parts = in[0].dim(0) / 3;
      float *rowLoss = static_cast<float *>(scratch(sizeof(float) * m));
      crossEntropyMergeRowsKernel<<<blocksFor(m), kThreads>>>(f(in[0]), rowLoss, m, parts);
      launched("cross-entropy merge");
      meanKernel<<<1, 1024>>>(rowLoss, m, f(out[0]));
      break;
    }
    case Opcode::VocabParallelCrossEntropyGrad: {
      const int64_t m = in[1].rows(), v = in[1].cols(), first = vocabFirst(in[1], in[1].rank - 1);
      const int64_t classes = inst.num_classes() ? inst.num_classes() : v * ctx.tpSize;
      vocabParallelCrossEntropyGradKernel<<<static_cast<unsigned>(m), kThreads>>>(
          f(in[0]), p(in[1]), in[2].data, wide(in[2]), f(in[3]), p(out[0]), m, v,
          in[3].dim(0) / 3, first, std::clamp<int64_t>(classes - first, 0, v));
      break;
    }
    case Opcode::AllReduce:
    case Opcode::AllGather:
    case Opcode::ReduceScatter:
      return Status::failure("collectives run through the communicator, not the backend");
    }
    launched(plan::EnumNameOpcode(inst.opcode()));
    return Status::success();
  }

  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void *workspace_ = nullptr;
  unsigned long long *flag_ = nullptr;
  DeviceBuffer scratch_;  // one instruction's temporaries
  DeviceBuffer gemmOut_;  // an f32 product before its bias (the cuBLAS fallback)
  DeviceBuffer biasCopy_; // a misaligned bias, aligned for the epilogue
  bool warnedLtFailure_ = false;
  const bool synchronous_ = synchronousLaunches();
  const GemmPath gemmPath_ = gemmPath();
  std::unique_ptr<Backend> cpu_ = makeCpuBackend();
};

} // namespace

int cudaDevices() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

Status makeCudaBackend(int device, std::unique_ptr<Backend> &out) {
  try {
    out = std::make_unique<CudaBackend>(device);
    return Status::success();
  } catch (const std::exception &e) {
    return Status::failure(e.what());
  }
}

} // namespace mt
