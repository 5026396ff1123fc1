// Layer and RMS normalisation, forward and backward: rows held in registers by a team of
// warps where the row's length allows (below), else one block per row with the row's
// moments through the block reduction of Common.cuh; the weight and bias gradients as
// column sums (ColumnSums.cuh), begun inside the rows kernel where it holds the rows
// (below: dy and x are then read once).
#ifndef MT_RUNTIME_BACKENDS_CUDA_NORMS_CUH
#define MT_RUNTIME_BACKENDS_CUDA_NORMS_CUH

#include "backends/cuda/ColumnSums.cuh"
#include "backends/cuda/Common.cuh"
#include "backends/cuda/RowShapes.h"
#include "core/SharedMath.h"

namespace mt {
namespace {

//===----------------------------------------------------------------------===//
// Rows held in registers: a team of W warps holds a row of h = 128·Q·W elements, each
// thread Q quads of it (thread t's quad q starts at element 4·(t + 32·W·q), so a warp
// reads 32 adjacent quads at once), for Q ≤ 8 and W a power of two up to 8: GPT-2's
// 768 is one warp of six quads, 2048 two warps of eight. The row is read once and its
// sums are warp shuffles, then (W > 1) the W warps' sums added in order through shared
// memory: every thread gets the same bits. A one-warp team takes four rows per block, a
// larger team a block of its own. Which kernel a norm runs depends on h alone, so a
// fused norm and its unfused pair run the same one.
//===----------------------------------------------------------------------===//

/// The thread's team in its block.
__device__ __forceinline__ int teamIndex(RowTeam team) {
  return static_cast<int>(threadIdx.x) / team.threads();
}

/// f(std::integral_constant<int, quads>), for quads from Q to 8.
template <int Q = 1, typename F> void withQuads(int quads, F &&f) {
  if constexpr (Q <= 8) {
    if (quads == Q)
      f(std::integral_constant<int, Q>{});
    else
      withQuads<Q + 1>(quads, f);
  }
}

/// launch(std::integral_constant<int, Q>, grid, block, team) for rows of h elements held
/// in registers: false where h has no such shape (and there are rows).
template <typename Launch> bool launchRows(int64_t rows, int64_t h, Launch &&launch) {
  if (rows == 0)
    return true; // nothing to launch (and a grid of no blocks is a launch error)
  RowTeam team;
  const int quads = rowQuads(h, team);
  if (quads == 0)
    return false;
  const dim3 grid(static_cast<unsigned>((rows + team.teams - 1) / team.teams)),
      block(static_cast<unsigned>(team.threads() * team.teams));
  withQuads(quads, [&](auto q) { launch(q, grid, block, team); });
  return true;
}

/// The team's row (from blockIdx.x), or -1 past the last: the whole team leaves together.
__device__ __forceinline__ int64_t teamRow(RowTeam team, int64_t rows) {
  const int64_t r = blockIdx.x * int64_t{team.teams} + threadIdx.x / team.threads();
  return r < rows ? r : -1;
}

/// This thread's quads of `row` into v, or from v.
template <int Q, typename T>
__device__ __forceinline__ void loadRow(const T *row, RowTeam team, bool vector, float (&v)[Q][4]) {
  const int t = threadIdx.x % team.threads();
  for (int q = 0; q < Q; ++q)
    loadQuad(row, 4 * (t + team.threads() * q), 4, vector, v[q]);
}
template <int Q, typename T>
__device__ __forceinline__ void storeRow(T *row, RowTeam team, bool vector,
                                         const float (&v)[Q][4]) {
  const int t = threadIdx.x % team.threads();
  for (int q = 0; q < Q; ++q)
    storeQuad(row, 4 * (t + team.threads() * q), 4, vector, v[q]);
}

/// Waits for the team's threads alone: a named barrier a team (of several warps) of its
/// own, so that the teams of a block keep their own pace.
__device__ __forceinline__ void teamSync(RowTeam team) {
  asm volatile("bar.sync %0, %1;" ::"r"(1 + teamIndex(team)), "r"(team.threads()) : "memory");
}

/// Σ v over the team, its warps' sums added in order; `shared` holds 32 floats.
__device__ __forceinline__ float teamSum(float v, RowTeam team, float *shared) {
  v = warpSum(v);
  if (team.warps == 1)
    return v;
  if ((threadIdx.x & 31) == 0)
    shared[threadIdx.x / 32] = v;
  teamSync(team);
  const float *warps = shared + teamIndex(team) * team.warps;
  float sum = 0;
  for (int w = 0; w < team.warps; ++w)
    sum += warps[w];
  teamSync(team); // read by all before it is written again
  return sum;
}

/// Σ of the row's values, over the team.
template <int Q>
__device__ __forceinline__ float rowSum(const float (&v)[Q][4], RowTeam team, float *shared) {
  float sum = 0;
  for (int q = 0; q < Q; ++q)
    for (int k = 0; k < 4; ++k)
      sum += v[q][k];
  return teamSum(sum, team, shared);
}

/// The row's mean and 1/sqrt(variance + eps), in two passes over the registers.
template <int Q>
__device__ __forceinline__ void rowMoments(const float (&x)[Q][4], RowTeam team, float eps,
                                           float *shared, float &mean, float &rstd) {
  const float h = 128.f * Q * team.warps;
  mean = rowSum(x, team, shared) / h;
  float sq = 0;
  for (int q = 0; q < Q; ++q)
    for (int k = 0; k < 4; ++k)
      sq += (x[q][k] - mean) * (x[q][k] - mean);
  rstd = rsqrtf(teamSum(sq, team, shared) / h + eps);
}

/// The row's 1/sqrt(mean(x²) + eps).
template <int Q>
__device__ __forceinline__ float rowRms(const float (&x)[Q][4], RowTeam team, float eps,
                                        float *shared) {
  float sq = 0;
  for (int q = 0; q < Q; ++q)
    for (int k = 0; k < 4; ++k)
      sq += x[q][k] * x[q][k];
  return rsqrtf(teamSum(sq, team, shared) / (128.f * Q * team.warps) + eps);
}

/// out = (x − mean)·rstd·w + b, a row per team.
template <int Q, typename T>
__global__ void layerNormRowsKernel(const T *x, const T *w, const T *b, T *out, int64_t rows,
                                    float eps, RowTeam team, bool vector) {
  __shared__ float shared[32];
  const int64_t r = teamRow(team, rows), h = int64_t{128} * Q * team.warps;
  if (r < 0)
    return;
  float v[Q][4], wv[Q][4], bv[Q][4];
  loadRow(x + r * h, team, vector, v);
  loadRow(w, team, vector, wv);
  loadRow(b, team, vector, bv);
  float mean, rstd;
  rowMoments(v, team, eps, shared, mean, rstd);
  for (int q = 0; q < Q; ++q)
    for (int k = 0; k < 4; ++k)
      v[q][k] = (v[q][k] - mean) * rstd * wv[q][k] + bv[q][k];
  storeRow(out + r * h, team, vector, v);
}

/// The input gradient v, rounded to T as stored; with the residual stream's gradient,
/// added to it as the add kernel does (storeInputGrad, by rows).
template <int Q, typename T>
__device__ __forceinline__ void storeRowInputGrad(T *dx, const T *residual, RowTeam team,
                                                  bool vector, float (&v)[Q][4]) {
  if (residual) {
    float rv[Q][4];
    loadRow(residual, team, vector, rv);
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < 4; ++k)
        v[q][k] = __fadd_rn(rv[q][k], roundTo<T>(v[q][k]));
  }
  storeRow(dx, team, vector, v);
}

//===----------------------------------------------------------------------===//
// Column sums inside the gradient's rows kernel: a block of 8 warps (8 / W teams) takes
// `blockRows` consecutive rows, its teams in turn, each team adding its rows' K weight-
// (and bias-) gradient terms, in row order, to a slice of shared memory of its own
// ([K][h]: each column's element belongs to one thread); the block then adds its teams'
// slices in team order into partials[block][K][h], which launchColumnSums adds in block
// order. dy and x are read once, where the column sums alone would read them again.
// The blocks and their rows: RowShapes.h's columnPlan.
//===----------------------------------------------------------------------===//

/// The rows a team takes, in turn: `steps` of them (columnPlanRow), a block's teams
/// apart.
struct BlockRows {
  int steps;
  int64_t blockRows;
  __device__ BlockRows(RowTeam team, int64_t blockRows)
      : steps(static_cast<int>(blockRows / team.teams)), blockRows(blockRows) {}
  __device__ int64_t row(RowTeam team, int step) const {
    return columnPlanRow(blockRows, team.teams, blockIdx.x, teamIndex(team), step);
  }
};

/// This thread's slice of the block's column sums (its team's [K][h]), cleared.
template <int K>
__device__ __forceinline__ float *clearedSlice(float *slices, RowTeam team, int64_t h) {
  for (int64_t i = threadIdx.x; i < K * h * team.teams; i += blockDim.x)
    slices[i] = 0;
  __syncthreads();
  return slices + static_cast<int64_t>(teamIndex(team)) * K * h;
}

/// slice[term's h columns] += v, this thread's quads of them.
template <int Q>
__device__ __forceinline__ void addToSlice(float *slice, RowTeam team, const float (&v)[Q][4]) {
  const int t = threadIdx.x % team.threads();
  for (int q = 0; q < Q; ++q) {
    float4 *at = reinterpret_cast<float4 *>(slice + 4 * (t + team.threads() * q));
    float4 sum = *at;
    sum.x += v[q][0];
    sum.y += v[q][1];
    sum.z += v[q][2];
    sum.w += v[q][3];
    *at = sum;
  }
}
/// slice += v·x·scale, this thread's quads of them (each product rounded as written).
template <int Q>
__device__ __forceinline__ void addToSlice(float *slice, RowTeam team, const float (&v)[Q][4],
                                           const float (&x)[Q][4], float scale) {
  float product[Q][4];
  for (int q = 0; q < Q; ++q)
    for (int k = 0; k < 4; ++k)
      product[q][k] = v[q][k] * x[q][k] * scale;
  addToSlice(slice, team, product);
}

/// partials[block] = the block's slices added in team order.
template <int K>
__device__ __forceinline__ void writeBlockPartials(const float *slices, RowTeam team, int64_t h,
                                                   float *partials) {
  __syncthreads();
  float *out = partials + blockIdx.x * static_cast<int64_t>(K) * h;
  for (int64_t i = threadIdx.x; i < K * h; i += blockDim.x) {
    float sum = 0;
    for (int s = 0; s < team.teams; ++s)
      sum += slices[s * K * h + i];
    out[i] = sum;
  }
}

/// The terms launchColumnSums adds over blocks: row r of the partials, K of h.
template <int K> struct BlockPartials {
  const float *partials;
  int64_t h;
  __device__ void operator()(int64_t r, int64_t j, float *acc) const {
    for (int k = 0; k < K; ++k)
      acc[k] += partials[(r * K + k) * h + j];
  }
};

/// A layer norm's gradient of one row (x̂ left in xv, dx in g): dx = rstd·(dy·w − mean(dy·w)
/// − x̂·mean(dy·w·x̂)); its weight and bias gradients' terms dy·x̂ and dy to the slice.
struct LayerNormRowGrad {
  static constexpr int K = 2;
  float eps;
  template <int Q>
  __device__ void operator()(float (&xv)[Q][4], float (&g)[Q][4], const float (&wv)[Q][4],
                             RowTeam team, float *shared, float *slice, int64_t h) const {
    float mean, rstd;
    rowMoments(xv, team, eps, shared, mean, rstd);
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < 4; ++k)
        xv[q][k] = (xv[q][k] - mean) * rstd; // x̂
    addToSlice(slice, team, g, xv, 1.f);     // dy·x̂ (times 1: exact)
    addToSlice(slice + h, team, g);
    float sumG = 0, sumGX = 0;
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < 4; ++k) {
        g[q][k] *= wv[q][k]; // dy·w
        sumG += g[q][k];
        sumGX += g[q][k] * xv[q][k];
      }
    const float meanG = teamSum(sumG, team, shared) / static_cast<float>(h),
                meanGX = teamSum(sumGX, team, shared) / static_cast<float>(h);
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < 4; ++k)
        g[q][k] = rstd * (g[q][k] - meanG - xv[q][k] * meanGX);
  }
};

