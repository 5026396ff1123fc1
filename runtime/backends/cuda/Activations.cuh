// Elementwise kernels: fill, type conversion, add, bias add and its gradient, the
// activations of core/SharedMath.h (GELU, SiLU, SwiGLU's gating) and their gradients, and
// the f32 accumulation of parameter gradients.
#ifndef MT_RUNTIME_BACKENDS_CUDA_ACTIVATIONS_CUH
#define MT_RUNTIME_BACKENDS_CUDA_ACTIVATIONS_CUH

#include "backends/cuda/ColumnSums.cuh"
#include "backends/cuda/Common.cuh"
#include "core/SharedMath.h"

namespace mt {
namespace {

/// Writes out[0, n) = value.
template <typename O> __global__ void fillKernel(O *out, int64_t n, float value) {
  GRID_STRIDE(i, n) st(out, i, value);
}

/// The loss seed: value times the step's loss scale (in double, rounded once to float, as
/// the host would compute it).
template <typename O>
__global__ void lossSeedKernel(O *out, int64_t n, double value, const StepCounters *c) {
  const float seed = static_cast<float>(__dmul_rn(value, c->lossScale));
  GRID_STRIDE(i, n) st(out, i, seed);
}

/// Reads in (type A), writes out (type B): one rounding to B.
template <typename A, typename B> __global__ void convertKernel(B *out, const A *in, int64_t n) {
  GRID_STRIDE(i, n) st(out, i, ld(in, i));
}

/// Reads a and b, writes out = a + b.
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

/// An activation of core/SharedMath.h (Gelu, Silu), in f32.
template <typename F, typename T>
__global__ void activationKernel(F f, const T *x, T *out, int64_t n) {
  GRID_STRIDE(i, n) st(out, i, f.value(ld(x, i)));
}

/// dx = dy · the activation's derivative at x, in f32.
template <typename F, typename T>
__global__ void activationGradKernel(F f, const T *dy, const T *x, T *dx, int64_t n) {
  GRID_STRIDE(i, n) st(dx, i, ld(dy, i) * f.derivative(ld(x, i)));
}

/// out = silu(gate)·up, in f32.
template <typename T>
__global__ void swigluKernel(const T *gate, const T *up, T *out, int64_t n) {
  GRID_STRIDE(i, n) st(out, i, Swiglu::value(ld(gate, i), ld(up, i)));
}

/// dgate = dy·up·silu'(gate), dup = dy·silu(gate), in f32.
template <typename T>
__global__ void swigluGradKernel(const T *dy, const T *gate, const T *up, T *dgate, T *dup,
                                 int64_t n) {
  GRID_STRIDE(i, n) {
    const float g = ld(dy, i), a = ld(gate, i);
    st(dgate, i, Swiglu::gateGrad(g, a, ld(up, i)));
    st(dup, i, Swiglu::upGrad(g, a));
  }
}

/// The fused QKV [rows of S positions, kv groups of (perGroup + 2) heads of d]: one
/// thread per pair of a head; query and key pairs turned by position, value pairs copied.
template <typename T>
__global__ void rotaryKernel(const T *qkv, T *out, int64_t pairs, int64_t s, QkvLayout l, Rope rope,
                             SequenceMap positions) {
  GRID_STRIDE(t, pairs) {
    const int64_t d = l.d, perGroup = l.perGroup(), half = d / 2;
    const int64_t i = t % half, head = t / half; // head of all rows' heads
    const int64_t j = head % (perGroup + 2), row = head / ((perGroup + 2) * l.kv);
    const int64_t at = head * d + i;
    const float a = ld(qkv, at), b = ld(qkv, at + half);
    if (Rope::turns(j, perGroup)) {
      float outA, outB;
      Rope::turn(a, b, rope.angle(positions(row % s), rope.frequency(i, d)), outA, outB);
      st(out, at, outA);
      st(out, at + half, outB);
    } else {
      st(out, at, a);
      st(out, at + half, b);
    }
  }
}

/// The term of a bias gradient at (r, j): dy.
template <typename T> struct BiasGradTerm {
  const T *dy;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t j, float *acc) const {
    acc[0] += ld(dy, r * cols + j);
  }
};

template <typename O> void launchFill(O *out, int64_t n, float value, cudaStream_t stream) {
  fillKernel<<<blocksFor(n), kThreads, 0, stream>>>(out, n, value);
}

template <typename O>
void launchLossSeed(O *out, int64_t n, double value, const StepCounters *c,
                    cudaStream_t stream) {
  lossSeedKernel<<<blocksFor(n), kThreads, 0, stream>>>(out, n, value, c);
}

template <typename A, typename B>
void launchConvert(B *out, const A *in, int64_t n, cudaStream_t stream) {
  convertKernel<<<blocksFor(n), kThreads, 0, stream>>>(out, in, n);
}

template <typename T>
void launchAdd(const T *a, const T *b, T *out, int64_t n, cudaStream_t stream) {
  addKernel<<<blocksFor(n), kThreads, 0, stream>>>(a, b, out, n);
}

template <typename X, typename T>
void launchBiasAdd(const X *x, const T *bias, T *out, int64_t n, int64_t cols,
                   cudaStream_t stream) {
  biasAddKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, bias, out, n, cols);
}

/// db = the column sums of dy [rows × cols] (db += them with `accumulate`); `partials`
/// holds columnSumScratchBytes(1, rows, cols).
template <typename T, typename Out>
void launchBiasGrad(const T *dy, Out *db, int64_t rows, int64_t cols, float *partials,
                    bool accumulate, cudaStream_t stream) {
  launchColumnSums<1>(BiasGradTerm<T>{dy, cols}, rows, cols, partials, db,
                      static_cast<Out *>(nullptr), accumulate, stream);
}

template <typename T>
void launchAccumulate(const T *g, float *into, int64_t n, cudaStream_t stream) {
  accumulateKernel<<<blocksFor(n), kThreads, 0, stream>>>(g, into, n);
}

template <typename F, typename T>
void launchActivation(F f, const T *x, T *out, int64_t n, cudaStream_t stream) {
  activationKernel<<<blocksFor(n), kThreads, 0, stream>>>(f, x, out, n);
}

template <typename T>
void launchRotary(const T *qkv, T *out, int64_t rows, int64_t s, const QkvLayout &layout,
                  const Rope &rope, const SequenceMap &positions, cudaStream_t stream) {
  const int64_t pairs = rows * layout.width() / 2;
  rotaryKernel<<<blocksFor(pairs), kThreads, 0, stream>>>(qkv, out, pairs, s, layout, rope,
                                                          positions);
}

template <typename T>
void launchSwiglu(const T *gate, const T *up, T *out, int64_t n, cudaStream_t stream) {
  swigluKernel<<<blocksFor(n), kThreads, 0, stream>>>(gate, up, out, n);
}

template <typename T>
void launchSwigluGrad(const T *dy, const T *gate, const T *up, T *dgate, T *dup, int64_t n,
                      cudaStream_t stream) {
  swigluGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(dy, gate, up, dgate, dup, n);
}

template <typename F, typename T>
void launchActivationGrad(F f, const T *dy, const T *x, T *dx, int64_t n, cudaStream_t stream) {
  activationGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(f, dy, x, dx, n);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_ACTIVATIONS_CUH
