// Token and position embeddings and their gradients. The token embedding's gradient is
// deterministic: tokens sorted by row with CUB's radix sort, then summed per row in token
// order, so two runs agree to the bit.
#ifndef MT_RUNTIME_BACKENDS_CUDA_EMBEDDING_CUH
#define MT_RUNTIME_BACKENDS_CUDA_EMBEDDING_CUH

#include "backends/cuda/Common.cuh"

#include <cub/device/device_radix_sort.cuh>

namespace mt {
namespace {

/// One block per token: reads its id and the table row, writes the token's output row
/// (zero where another shard holds the row); ids outside [0, vocabulary) are reported
/// through *bad (the first such position).
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

/// Reads x and the table, writes out = x + the table row of each token's position
/// (`first` offsets a sequence-parallel shard's positions).
template <typename T>
__global__ void positionEmbeddingKernel(const T *x, const T *table, T *out, int64_t n, int64_t s,
                                        int64_t h, SequenceMap positions) {
  GRID_STRIDE(i, n) {
    const int64_t p = (i / h) % s, j = i % h;
    st(out, i, ld(x, i) + ld(table, positions(p) * h + j));
  }
}

/// out[position(p), j] = Σ_b grad[b, p, j]; other rows zero. One thread per output element.
template <typename T>
__global__ void positionEmbeddingGradKernel(const T *grad, T *out, int64_t positions, int64_t b,
                                            int64_t s, int64_t h, SequenceMap map) {
  GRID_STRIDE(i, positions * h) {
    const int64_t p = map.rowOf(i / h), j = i % h;
    float acc = 0;
    if (p >= 0 && p < s)
      for (int64_t k = 0; k < b; ++k)
        acc += ld(grad, (k * s + p) * h + j);
    st(out, i, acc);
  }
}

template <typename T>
void launchEmbedding(const T *table, const void *ids, bool wide, T *out, int64_t tokens,
                     int64_t rows, int64_t h, int64_t first, int64_t vocabulary,
                     unsigned long long *bad, cudaStream_t stream) {
  embeddingKernel<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(
      table, ids, wide, out, rows, h, first, vocabulary, bad);
}

/// The bits a sort key needs to tell 0..rows apart (`rows` marks another shard's token).
inline int embeddingKeyBits(int64_t rows) {
  int endBit = 1;
  while (endBit < 32 && (uint64_t{1} << endBit) <= static_cast<uint64_t>(rows))
    ++endBit;
  return endBit;
}

/// The temporary bytes CUB's sort of `tokens` key/value pairs needs.
inline size_t embeddingSortBytes(int64_t tokens, int endBit, cudaStream_t stream) {
  size_t sortBytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, sortBytes, static_cast<uint32_t *>(nullptr),
                                        static_cast<uint32_t *>(nullptr),
                                        static_cast<uint32_t *>(nullptr),
                                        static_cast<uint32_t *>(nullptr), tokens, 0, endBit,
                                        stream),
        "sizing the embedding gradient's sort");
  return sortBytes;
}

inline void launchEmbeddingGradKeys(const void *ids, bool wide, int64_t tokens, int64_t rows,
                                    int64_t first, uint32_t *keys, uint32_t *order,
                                    cudaStream_t stream) {
  embeddingGradKeysKernel<<<blocksFor(tokens), kThreads, 0, stream>>>(ids, wide, tokens, rows,
                                                                      first, keys, order);
}

/// Sorts (keys, order) by key, stably, into (sortedKeys, sortedOrder).
inline void sortEmbeddingKeys(void *sortScratch, size_t sortBytes, const uint32_t *keys,
                              uint32_t *sortedKeys, const uint32_t *order,
                              uint32_t *sortedOrder, int64_t tokens, int endBit,
                              cudaStream_t stream) {
  check(cub::DeviceRadixSort::SortPairs(sortScratch, sortBytes, keys, sortedKeys, order,
                                        sortedOrder, tokens, 0, endBit, stream),
        "sorting tokens by embedding row");
}

template <typename T>
void launchEmbeddingGradRows(const T *grad, const uint32_t *sortedKeys,
                             const uint32_t *sortedOrder, int64_t tokens, int64_t rows,
                             int64_t h, T *out, cudaStream_t stream) {
  embeddingGradRowsKernel<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(
      grad, sortedKeys, sortedOrder, tokens, rows, h, out);
}

template <typename T>
void launchPositionEmbedding(const T *x, const T *table, T *out, int64_t n, int64_t s, int64_t h,
                             const SequenceMap &positions, cudaStream_t stream) {
  positionEmbeddingKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, table, out, n, s, h, positions);
}

template <typename T>
void launchPositionEmbeddingGrad(const T *grad, T *out, int64_t positions, int64_t b, int64_t s,
                                 int64_t h, const SequenceMap &map, cudaStream_t stream) {
  positionEmbeddingGradKernel<<<blocksFor(positions * h), kThreads, 0, stream>>>(
      grad, out, positions, b, s, h, map);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_EMBEDDING_CUH