/// An RMS norm's gradient of one row (dx in g): dx = rstd·(dy·w − x·rstd·mean(dy·w·x·rstd));
/// its weight gradient's term dy·x·rstd to the slice.
struct RmsNormRowGrad {
  static constexpr int K = 1;
  float eps;
  template <int Q>
  __device__ void operator()(float (&xv)[Q][4], float (&g)[Q][4], const float (&wv)[Q][4],
                             RowTeam team, float *shared, float *slice, int64_t h) const {
    const float rstd = rowRms(xv, team, eps, shared);
    addToSlice(slice, team, g, xv, rstd); // dy·x·rstd
    float sumGX = 0;
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < 4; ++k)
        sumGX += g[q][k] * wv[q][k] * xv[q][k] * rstd;
    const float meanGX = teamSum(sumGX, team, shared) / static_cast<float>(h);
    for (int q = 0; q < Q; ++q)
      for (int k = 0; k < 4; ++k)
        g[q][k] = rstd * (g[q][k] * wv[q][k] - xv[q][k] * rstd * meanGX);
  }
};

/// A norm's input gradient, a row per team at a time (Grad: LayerNormRowGrad or
/// RmsNormRowGrad), stored with the residual stream's gradient where given, and the
/// block's partial column sums of its weight (and bias) gradient (columnPlan).
template <int Q, typename Grad, typename T>
__global__ void normGradRowsKernel(const T *dy, const T *x, const T *w, const T *residual, T *dx,
                                   int64_t rows, Grad grad, RowTeam team, bool vector,
                                   int64_t blockRows, float *partials) {
  extern __shared__ float4 slices[];
  __shared__ float shared[32];
  const int64_t h = int64_t{128} * Q * team.warps;
  float *slice = clearedSlice<Grad::K>(reinterpret_cast<float *>(slices), team, h);
  const BlockRows block(team, blockRows);
  for (int step = 0; step < block.steps; ++step) {
    const int64_t r = block.row(team, step);
    if (r >= rows)
      break; // the whole team: a team's later rows lie further on
    float xv[Q][4], g[Q][4], wv[Q][4];
    loadRow(x + r * h, team, vector, xv);
    loadRow(dy + r * h, team, vector, g);
    loadRow(w, team, vector, wv);
    grad(xv, g, wv, team, shared, slice, h);
    storeRowInputGrad(dx + r * h, residual ? residual + r * h : nullptr, team, vector, g);
  }
  writeBlockPartials<Grad::K>(reinterpret_cast<const float *>(slices), team, h, partials);
}

