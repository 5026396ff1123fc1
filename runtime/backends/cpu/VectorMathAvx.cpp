// SLEEF's AVX variants, in a file of their own compiled with -mavx: the rest of the CPU
// backend must run on any x86-64, and VectorMath.cpp calls these only where the machine
// has AVX.
#include <sleef.h>

#include <cstdint>

namespace mt::cpu::avx {

#define MT_SLEEF_AVX(name)                                                                     \
  int64_t name##Of(const float *x, float *y, int64_t n) {                                      \
    int64_t i = 0;                                                                             \
    for (; i + 8 <= n; i += 8)                                                                 \
      _mm256_storeu_ps(y + i, Sleef_cinz_##name##f8_u10avx(_mm256_loadu_ps(x + i)));          \
    return i;                                                                                  \
  }
MT_SLEEF_AVX(erf)
MT_SLEEF_AVX(exp)
#undef MT_SLEEF_AVX

} // namespace mt::cpu::avx
