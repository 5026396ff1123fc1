// What every CUDA kernel family shares: the checked call, element access (storage in
// T, arithmetic in float), the warp and block reductions, the launch shape of
// grid-stride loops, and the dispatch on a storage type. Included only by
// CudaBackend.cu, one translation unit.
#ifndef MT_RUNTIME_BACKENDS_CUDA_COMMON_CUH
#define MT_RUNTIME_BACKENDS_CUDA_COMMON_CUH

#include "backends/Backend.h"
#include "backends/cuda/Errors.h"
#include "core/DType.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace mt {
namespace {

using plan::DType;
using plan::Opcode;

/// The checked call: a CUDA or cuBLAS failure throws, naming what was being done, the
/// library's reason, and the file and line of the call (the caller's, through the
/// default arguments). The Backend's methods turn it into a Status at the interface.
/// The constructor's own default arguments take the call site: nvcc's front end gives a
/// braced `CallSite{__builtin_FILE(), ...}` default argument the declaration's line
/// instead, so every failure named this file.
struct CallSite {
  const char *file;
  int line;
  CallSite(const char *file = __builtin_FILE(), int line = __builtin_LINE())
      : file(file), line(line) {}
};
#define MT_CALL_SITE CallSite()

[[noreturn]] inline void fail(const std::string &reason, const char *what, CallSite at) {
  const char *file = at.file;
  for (const char *c = at.file; *c; ++c)
    if (*c == '/')
      file = c + 1;
  throw std::runtime_error(
      cat("cuda backend: ", what, ": ", reason, " (", file, ":", at.line, ")"));
}

inline void check(cudaError_t code, const char *what, CallSite at = MT_CALL_SITE) {
  if (handled(code) != cudaSuccess)
    fail(cudaGetErrorString(code), what, at);
}

inline void check(cublasStatus_t code, const char *what, CallSite at = MT_CALL_SITE) {
  if (code != CUBLAS_STATUS_SUCCESS)
    fail(cat("cuBLAS status ", static_cast<int>(code)), what, at);
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
/// v as T holds it: what a kernel that stores v and another that loads it see.
template <typename T> __device__ __forceinline__ float roundTo(float v) {
  return static_cast<float>(static_cast<T>(v));
}

/// Four consecutive elements as one access (8 bytes in 16 bits, 16 in f32, 4 of a mask):
/// what a bandwidth-bound kernel's thread moves at once. A tensor's quads start at its
/// first element; where its pointer is not aligned to them, or at a last quad of fewer
/// than four, the elements are accessed one by one.
template <typename T> struct alignas(4 * sizeof(T)) Quad { T v[4]; };
template <typename T> __host__ __device__ inline bool quadAligned(const T *p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Quad<T>) == 0;
}
/// Whether every pointer given (null ones aside) is aligned for quad accesses.
template <typename... P> __host__ __device__ bool quadsAligned(const P *...p) {
  return ((!p || quadAligned(p)) && ...);
}
__host__ __device__ inline int64_t quadsOf(int64_t n) { return (n + 3) / 4; }
/// How many of the quad at element i (a multiple of 4) of n elements there are.
__device__ __forceinline__ int quadCount(int64_t n, int64_t i) {
  return n - i < 4 ? static_cast<int>(n - i) : 4;
}
/// f(k) for k in [0, count), count ≤ 4, each k a constant once unrolled: a quad's arrays
/// are indexed only by constants, so they stay in registers (an index the compiler cannot
/// resolve puts the whole array in local memory, several times slower).
template <typename F> __device__ __forceinline__ void forQuad(int count, F &&f) {
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (k < count)
      f(k);
}
/// Elements [i, i + count) into v (as floats, or as bytes for a mask): one access where
/// `vector` (every pointer the kernel reads or writes by quads is aligned) and count is 4.
template <typename T, typename V>
__device__ __forceinline__ void loadQuad(const T *p, int64_t i, int count, bool vector, V (&v)[4]) {
  if (vector && count == 4) {
    const Quad<T> q = *reinterpret_cast<const Quad<T> *>(p + i);
    forQuad(4, [&](int k) { v[k] = static_cast<V>(q.v[k]); });
  } else {
    forQuad(count, [&](int k) { v[k] = static_cast<V>(p[i + k]); });
  }
}
template <typename T, typename V>
__device__ __forceinline__ void storeQuad(T *p, int64_t i, int count, bool vector,
                                          const V (&v)[4]) {
  if (vector && count == 4) {
    Quad<T> q;
    forQuad(4, [&](int k) { q.v[k] = static_cast<T>(v[k]); });
    *reinterpret_cast<Quad<T> *>(p + i) = q;
  } else {
    forQuad(count, [&](int k) { p[i + k] = static_cast<T>(v[k]); });
  }
}

__device__ __forceinline__ int64_t indexAt(const void *ids, bool wide, int64_t i) {
  return wide ? static_cast<const int64_t *>(ids)[i] : static_cast<const int32_t *>(ids)[i];
}

/// Reduces v over the 32 lanes of a warp with `op`; every lane gets the result.
template <typename Op> __device__ __forceinline__ float warpReduce(float v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ __forceinline__ float warpSum(float v) { return warpReduce(v, SumOp{}); }

/// Reduces v over a block of up to 1024 threads with `op`, through 32 floats of shared
/// memory; `identity` stands in for the warps the block lacks. Every thread gets the
/// result.
template <typename Op> __device__ float blockReduce(float v, float *shared, float identity, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpReduce(v, op);
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : identity;
  if (warp == 0)
    v = warpReduce(v, op);
  if (threadIdx.x == 0)
    shared[0] = v;
  __syncthreads();
  return shared[0];
}

/// Sum over a block of up to 1024 threads; every thread gets the result.
__device__ float blockSum(float v, float *shared) { return blockReduce(v, shared, 0.f, SumOp{}); }

/// Maximum over a block of up to 1024 threads; every thread gets the result.
__device__ float blockMax(float v, float *shared) {
  return blockReduce(v, shared, -INFINITY, MaxOp{});
}

/// Which of two values the environment variable `name` holds: 1 for `first`, 2 for
/// `second`, 0 when it is unset or anything else (the backend's MT_CUDA_* switches).
inline int environmentChoice(const char *name, const char *first, const char *second) {
  const char *value = std::getenv(name);
  if (value && std::strcmp(value, first) == 0)
    return 1;
  if (value && std::strcmp(value, second) == 0)
    return 2;
  return 0;
}

/// Where in training the kernels run: the counters of every random draw (each use
/// passes its own RNG stream) and the loss seed's factor. The kernels read them from
/// device memory, written before each program runs, so that a program recorded once (a
/// CUDA graph) replays with each micro-batch's own.
struct StepCounters {
  uint64_t seed;
  uint32_t step, microBatch;
  double lossScale;
};

__global__ void storeCountersKernel(StepCounters *out, StepCounters value) { *out = value; }

constexpr int kThreads = 256;
/// Blocks for a grid-stride loop over n elements: at least one, so an empty tensor
/// launches a grid that does nothing rather than an invalid one.
inline unsigned blocksFor(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t{1} << 20));
}
#define GRID_STRIDE(i, n)                                                                          \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n);           \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

