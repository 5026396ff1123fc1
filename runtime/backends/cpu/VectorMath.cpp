#include "backends/cpu/VectorMath.h"

#include <sleef.h>

#include <algorithm>

namespace mt::cpu {
namespace avx { // VectorMathAvx.cpp: the elements done, a multiple of 8
int64_t erfOf(const float *x, float *y, int64_t n);
int64_t expOf(const float *x, float *y, int64_t n);
} // namespace avx
namespace {

// SLEEF's deterministic functions by width: AVX where the machine has it
// (VectorMathAvx.cpp), else SSE2 (every x86-64 has it), the last one to three elements
// through one SSE2 vector padded with zeros (the scalar function is ten times slower a
// value); elsewhere the scalar one. All give the same bits.
#if defined(__x86_64__)
// Read at load time, so the CPU's features are read first (__builtin_cpu_init).
const bool kAvx = (__builtin_cpu_init(), __builtin_cpu_supports("avx"));
#define MT_SLEEF(name)                                                                             \
  int64_t i = kAvx ? avx::name##Of(x, y, n) : 0;                                                   \
  for (; i + 4 <= n; i += 4)                                                                       \
    _mm_storeu_ps(y + i, Sleef_cinz_##name##f4_u10sse2(_mm_loadu_ps(x + i)));                      \
  if (i < n) {                                                                                     \
    float in[4] = {}, out[4];                                                                      \
    std::copy(x + i, x + n, in);                                                                   \
    _mm_storeu_ps(out, Sleef_cinz_##name##f4_u10sse2(_mm_loadu_ps(in)));                           \
    std::copy(out, out + (n - i), y + i);                                                          \
  }
#else
#define MT_SLEEF(name)                                                                         \
  for (int64_t i = 0; i < n; ++i)                                                              \
    y[i] = Sleef_cinz_##name##f1_u10purec(x[i]);
#endif

/// Blocks of a few hundred elements: the transcendental runs over a block at a time.
constexpr int64_t kBlock = 256;

/// `body(begin, count, t)` for each block of n, with t a block of scratch.
template <typename Body> void blocks(int64_t n, Body body) {
  float t[kBlock];
  for (int64_t b = 0; b < n; b += kBlock)
    body(b, std::min(kBlock, n - b), t);
}

// The constants of core/SharedMath.h, rounded to f32 as its templates round them.
const float kHalfSqrt2 = static_cast<float>(0.70710678118654752440);   // 1/√2
const float kSqrt2OverPi = static_cast<float>(0.79788456080286535588); // √(2/π)
const float kCubic = static_cast<float>(0.044715);
const float kInvSqrt2Pi = static_cast<float>(0.39894228040143267794); // 1/√(2π)

} // namespace

void erfOf(const float *x, float *y, int64_t n) { MT_SLEEF(erf) }
void expOf(const float *x, float *y, int64_t n) { MT_SLEEF(exp) }
#undef MT_SLEEF

namespace {
/// −2u = −2·√(2/π)·(x + 0.044715·x³) over a block: tanh-GELU is x·σ(2u) = x/(1 + exp(−2u)),
/// 0.5·x·(1 + tanh(u)) written with one exp, which costs a quarter of SLEEF's tanh here.
void minusTwiceU(const float *x, float *t, int64_t m) {
  for (int64_t i = 0; i < m; ++i)
    t[i] = -2.0f * (kSqrt2OverPi * (x[i] + kCubic * x[i] * x[i] * x[i]));
}
} // namespace

void values(const Gelu &f, const float *x, float *y, int64_t n) {
  blocks(n, [&](int64_t b, int64_t m, float *t) {
    const float *v = x + b;
    if (f.exact) {
      for (int64_t i = 0; i < m; ++i)
        t[i] = v[i] * kHalfSqrt2;
      erfOf(t, t, m);
      for (int64_t i = 0; i < m; ++i)
        y[b + i] = 0.5f * v[i] * (1.0f + t[i]);
      return;
    }
    minusTwiceU(v, t, m);
    expOf(t, t, m);
    for (int64_t i = 0; i < m; ++i)
      y[b + i] = v[i] / (1.0f + t[i]);
  });
}

void gradients(const Gelu &f, const float *dy, const float *x, float *dx, int64_t n) {
  blocks(n, [&](int64_t b, int64_t m, float *t) {
    const float *v = x + b;
    if (f.exact) {
      float e[kBlock];
      for (int64_t i = 0; i < m; ++i) {
        t[i] = v[i] * kHalfSqrt2;
        e[i] = -0.5f * v[i] * v[i];
      }
      erfOf(t, t, m);
      expOf(e, e, m);
      for (int64_t i = 0; i < m; ++i) {
        const float cdf = 0.5f * (1.0f + t[i]);
        dx[b + i] = dy[b + i] * (cdf + v[i] * e[i] * kInvSqrt2Pi);
      }
      return;
    }
    minusTwiceU(v, t, m);
    expOf(t, t, m);
    for (int64_t i = 0; i < m; ++i) {
      // s = σ(2u) and s·(1 − s) = 1/(2 + e + 1/e): a sum of positive terms, without
      // 1 − s's cancellation, and 0 where e is 0 or infinite, as it should be.
      const float e = t[i], s = 1.0f / (1.0f + e), spread = 1.0f / (2.0f + e + 1.0f / e);
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v[i] * v[i]);
      dx[b + i] = dy[b + i] * (s + 2.0f * v[i] * spread * du);
    }
  });
}

namespace {
/// σ(x) over a block, as SharedMath's Silu computes it: 1 / (1 + exp(−x)).
void sigmoids(const float *x, float *s, int64_t m) {
  for (int64_t i = 0; i < m; ++i)
    s[i] = -x[i];
  expOf(s, s, m);
}
} // namespace

void values(const Silu &, const float *x, float *y, int64_t n) {
  blocks(n, [&](int64_t b, int64_t m, float *t) {
    sigmoids(x + b, t, m); // t = exp(−x)
    for (int64_t i = 0; i < m; ++i)
      y[b + i] = x[b + i] / (1.0f + t[i]);
  });
}

void gradients(const Silu &, const float *dy, const float *x, float *dx, int64_t n) {
  blocks(n, [&](int64_t b, int64_t m, float *t) {
    sigmoids(x + b, t, m);
    for (int64_t i = 0; i < m; ++i) {
      const float s = 1.0f / (1.0f + t[i]);
      dx[b + i] = dy[b + i] * (s * (1.0f + x[b + i] * (1.0f - s)));
    }
  });
}

void swiglu(const float *gate, const float *up, float *out, int64_t n) {
  blocks(n, [&](int64_t b, int64_t m, float *t) {
    sigmoids(gate + b, t, m);
    for (int64_t i = 0; i < m; ++i)
      out[b + i] = gate[b + i] / (1.0f + t[i]) * up[b + i];
  });
}

void swigluGrad(const float *dy, const float *gate, const float *up, float *dgate, float *dup,
                int64_t n) {
  blocks(n, [&](int64_t b, int64_t m, float *t) {
    sigmoids(gate + b, t, m);
    for (int64_t i = 0; i < m; ++i) {
      const float g = gate[b + i], s = 1.0f / (1.0f + t[i]);
      const float dyi = dy[b + i], upi = up[b + i];
      dgate[b + i] = dyi * upi * (s * (1.0f + g * (1.0f - s)));
      dup[b + i] = dyi * (g / (1.0f + t[i]));
    }
  });
}

} // namespace mt::cpu
