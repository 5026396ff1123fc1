// Counter-based randomness (Philox4x32-10, Salmon et al. 2011, from Random123): every
// random number is a pure function of (seed, what it is for, global element index), so
// no layout, sharding, recomputation or resume can change a parameter's initial value
// or a dropout mask. Header-only so the CUDA backend computes the same bits.
#ifndef MT_RUNTIME_CORE_RNG_H
#define MT_RUNTIME_CORE_RNG_H

#include "core/SharedMath.h"
#include "core/Tensor.h"

#include <Random123/philox.h>

#include <cmath>
#include <cstdint>
#include <string_view>

namespace mt::rng {

using Philox = r123::Philox4x32;

/// Marks an initialisation counter; a training step never reaches it.
inline constexpr uint32_t kInitStep = 0xFFFFFFFFu;

MT_HOST_DEVICE inline Philox::ctr_type block(uint64_t seed, uint32_t c0, uint32_t c1, uint32_t c2,
                              uint32_t c3) {
  Philox::ctr_type ctr = {{c0, c1, c2, c3}};
  Philox::key_type key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  return Philox()(ctr, key);
}

/// The exact 24-bit uniform in [0, 1) of a 32-bit word (exact in float and double).
MT_HOST_DEVICE inline double uniform24(uint32_t word) { return (word >> 8) * (1.0 / 16777216.0); }

/// The Philox block of dropout element `index` of `stream`: the low 32 bits of index/4
/// count in the first word; the bits above them (tensors of more than 2^34 elements, such
/// as a large model's attention probabilities) go above the stream's 24 bits.
MT_HOST_DEVICE inline Philox::ctr_type dropoutBlock(uint64_t seed, uint32_t step,
                                                    uint32_t microBatch, uint32_t stream,
                                                    uint64_t index) {
  return block(seed, static_cast<uint32_t>(index >> 2),
               stream + (static_cast<uint32_t>(index >> 34) << 24), microBatch, step);
}

/// Whether dropout keeps element `index` of the tensor that `stream` produces in
/// micro-batch `microBatch` of `step`. One Philox block serves four elements.
MT_HOST_DEVICE inline bool dropoutKeeps(uint64_t seed, uint32_t step, uint32_t microBatch,
                                        uint32_t stream, uint64_t index, double rate) {
  const Philox::ctr_type words = dropoutBlock(seed, step, microBatch, stream, index);
  // Chosen by comparisons, not by indexing with a variable, which would put the block
  // in a GPU thread's local memory.
  const uint32_t j = index & 3;
  return uniform24(j == 0 ? words.v[0] : j == 1 ? words.v[1] : j == 2 ? words.v[2] : words.v[3]) >=
         rate;
}

/// dropoutKeeps for the local elements [i, i + count) (count ≤ 4, i a multiple of 4) of
/// a tensor whose local element k is global element shard.global(k): the same decisions,
/// from one Philox block where the four are one block's (always, unsharded), else from
/// each element's own. The GPU's dropout kernels take four elements a thread this way;
/// every index into `keep` and the block is a constant once the loops are unrolled.
MT_HOST_DEVICE inline void dropoutKeepsQuad(uint64_t seed, uint32_t step, uint32_t microBatch,
                                            uint32_t stream, const ShardMap &shard, int64_t i,
                                            int count, double rate, uint8_t (&keep)[4]) {
  const int64_t g = shard.global(i);
  if (rate == 0) {
    for (int k = 0; k < 4; ++k)
      keep[k] = 1;
  } else if (count == 4 && g % 4 == 0 && shard.global(i + 3) == g + 3) { // global() rises
    const Philox::ctr_type words = dropoutBlock(seed, step, microBatch, stream, g);
    for (int k = 0; k < 4; ++k)
      keep[k] = uniform24(words.v[k]) >= rate;
  } else {
    for (int k = 0; k < 4; ++k)
      if (k < count)
        keep[k] = dropoutKeeps(seed, step, microBatch, stream, shard.global(i + k), rate);
  }
}

/// Keys [j, j + count) (count ≤ 4) of a row of attention probabilities whose key j has
/// global mask index `index`: keep[k] = whether dropout keeps key j + k, false where it
/// lies outside the keys the row sees, [first, end). One Philox block serves the four
/// where `index` is a multiple of 4 (their indices are one block's); a quad the row does
/// not see draws nothing. The CUDA backend's keep mask for cuDNN is made so
/// (Attention.cuh).
MT_HOST_DEVICE inline void attentionKeeps(uint64_t seed, uint32_t step, uint32_t microBatch,
                                          uint32_t stream, uint64_t index, int64_t j, int count,
                                          int64_t first, int64_t end, double rate,
                                          bool (&keep)[4]) {
  for (int k = 0; k < 4; ++k)
    keep[k] = false;
  if (j + count <= first || j >= end)
    return;
  const bool block = count == 4 && index % 4 == 0;
  const Philox::ctr_type words =
      block ? dropoutBlock(seed, step, microBatch, stream, index) : Philox::ctr_type{};
  for (int k = 0; k < 4; ++k)
    if (k < count && j + k >= first && j + k < end)
      keep[k] = block ? uniform24(words.v[k]) >= rate
                      : dropoutKeeps(seed, step, microBatch, stream, index + k, rate);
}

/// FNV-1a: the stream of a parameter is its name, so init is independent of order.
inline uint64_t nameHash(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

// Box-Muller's logarithm and sine/cosine, written out so that the host and the device
// compute the same bits: the libraries' log, sin and cos differ by an ulp here and there
// (CUDA's are not correctly rounded), which would now and then change a float weight.
// Only sums, products, quotients and square roots, each rounded once (IEEE 754 makes
// them exact-rounded on both), and no product fused into a sum: nvcc fuses by default,
// so the device spells each operation out; the host compiles without contraction
// (-ffp-contract=off, runtime/CMakeLists.txt). Accurate to a few ulps of a double.
namespace exact {

MT_HOST_DEVICE inline double mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
MT_HOST_DEVICE inline double add(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
MT_HOST_DEVICE inline double div(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
MT_HOST_DEVICE inline double sqrtOf(double x) {
#ifdef __CUDA_ARCH__
  return __dsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

/// ln x for x in (0, 1]: x = m·2^e with m in [√½, √2), ln m = 2·atanh(s) for
/// s = (m − 1)/(m + 1), |s| ≤ 0.172, whose odd series s + s³/3 + … is below 2^-56 of its
/// sum after s^25.
MT_HOST_DEVICE inline double log(double x) {
  int e = 0;
  double m = frexp(x, &e); // exact: [0.5, 1)
  if (m < 0.70710678118654752440) {
    m = mul(m, 2.0); // exact
    e -= 1;
  }
  const double s = div(add(m, -1.0), add(m, 1.0));
  const double s2 = mul(s, s);
  double series = div(1.0, 25.0);
  for (int k = 11; k >= 0; --k)
    series = add(div(1.0, 2.0 * k + 1.0), mul(series, s2));
  // ln 2 in two parts: the first has zeros in its low bits, so e times it is exact.
  const double ln2High = 6.93147180369123816490e-01, ln2Low = 1.90821492927058770002e-10;
  const double de = static_cast<double>(e);
  return add(mul(de, ln2High), add(mul(de, ln2Low), mul(mul(2.0, s), series)));
}

/// sin 2πt and cos 2πt for t in [0, 1): t less its nearest quarter turn (exact) is
/// within an eighth of a turn, where the Taylor series to the 19th power of the
/// angle (≤ π/4) are below 2^-56 of their sums; the quarter turn swaps and negates them.
MT_HOST_DEVICE inline void sinCosTurns(double t, double &sine, double &cosine) {
  const double quarter = floor(add(mul(t, 4.0), 0.5)); // exact: t has 32 bits
  const double a = mul(add(t, mul(quarter, -0.25)), 6.28318530717958647693);
  const double a2 = mul(a, a);
  double sinSeries = 1.0, cosSeries = 1.0; // sin a = a·(1 − a²/(2·3)·(1 − a²/(4·5)·(…)))
  for (int k = 9; k >= 1; --k) {
    sinSeries = add(1.0, -mul(div(a2, (2.0 * k) * (2.0 * k + 1.0)), sinSeries));
    cosSeries = add(1.0, -mul(div(a2, (2.0 * k - 1.0) * (2.0 * k)), cosSeries));
  }
  const double s = mul(a, sinSeries), c = cosSeries;
  switch (static_cast<int>(quarter) & 3) {
  case 0: sine = s; cosine = c; break;
  case 1: sine = c; cosine = -s; break;
  case 2: sine = -s; cosine = -c; break;
  default: sine = -c; cosine = s; break;
  }
}

} // namespace exact

/// A standard normal for element `index` of the parameter named by `nameHash`
/// (Box-Muller on one Philox block per two elements): the same bits on the host and the
/// device, so the CUDA backend initialises its weights itself.
MT_HOST_DEVICE inline double standardNormal(uint64_t seed, uint64_t nameHash, uint64_t index) {
  auto r = block(seed, static_cast<uint32_t>(index >> 1), static_cast<uint32_t>(nameHash),
                 static_cast<uint32_t>(nameHash >> 32), kInitStep);
  const double u1 = exact::mul(static_cast<double>(r.v[0]) + 1.0, 1.0 / 4294967296.0); // (0, 1]
  const double u2 = exact::mul(static_cast<double>(r.v[1]), 1.0 / 4294967296.0);        // [0, 1)
  const double radius = exact::sqrtOf(exact::mul(-2.0, exact::log(u1)));
  double sine, cosine;
  exact::sinCosTurns(u2, sine, cosine);
  return exact::mul(radius, (index & 1) ? sine : cosine);
}

} // namespace mt::rng

#endif