/// out = x·rstd·w, a row per team.
template <int Q, typename T>
__global__ void rmsNormRowsKernel(const T *x, const T *w, T *out, int64_t rows, float eps,
                                  RowTeam team, bool vector) {
  __shared__ float shared[32];
  const int64_t r = teamRow(team, rows), h = int64_t{128} * Q * team.warps;
  if (r < 0)
    return;
  float v[Q][4], wv[Q][4];
  loadRow(x + r * h, team, vector, v);
  loadRow(w, team, vector, wv);
  const float rstd = rowRms(v, team, eps, shared);
  for (int q = 0; q < Q; ++q)
    for (int k = 0; k < 4; ++k)
      v[q][k] = v[q][k] * rstd * wv[q][k];
  storeRow(out + r * h, team, vector, v);
}

/// The whole block's mean and 1/sqrt(variance + eps) of the row x[0, h), in two passes.
template <typename T>
__device__ void blockRowMoments(const T *x, int64_t h, float eps, float &mean, float &rstd,
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
__global__ void layerNormBlockKernel(const T *x, const T *w, const T *b, T *out, int64_t h,
                                     float eps) {
  __shared__ float shared[32];
  const T *xr = x + blockIdx.x * h;
  float mean, rstd;
  blockRowMoments(xr, h, eps, mean, rstd, shared);
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
__global__ void layerNormGradBlockKernel(const T *dy, const T *x, const T *w, const T *residual,
                                         T *dx, float2 *moments, int64_t h, float eps) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * h, *g = dy + r * h;
  float mean, rstd;
  blockRowMoments(xr, h, eps, mean, rstd, shared);
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
__device__ float blockRowRms(const T *x, int64_t h, float eps, float *shared) {
  float sq = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    sq += ld(x, j) * ld(x, j);
  return rsqrtf(blockSum(sq, shared) / h + eps);
}

/// One block per row: reads x and w, writes out = x·rstd·w.
template <typename T>
__global__ void rmsNormBlockKernel(const T *x, const T *w, T *out, int64_t h, float eps) {
  __shared__ float shared[32];
  const T *xr = x + blockIdx.x * h;
  const float rstd = blockRowRms(xr, h, eps, shared);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    st(out, blockIdx.x * h + j, ld(xr, j) * rstd * ld(w, j));
}

/// One block per row: reads dy, x and w, writes dx = rstd·(g − x̂·mean(g·x̂)) with
/// g = dy·w; keeps the row's rstd for the column sums of dw.
template <typename T>
__global__ void rmsNormGradBlockKernel(const T *dy, const T *x, const T *w, const T *residual,
                                       T *dx, float *rstds, int64_t h, float eps) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * h, *g = dy + r * h;
  const float rstd = blockRowRms(xr, h, eps, shared);
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
  if (!launchRows(rows, h, [&](auto q, dim3 grid, dim3 block, RowTeam team) {
        rmsNormRowsKernel<decltype(q)::value>
            <<<grid, block, 0, stream>>>(x, w, out, rows, eps, team, quadsAligned(x, w, out));
      }))
    rmsNormBlockKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, out, h, eps);
}