/// `columns` columns of `rows` elements, `fromLd` apart at `from`, to `toLd` apart at `to`:
/// a block a column, its threads along it, so both sides' accesses are coalesced whatever
/// their alignment (cudaMemcpy2D took 6.5 ms for GPT-2's 824 MB of bf16 logits, 8,192
/// columns of 50,257, on an H200: a twentieth of its bandwidth), each thread with four elements in
/// flight. Bits are copied as they are.
template <typename T>
__global__ void copyColumnsKernel(T *__restrict__ to, int64_t toLd, const T *__restrict__ from,
                                  int64_t fromLd, int64_t rows, int64_t columns) {
  const int64_t stride = blockDim.x;
  for (int64_t c = blockIdx.x; c < columns; c += gridDim.x) {
    const T *in = from + c * fromLd;
    T *out = to + c * toLd;
    int64_t i = threadIdx.x;
    for (; i + 3 * stride < rows; i += 4 * stride) {
      const T a = in[i], b = in[i + stride], d = in[i + 2 * stride], e = in[i + 3 * stride];
      out[i] = a;
      out[i + stride] = b;
      out[i + 2 * stride] = d;
      out[i + 3 * stride] = e;
    }
    for (; i < rows; i += stride)
      out[i] = in[i];
  }
}

/// *last = the largest i + 1 with p[i] != value, where it is larger (an integer maximum,
/// the same whatever the order): each thread's, then its warp's, then one atomic a warp.
__global__ void extentNotKernel(const uint8_t *p, int64_t n, uint8_t value,
                                unsigned long long *last) {
  unsigned long long mine = 0;
  GRID_STRIDE(i, n) {
    if (p[i] != value)
      mine = static_cast<unsigned long long>(i) + 1;
  }
  for (int offset = 16; offset > 0; offset >>= 1)
    mine = max(mine, __shfl_xor_sync(0xffffffffu, mine, offset));
  if ((threadIdx.x & 31) == 0 && mine > 0)
    atomicMax(last, mine);
}

inline void launchExtentNot(const uint8_t *p, int64_t n, uint8_t value, unsigned long long *last,
                            cudaStream_t stream) {
  extentNotKernel<<<blocksFor(n), kThreads, 0, stream>>>(p, n, value, last);
}

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

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_COMMON_CUH
