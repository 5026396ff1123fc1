// Sums down the columns of a [rows × cols] matrix (a bias gradient, a norm's weight
// gradient): spread over the whole device in two passes, in an order fixed by the shape
// alone, so that every run gives the same bits. The first pass gives each block 32
// columns and a chunk of rows; its 8 row threads sum strided rows, then the 8 partial
// sums add in order. The second adds each column's chunk sums in chunk order and rounds
// once; where there is one chunk (256 rows or fewer: a norm gradient's blocks' partials),
// the first pass writes the sums itself, as the second would. (One thread per column over
// every row, the simple way, leaves all but a few multiprocessors idle: 768 columns are 3
// blocks.)
#ifndef MT_RUNTIME_BACKENDS_CUDA_COLUMNSUMS_CUH
#define MT_RUNTIME_BACKENDS_CUDA_COLUMNSUMS_CUH

#include "backends/cuda/Common.cuh"
#include "backends/cuda/RowShapes.h"

#include <algorithm>

namespace mt {
namespace {

constexpr int kSumColumns = 32; // columns per block: a warp reads 32 adjacent elements
constexpr int kSumRows = 8;     // row threads per block

/// out_k[j] = sum, or += it with `accumulate`, rounded once to T: the column sums' last
/// step, after 0 + the chunks' sums in chunk order.
template <typename T>
__device__ __forceinline__ void finishColumn(T *out, int64_t j, float sum, bool accumulate) {
  st(out, j, accumulate ? ld(out, j) + sum : sum);
}

/// First pass: partials[(chunk · K + k) · cols + j] = Σ over the chunk's rows r of the
/// k-th value term(r, j) adds; with `Finish` (one chunk), out_k[j] from it instead.
template <int K, bool Finish, typename Term, typename T>
__global__ void columnPartialsKernel(Term term, int64_t rows, int64_t cols, int64_t chunkRows,
                                     float *partials, T *out0, T *out1, bool accumulate) {
  __shared__ float shared[K][kSumRows][kSumColumns + 1];
  const int64_t j = blockIdx.x * static_cast<int64_t>(kSumColumns) + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * chunkRows;
  const int64_t end = begin + chunkRows < rows ? begin + chunkRows : rows;
  float acc[K] = {};
  if (j < cols)
    for (int64_t r = begin + threadIdx.y; r < end; r += kSumRows)
      term(r, j, acc);
  for (int k = 0; k < K; ++k)
    shared[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && j < cols)
    for (int k = 0; k < K; ++k) {
      float sum = 0;
      for (int y = 0; y < kSumRows; ++y)
        sum += shared[k][y][threadIdx.x];
      if constexpr (Finish)
        finishColumn(k == 0 ? out0 : out1, j, 0.f + sum, accumulate);
      else
        partials[(chunk * K + k) * cols + j] = sum;
    }
}

/// Second pass: out_k[j] = Σ over chunks, in order, rounded once to T; with
/// `accumulate`, that sum added to out_k[j] (a parameter's f32 gradient).
template <int K, typename T>
__global__ void columnFinishKernel(const float *partials, int64_t chunks, int64_t cols,
                                   T *out0, T *out1, bool accumulate) {
  GRID_STRIDE(j, cols) {
    for (int k = 0; k < K; ++k) {
      float sum = 0;
      for (int64_t c = 0; c < chunks; ++c)
        sum += partials[(c * K + k) * cols + j];
      finishColumn(k == 0 ? out0 : out1, j, sum, accumulate);
    }
  }
}

/// out0 (and out1 for K = 2) [cols] = the column sums of term's K values over `rows`, or
/// += them with `accumulate`; `partials` holds columnSumScratchBytes(K, rows, cols).
template <int K, typename Term, typename T>
void launchColumnSums(const Term &term, int64_t rows, int64_t cols, float *partials, T *out0,
                      T *out1, bool accumulate, cudaStream_t stream) {
  if (cols == 0)
    return; // nothing to write, and a grid of no blocks is a launch error
  const int64_t chunks = columnSumChunks(rows);
  const dim3 grid(static_cast<unsigned>((cols + kSumColumns - 1) / kSumColumns),
                  static_cast<unsigned>(chunks));
  if (chunks == 1) {
    columnPartialsKernel<K, true><<<grid, dim3(kSumColumns, kSumRows), 0, stream>>>(
        term, rows, cols, columnSumChunkRows(rows), partials, out0, out1, accumulate);
    return;
  }
  columnPartialsKernel<K, false><<<grid, dim3(kSumColumns, kSumRows), 0, stream>>>(
      term, rows, cols, columnSumChunkRows(rows), partials, out0, out1, accumulate);
  columnFinishKernel<K><<<blocksFor(cols), kThreads, 0, stream>>>(partials, chunks, cols, out0,
                                                                   out1, accumulate);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_COLUMNSUMS_CUH