/// A norm's gradient over rows held in registers (normGradRowsKernel, columnPlan): dx,
/// then the column sums' passes over the blocks' partials (in `scratch`,
/// normGradColumnBytes) write out0 (and out1, with K = 2), added to them with
/// `accumulate`. False, launching nothing, where the rows are not held in registers.
template <typename Grad, typename T, typename Out>
bool launchNormGradRows(const T *dy, const T *x, const T *w, const T *residual, T *dx, Grad grad,
                        Out *out0, Out *out1, int64_t rows, int64_t h, float *scratch,
                        bool accumulate, cudaStream_t stream) {
  ColumnPlan plan;
  if (!columnPlan(Grad::K, rows, h, plan))
    return false;
  const bool vector = quadsAligned(dy, x, w, residual, dx);
  withQuads(plan.quads, [&](auto q) {
    constexpr int Q = decltype(q)::value;
    // The slices (4 KB · K · Q: fixed for each kernel) may pass the 48 KB a kernel takes
    // unasked, which its own shared[32] counts against too: asked for once for each
    // kernel, whatever the size (the attribute stays).
    static bool allowed = false;
    if (!allowed) {
      check(cudaFuncSetAttribute(normGradRowsKernel<Q, Grad, T>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(plan.slices)),
            "giving a norm gradient's kernel its shared memory");
      allowed = true;
    }
    normGradRowsKernel<Q><<<dim3(static_cast<unsigned>(plan.blocks)),
                            dim3(static_cast<unsigned>(plan.team.threads() * plan.team.teams)),
                            plan.slices, stream>>>(dy, x, w, residual, dx, rows, grad, plan.team,
                                                   vector, plan.blockRows, scratch);
  });
  float *sums = scratch + blockPartialsBytes(Grad::K, plan, h) / sizeof(float);
  launchColumnSums<Grad::K>(BlockPartials<Grad::K>{scratch, h}, plan.blocks, h, sums, out0, out1,
                            accumulate, stream);
  return true;
}

