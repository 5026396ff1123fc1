// The CPU backend's elementwise transcendental math in f32, vectorised: erf and exp
// of whole blocks through SLEEF's deterministic functions (the `cinz` ones: no fused
// multiply-add, so the scalar, SSE2 and AVX variants return the same bits). A result
// therefore depends neither on the machine nor on where a block or a row is cut, and the
// CPU backend stays bit-exact from run to run and across layouts. f64 keeps the C
// library's functions (the precision the references are checked in).
#ifndef MT_RUNTIME_BACKENDS_CPU_VECTORMATH_H
#define MT_RUNTIME_BACKENDS_CPU_VECTORMATH_H

#include "core/SharedMath.h"

#include <cstdint>

namespace mt::cpu {

/// y[i] = erf(x[i]), exp(x[i]) for i < n; y may be x.
void erfOf(const float *x, float *y, int64_t n);
void expOf(const float *x, float *y, int64_t n);

/// The activations of core/SharedMath.h over n floats, with the same formulas in the
/// same order of operations, their erf and exp SLEEF's; but tanh-approximated GELU as its
/// algebraic equal x·σ(2u) = x/(1 + exp(−2u)) (u its tanh's argument), one exp instead of
/// a tanh, four times as fast (within 2e-6 of the tanh form: VectorMathTest).
void values(const Gelu &f, const float *x, float *y, int64_t n);
void values(const Silu &f, const float *x, float *y, int64_t n);
/// dx[i] = dy[i] · f'(x[i]).
void gradients(const Gelu &f, const float *dy, const float *x, float *dx, int64_t n);
void gradients(const Silu &f, const float *dy, const float *x, float *dx, int64_t n);
/// SwiGLU (SharedMath.h: Swiglu): out = silu(gate)·up; its gradients.
void swiglu(const float *gate, const float *up, float *out, int64_t n);
void swigluGrad(const float *dy, const float *gate, const float *up, float *dgate, float *dup,
                int64_t n);

} // namespace mt::cpu

#endif // MT_RUNTIME_BACKENDS_CPU_VECTORMATH_H
