// Layer and RMS normalisation, forward and backward: one block per row, the row's
// moments through the block reduction of Common.cuh; the weight and bias gradients as
// column sums (ColumnSums.cuh).
#ifndef MT_RUNTIME_BACKENDS_CUDA_NORMS_CUH
#define MT_RUNTIME_BACKENDS_CUDA_NORMS_CUH

#include "backends/cuda/ColumnSums.cuh"
#include "backends/cuda/Common.cuh"

namespace mt {
namespace {

/// The whole block's mean and 1/sqrt(variance + eps) of the row x[0, h), in two passes.
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

/// One block per row: reads x, w and b, writes out = (x − mean)·rstd·w + b.
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

/// A norm's input gradient `v` at element i, rounded to T as stored; with `residual` (the
/// residual stream's gradient), added to it as the add kernel does, and rounded again.
template <typename T>
__device__ __forceinline__ void storeInputGrad(T *dx, const T *residual, int64_t i, float v) {
  st(dx, i, residual ? __fadd_rn(ld(residual, i), roundTo<T>(v)) : v);
}

/// One block per row: reads dy, x and w (and the residual stream's gradient, where
/// given), writes dx (the row's moments recomputed rather than saved by the forward);
/// the row's mean and rstd are kept for the column sums of dw and db.
template <typename T>
__global__ void layerNormGradRowsKernel(const T *dy, const T *x, const T *w, const T *residual,
                                        T *dx, float2 *moments, int64_t h, float eps) {
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
    storeInputGrad(dx, residual, r * h + j, rstd * (ld(g, j) * ld(w, j) - meanG - xhat * meanGX));
  }
  if (threadIdx.x == 0)
    moments[r] = make_float2(mean, rstd);
}

/// The terms of a layer norm's weight and bias gradients at (r, j): dy·x̂ and dy, x̂ from
/// the row's moments.
template <typename T> struct LayerNormGradTerms {
  const T *dy, *x;
  const float2 *moments;
  int64_t h;
  __device__ void operator()(int64_t r, int64_t j, float *acc) const {
    const float g = ld(dy, r * h + j);
    const float2 m = moments[r];
    acc[0] += g * (ld(x, r * h + j) - m.x) * m.y;
    acc[1] += g;
  }
};

/// The whole block's 1/sqrt(mean(x²) + eps) of the row x[0, h).
template <typename T>
__device__ float rowRms(const T *x, int64_t h, float eps, float *shared) {
  float sq = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    sq += ld(x, j) * ld(x, j);
  return rsqrtf(blockSum(sq, shared) / h + eps);
}

/// One block per row: reads x and w, writes out = x·rstd·w.
template <typename T>
__global__ void rmsNormKernel(const T *x, const T *w, T *out, int64_t h, float eps) {
  __shared__ float shared[32];
  const T *xr = x + blockIdx.x * h;
  const float rstd = rowRms(xr, h, eps, shared);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    st(out, blockIdx.x * h + j, ld(xr, j) * rstd * ld(w, j));
}

/// One block per row: reads dy, x and w, writes dx = rstd·(g − x̂·mean(g·x̂)) with
/// g = dy·w; keeps the row's rstd for the column sums of dw.
template <typename T>
__global__ void rmsNormGradRowsKernel(const T *dy, const T *x, const T *w, const T *residual,
                                      T *dx, float *rstds, int64_t h, float eps) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * h, *g = dy + r * h;
  const float rstd = rowRms(xr, h, eps, shared);
  float sumGX = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    sumGX += ld(g, j) * ld(w, j) * ld(xr, j) * rstd;
  const float meanGX = blockSum(sumGX, shared) / h;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    storeInputGrad(dx, residual, r * h + j,
                   rstd * (ld(g, j) * ld(w, j) - ld(xr, j) * rstd * meanGX));
  if (threadIdx.x == 0)
    rstds[r] = rstd;
}

/// The term of an RMS norm's weight gradient at (r, j): dy·x·rstd.
template <typename T> struct RmsNormGradTerm {
  const T *dy, *x;
  const float *rstds;
  int64_t h;
  __device__ void operator()(int64_t r, int64_t j, float *acc) const {
    acc[0] += ld(dy, r * h + j) * ld(x, r * h + j) * rstds[r];
  }
};

template <typename T>
void launchRmsNorm(const T *x, const T *w, T *out, int64_t rows, int64_t h, float eps,
                   cudaStream_t stream) {
  rmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, out, h, eps);
}

template <typename T>
void launchRmsNormGradRows(const T *dy, const T *x, const T *w, const T *residual, T *dx,
                           float *rstds, int64_t rows, int64_t h, float eps,
                           cudaStream_t stream) {
  rmsNormGradRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      dy, x, w, residual, dx, rstds, h, eps);
}

/// dw = Σ over rows of dy·x·rstd (dw += it with `accumulate`); `partials` holds
/// columnSumScratchBytes(1, rows, h).
template <typename T, typename Out>
void launchRmsNormGradColumns(const T *dy, const T *x, const float *rstds, Out *dw,
                              int64_t rows, int64_t h, float *partials, bool accumulate,
                              cudaStream_t stream) {
  launchColumnSums<1>(RmsNormGradTerm<T>{dy, x, rstds, h}, rows, h, partials, dw,
                      static_cast<Out *>(nullptr), accumulate, stream);
}

template <typename T>
void launchLayerNorm(const T *x, const T *w, const T *b, T *out, int64_t rows, int64_t h,
                     float eps, cudaStream_t stream) {
  layerNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, b, out, h, eps);
}

template <typename T>
void launchLayerNormGradRows(const T *dy, const T *x, const T *w, const T *residual, T *dx,
                             float2 *moments, int64_t rows, int64_t h, float eps,
                             cudaStream_t stream) {
  layerNormGradRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      dy, x, w, residual, dx, moments, h, eps);
}

/// dw = Σ over rows of dy·x̂, db = Σ dy (each added with `accumulate`); `partials` holds
/// columnSumScratchBytes(2, rows, h).
template <typename T, typename Out>
void launchLayerNormGradColumns(const T *dy, const T *x, const float2 *moments, Out *dw,
                                Out *db, int64_t rows, int64_t h, float *partials,
                                bool accumulate, cudaStream_t stream) {
  launchColumnSums<2>(LayerNormGradTerms<T>{dy, x, moments, h}, rows, h, partials, dw, db,
                      accumulate, stream);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_NORMS_CUH