/// dx, and dw = Σ over rows of dy·x·rstd (dw += it with `accumulate`): by rows held in
/// registers, else a block per row (keeping the rows' rstd) and then the column sums;
/// `scratch` holds normGradColumnBytes(1, rows, h).
template <typename T, typename Out>
void launchRmsNormGrad(const T *dy, const T *x, const T *w, const T *residual, T *dx, float *rstds,
                       Out *dw, int64_t rows, int64_t h, float eps, float *scratch, bool accumulate,
                       cudaStream_t stream) {
  if (launchNormGradRows(dy, x, w, residual, dx, RmsNormRowGrad{eps}, dw,
                         static_cast<Out *>(nullptr), rows, h, scratch, accumulate, stream))
    return;
  if (rows > 0)
    rmsNormGradBlockKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(dy, x, w, residual,
                                                                                 dx, rstds, h, eps);
  launchColumnSums<1>(RmsNormGradTerm<T>{dy, x, rstds, h}, rows, h, scratch, dw,
                      static_cast<Out *>(nullptr), accumulate, stream);
}

//===----------------------------------------------------------------------===//
// qk_norm: the fused QKV is `slots` heads of d, each row's groups of perGroup query heads,
// a key and a value (core/SharedMath.h's QkvLayout). A warp takes one head, its sums warp
// shuffles, so every head's bits depend on d alone.
//===----------------------------------------------------------------------===//

