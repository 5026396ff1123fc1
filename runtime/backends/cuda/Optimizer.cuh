// The optimizer's kernels, multi-tensor: every parameter's AdamW update in one launch,
// and every gradient's sum of squares (for the global norm) in one more, both in f64
// arithmetic over f32 storage. Each tensor is cut into chunks of kChunkElements; a table
// of chunks (pointers, length, and AdamW's weight decay), made on the host, gives each
// block its chunk, as PyTorch's multi_tensor_apply does with lists of pointers.
#ifndef MT_RUNTIME_BACKENDS_CUDA_OPTIMIZER_CUH
#define MT_RUNTIME_BACKENDS_CUDA_OPTIMIZER_CUH

#include "backends/cuda/Common.cuh"

#include <vector>

namespace mt {
namespace {

/// Elements per block: enough work per block to hide its start, few enough blocks per
/// tensor that small tensors (biases, norms) do not leave the device idle.
constexpr int64_t kChunkElements = int64_t{1} << 16;

/// A run of one parameter's elements: its master weights, gradient and moments, and
/// where not null, the weights' 16-bit copy (of the launch's type).
struct AdamWChunk {
  float *w;
  const float *g;
  float *m, *v;
  void *copy;
  int64_t n;
  double weightDecay;
};

/// A run of one gradient's elements.
struct SquaresChunk {
  const float *x;
  int64_t n;
};

/// A tensor of n elements as chunks, each made by `make(offset, length)`.
template <typename Chunk, typename F>
void appendChunks(std::vector<Chunk> &chunks, int64_t n, F &&make) {
  for (int64_t at = 0; at < n; at += kChunkElements)
    chunks.push_back(make(at, std::min(kChunkElements, n - at)));
}

/// Block b updates chunk b in place: the moments and the decoupled weight decay in one
/// pass (AdamWStep::update, the CPU backend's arithmetic, with the chunk's decay), and
/// writes the new weights rounded to C into the chunk's copy, if it has one (as the
/// conversion would, without reading the weights again). A thread takes four
/// consecutive elements, each array's four in one access where the chunk's arrays are
/// all aligned to them (a parameter may start anywhere in the store).
template <typename C>
__global__ void adamwKernel(const AdamWChunk *chunks, AdamWStep a, double r1, double r2) {
  const AdamWChunk c = chunks[blockIdx.x];
  a.weightDecay = c.weightDecay;
  // Arrays that never overlap: the next quad's loads may go ahead of this one's stores.
  float *__restrict__ weights = c.w, *__restrict__ first = c.m, *__restrict__ second = c.v;
  const float *__restrict__ grads = c.g;
  C *__restrict__ copy = static_cast<C *>(c.copy);
  const bool vector = quadsAligned(weights, grads, first, second, copy);
#pragma unroll 2
  for (int64_t i = 4 * threadIdx.x; i < c.n; i += 4 * blockDim.x) {
    const int count = quadCount(c.n, i);
    float w[4] = {}, g[4] = {}, m[4] = {}, v[4] = {};
    loadQuad(weights, i, count, vector, w);
    loadQuad(grads, i, count, vector, g);
    loadQuad(first, i, count, vector, m);
    loadQuad(second, i, count, vector, v);
    forQuad(count, [&](int k) {
      double mk = m[k], vk = v[k];
      w[k] = static_cast<float>(a.update(w[k], g[k], mk, vk, r1, r2));
      m[k] = static_cast<float>(mk);
      v[k] = static_cast<float>(vk);
    });
    storeQuad(weights, i, count, vector, w);
    storeQuad(first, i, count, vector, m);
    storeQuad(second, i, count, vector, v);
    if (copy)
      storeQuad(copy, i, count, vector, w);
  }
}

/// Block b writes chunk b's Σ x² (f64), summed by a tree over the block's kThreads
/// threads; the host adds the partials in chunk order.
__global__ void sumOfSquaresKernel(const SquaresChunk *chunks, double *partial) {
  __shared__ double shared[kThreads];
  const SquaresChunk c = chunks[blockIdx.x];
  const bool vector = quadsAligned(c.x);
  double acc = 0;
  // Unrolled: several quads' loads in flight at once, added in the same order.
#pragma unroll 4
  for (int64_t i = 4 * threadIdx.x; i < c.n; i += 4 * blockDim.x) {
    const int count = quadCount(c.n, i);
    float x[4] = {};
    loadQuad(c.x, i, count, vector, x);
    forQuad(count, [&](int k) { acc += static_cast<double>(x[k]) * x[k]; });
  }
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

/// The chunks' copies are of type `copies` (f32 where no chunk has one).
inline void launchAdamw(const AdamWChunk *chunks, size_t count, const AdamWStep &a, DType copies,
                        cudaStream_t stream) {
  withStorage(copies, [&](auto tag) {
    adamwKernel<decltype(tag)><<<static_cast<unsigned>(count), kThreads, 0, stream>>>(
        chunks, a, a.inverseCorrection1(), a.inverseCorrection2());
  });
}

inline void launchSumOfSquares(const SquaresChunk *chunks, size_t count, double *partial,
                               cudaStream_t stream) {
  sumOfSquaresKernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(chunks, partial);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_OPTIMIZER_CUH
