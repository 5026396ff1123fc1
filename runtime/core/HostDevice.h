// Math the CPU and the CUDA backends share, written once and compiled for both: the
// CPU kernels call it in T (f32 or f64), the CUDA kernels in f32.
#ifndef MT_RUNTIME_CORE_HOSTDEVICE_H
#define MT_RUNTIME_CORE_HOSTDEVICE_H

#include <math.h>

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

namespace mt {

MT_HOST_DEVICE inline float tanhOf(float x) { return tanhf(x); }
MT_HOST_DEVICE inline double tanhOf(double x) { return tanh(x); }
MT_HOST_DEVICE inline float expOf(float x) { return expf(x); }
MT_HOST_DEVICE inline double expOf(double x) { return exp(x); }

// Activations: value(x) and derivative(x), so that dx = dy · derivative(x).

/// GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2 and Megatron compute it:
/// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
struct Gelu {
  template <typename T> MT_HOST_DEVICE static T value(T x) {
    const T c = static_cast<T>(0.79788456080286535588), a = static_cast<T>(0.044715); // √(2/π)
    return T(0.5) * x * (T(1) + tanhOf(c * (x + a * x * x * x)));
  }
  template <typename T> MT_HOST_DEVICE static T derivative(T x) {
    const T c = static_cast<T>(0.79788456080286535588), a = static_cast<T>(0.044715);
    const T t = tanhOf(c * (x + a * x * x * x));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * a * x * x);
  }
};

/// SiLU (swish), x·σ(x) (Elfwing et al. 2018): the gate of LLaMA's SwiGLU. Its
/// derivative is σ(x)·(1 + x·(1 − σ(x))). For finite x far below 0, exp(−x) overflows
/// to infinity and both give 0, as they should.
struct Silu {
  template <typename T> MT_HOST_DEVICE static T value(T x) { return x / (T(1) + expOf(-x)); }
  template <typename T> MT_HOST_DEVICE static T derivative(T x) {
    const T s = T(1) / (T(1) + expOf(-x));
    return s * (T(1) + x * (T(1) - s));
  }
};

} // namespace mt

#endif