/// Each warp of the grid takes head s = its index, then a grid's worth of warps on.
#define WARP_STRIDE(s, n)                                                                          \
  for (int64_t s = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; s < (n);    \
       s += static_cast<int64_t>(gridDim.x) * blockDim.x / 32)

/// Head s's weight (wq for a query head, wk for a key); for a value, null once its d
/// elements of `in` are copied to `out` by the warp.
template <typename T>
__device__ __forceinline__ const T *headWeight(int64_t s, int64_t d, int64_t perGroup, const T *wq,
                                               const T *wk, const T *in, T *out) {
  const int64_t j = s % (perGroup + 2);
  if (j < perGroup + 1)
    return j < perGroup ? wq : wk;
  for (int64_t i = threadIdx.x & 31; i < d; i += 32)
    out[s * d + i] = in[s * d + i];
  return nullptr;
}

/// 1/sqrt(mean(x²) + eps) of the d elements of one head, over the warp.
template <typename T> __device__ __forceinline__ float headRstd(const T *x, int64_t d, float eps) {
  float sq = 0;
  for (int64_t i = threadIdx.x & 31; i < d; i += 32)
    sq += ld(x, i) * ld(x, i);
  return rsqrtf(warpSum(sq) / static_cast<float>(d) + eps);
}

/// out = x·rstd·w for each query (wq) and key (wk) head; values copied.
template <typename T>
__global__ void qkNormKernel(const T *x, const T *wq, const T *wk, T *out, int64_t slots, int64_t d,
                             int64_t perGroup, float eps) {
  const int lane = threadIdx.x & 31;
  WARP_STRIDE(s, slots) {
    const T *w = headWeight(s, d, perGroup, wq, wk, x, out);
    if (!w)
      continue;
    const T *head = x + s * d;
    const float rstd = headRstd(head, d, eps);
    for (int64_t i = lane; i < d; i += 32)
      st(out, s * d + i, ld(head, i) * rstd * ld(w, i));
  }
}

/// dx = rstd·(dy·w − x·rstd·mean(dy·w·x·rstd)) for each query and key head, keeping its
/// rstd; a value's dy copied.
template <typename T>
__global__ void qkNormGradKernel(const T *dy, const T *x, const T *wq, const T *wk, T *dx,
                                 float *rstds, int64_t slots, int64_t d, int64_t perGroup,
                                 float eps) {
  const int lane = threadIdx.x & 31;
  WARP_STRIDE(s, slots) {
    const T *w = headWeight(s, d, perGroup, wq, wk, dy, dx);
    if (!w)
      continue;
    const T *head = x + s * d, *g = dy + s * d;
    const float rstd = headRstd(head, d, eps);
    float sumGX = 0;
    for (int64_t i = lane; i < d; i += 32)
      sumGX += ld(g, i) * ld(w, i) * ld(head, i) * rstd;
    const float meanGX = warpSum(sumGX) / static_cast<float>(d);
    for (int64_t i = lane; i < d; i += 32)
      st(dx, s * d + i, rstd * (ld(g, i) * ld(w, i) - ld(head, i) * rstd * meanGX));
    if (lane == 0)
      rstds[s] = rstd;
  }
}
#undef WARP_STRIDE

/// The term of a qk_norm weight's gradient at (n, i): dy·x·rstd of the n-th query head
/// (of the rows in order, then their heads), or with `keys` of the n-th key.
template <typename T> struct QkNormGradTerm {
  const T *dy, *x;
  const float *rstds;
  QkvLayout layout;
  bool keys;
  __device__ void operator()(int64_t n, int64_t i, float *acc) const {
    const int64_t s = layout.slot(n, keys);
    acc[0] += ld(dy, s * layout.d + i) * ld(x, s * layout.d + i) * rstds[s];
  }
};

