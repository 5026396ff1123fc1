#include "backends/cpu/DropoutMask.h"

#include "core/Rng.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mt::cpu {
namespace {

/// uniform24(w) ≥ rate ⟺ (w >> 8) ≥ ⌈rate·2²⁴⌉: w >> 8 is an integer and rate·2²⁴ is
/// exact in a double, so the integer comparison decides as the double one does. The plan
/// reader admits rates in [0, 1); anything else is taken to its edge, never cast as is.
uint32_t threshold(double rate) {
  if (!(rate > 0))
    return 0;
  return rate >= 1 ? 1u << 24 : static_cast<uint32_t>(std::ceil(rate * 16777216.0));
}

/// The four decisions of Philox block `block` (elements 4·block … 4·block + 3), those of
/// [from, to) written to keep[element − 4·block].
void blockKeeps(const DropoutStream &s, uint32_t limit, uint64_t block, int from, int to,
                uint8_t *keep) {
  const rng::Philox::ctr_type w = rng::dropoutBlock(s.seed, s.step, s.microBatch, s.stream, block << 2);
  for (int k = from; k < to; ++k)
    keep[k - from] = (w.v[k] >> 8) >= limit;
}

#if defined(__x86_64__)
const bool kAvx2 = (__builtin_cpu_init(), __builtin_cpu_supports("avx2"));

/// hi:lo = a·m per 32-bit lane (m the same in every lane).
__attribute__((target("avx2"))) inline void mulhilo(__m256i a, __m256i m, __m256i &hi,
                                                     __m256i &lo) {
  const __m256i even = _mm256_mul_epu32(a, m);                       // lanes 0, 2, 4, 6
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m); // lanes 1, 3, 5, 7
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/// Philox4x32-10 (Random123's rounds and key schedule) of eight counters, one a lane:
/// the 32 decisions of blocks [block, block + 8) to keep.
__attribute__((target("avx2"))) void eightBlocks(const DropoutStream &s, uint32_t limit,
                                                 uint64_t block, uint8_t *keep) {
  alignas(32) uint32_t c0[8], c1[8];
  for (int l = 0; l < 8; ++l) { // as rng::dropoutBlock forms its counter
    c0[l] = static_cast<uint32_t>(block + l);
    c1[l] = s.stream + (static_cast<uint32_t>((block + l) >> 32) << 24);
  }
  __m256i x0 = _mm256_load_si256(reinterpret_cast<const __m256i *>(c0));
  __m256i x1 = _mm256_load_si256(reinterpret_cast<const __m256i *>(c1));
  __m256i x2 = _mm256_set1_epi32(static_cast<int>(s.microBatch));
  __m256i x3 = _mm256_set1_epi32(static_cast<int>(s.step));
  uint32_t k0 = static_cast<uint32_t>(s.seed), k1 = static_cast<uint32_t>(s.seed >> 32);
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m256i hi0, lo0, hi1, lo1;
    mulhilo(x0, m0, hi0, lo0);
    mulhilo(x2, m1, hi1, lo1);
    x0 = _mm256_xor_si256(_mm256_xor_si256(hi1, x1), _mm256_set1_epi32(static_cast<int>(k0)));
    x1 = lo1;
    x2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32(static_cast<int>(k1)));
    x3 = lo0;
  }
  // (w >> 8) ≥ limit as a signed comparison: both sides are below 2²⁵.
  const __m256i below = _mm256_set1_epi32(static_cast<int>(limit) - 1);
  alignas(32) int32_t w[4][8];
  const __m256i words[4] = {x0, x1, x2, x3};
  for (int j = 0; j < 4; ++j)
    _mm256_store_si256(reinterpret_cast<__m256i *>(w[j]),
                       _mm256_cmpgt_epi32(_mm256_srli_epi32(words[j], 8), below));
  for (int l = 0; l < 8; ++l)
    for (int j = 0; j < 4; ++j)
      keep[4 * l + j] = static_cast<uint8_t>(w[j][l] & 1);
}
#endif

void keeps(const DropoutStream &s, uint64_t first, int64_t n, uint8_t *keep, bool vector) {
  if (n <= 0)
    return;
  const uint32_t limit = threshold(s.rate);
  const uint64_t end = first + static_cast<uint64_t>(n);
  uint64_t i = first;
  if (i % 4) { // the head, up to the first whole block
    const int to = static_cast<int>(std::min<uint64_t>(end - (i & ~3ull), 4));
    blockKeeps(s, limit, i >> 2, static_cast<int>(i & 3), to, keep);
    i += static_cast<uint64_t>(to) - (i & 3);
  }
#if defined(__x86_64__)
  if (vector && kAvx2)
    for (; i + 32 <= end; i += 32)
      eightBlocks(s, limit, i >> 2, keep + (i - first));
#else
  (void)vector;
#endif
  for (; i < end; i += 4)
    blockKeeps(s, limit, i >> 2, 0, static_cast<int>(std::min<uint64_t>(end - i, 4)),
               keep + (i - first));
}

} // namespace

void dropoutKeeps(const DropoutStream &s, uint64_t first, int64_t n, uint8_t *keep) {
  keeps(s, first, n, keep, true);
}

void dropoutKeepsScalar(const DropoutStream &s, uint64_t first, int64_t n, uint8_t *keep) {
  keeps(s, first, n, keep, false);
}

} // namespace mt::cpu
