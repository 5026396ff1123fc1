// 16-bit floats in host code: bf16 (8-bit exponent, as f32, 7-bit mantissa) and IEEE
// f16. Conversions round to nearest even, as the GPU's do, so the CPU backend stores
// exactly what a GPU would.
#ifndef MT_RUNTIME_CORE_HALF_H
#define MT_RUNTIME_CORE_HALF_H

#include <cstdint>
#include <cstring>

namespace mt {

inline float bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it a (quiet) NaN
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// GCC and Clang implement _Float16 on x86-64 and AArch64 with correctly rounded
// conversions.
inline float f16ToFloat(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, sizeof v);
  return static_cast<float>(v);
}

inline uint16_t floatToF16(float f) {
  const _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, sizeof h);
  return h;
}

} // namespace mt

#endif