/// The heads of `rows` rows of a fused QKV.
inline int64_t qkvSlots(int64_t rows, const QkvLayout &layout) { return rows * layout.slots(); }
/// The bytes of a rstd per head, rounded up as scratch is cut.
inline size_t qkNormRstdBytes(int64_t slots) {
  return (sizeof(float) * static_cast<size_t>(std::max<int64_t>(slots, 1)) + 255) / 256 * 256;
}
/// The f32 scratch qk_norm's gradient takes: a rstd per head, then the partials of the
/// larger of its two column sums (the chunks do not grow with the rows everywhere).
inline size_t qkNormGradScratchBytes(int64_t rows, const QkvLayout &layout) {
  return qkNormRstdBytes(qkvSlots(rows, layout)) +
         std::max(columnSumScratchBytes(1, rows * layout.heads, layout.d),
                  columnSumScratchBytes(1, rows * layout.kv, layout.d));
}

template <typename T>
void launchQkNorm(const T *x, const T *wq, const T *wk, T *out, int64_t rows,
                  const QkvLayout &layout, float eps, cudaStream_t stream) {
  const int64_t slots = qkvSlots(rows, layout);
  qkNormKernel<<<blocksFor(32 * slots), kThreads, 0, stream>>>(x, wq, wk, out, slots, layout.d,
                                                               layout.perGroup(), eps);
}

/// dx, and dwq and dwk (added with `accumulate`), through `scratch` of
/// qkNormGradScratchBytes; the weights' sums one after the other in the same partials.
template <typename T, typename Out>
void launchQkNormGrad(const T *dy, const T *x, const T *wq, const T *wk, T *dx, Out *dwq, Out *dwk,
                      int64_t rows, const QkvLayout &layout, float eps, bool accumulate,
                      float *scratch, cudaStream_t stream) {
  const int64_t slots = qkvSlots(rows, layout);
  qkNormGradKernel<<<blocksFor(32 * slots), kThreads, 0, stream>>>(
      dy, x, wq, wk, dx, scratch, slots, layout.d, layout.perGroup(), eps);
  float *partials = scratch + qkNormRstdBytes(slots) / sizeof(float);
  launchColumnSums<1>(QkNormGradTerm<T>{dy, x, scratch, layout, false}, rows * layout.heads,
                      layout.d, partials, dwq, static_cast<Out *>(nullptr), accumulate, stream);
  launchColumnSums<1>(QkNormGradTerm<T>{dy, x, scratch, layout, true}, rows * layout.kv, layout.d,
                      partials, dwk, static_cast<Out *>(nullptr), accumulate, stream);
}

template <typename T>
void launchLayerNorm(const T *x, const T *w, const T *b, T *out, int64_t rows, int64_t h, float eps,
                     cudaStream_t stream) {
  if (!launchRows(rows, h, [&](auto q, dim3 grid, dim3 block, RowTeam team) {
        layerNormRowsKernel<decltype(q)::value>
            <<<grid, block, 0, stream>>>(x, w, b, out, rows, eps, team, quadsAligned(x, w, b, out));
      }))
    layerNormBlockKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, b, out, h,
                                                                               eps);
}

/// dx, and dw = Σ over rows of dy·x̂ and db = Σ dy (each added with `accumulate`): by rows
/// held in registers, else a block per row (keeping the rows' moments) and then the
/// column sums; `scratch` holds normGradColumnBytes(2, rows, h).
template <typename T, typename Out>
void launchLayerNormGrad(const T *dy, const T *x, const T *w, const T *residual, T *dx,
                         float2 *moments, Out *dw, Out *db, int64_t rows, int64_t h, float eps,
                         float *scratch, bool accumulate, cudaStream_t stream) {
  if (launchNormGradRows(dy, x, w, residual, dx, LayerNormRowGrad{eps}, dw, db, rows, h, scratch,
                         accumulate, stream))
    return;
  if (rows > 0)
    layerNormGradBlockKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        dy, x, w, residual, dx, moments, h, eps);
  launchColumnSums<2>(LayerNormGradTerms<T>{dy, x, moments, h}, rows, h, scratch, dw, db,
                      accumulate, stream);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_NORMS_CUH
