// The CPU backend's dropout masks (backends/cpu/DropoutMask.h) against the portable
// per-element decision of core/Rng.h: every start (aligned to a Philox block or not),
// every length, rates at and between the edges, and counters whose high bits change
// within a run. The vector path and the scalar one give the same bytes.
#include "backends/cpu/DropoutMask.h"

#include "core/Rng.h"

#include <gtest/gtest.h>

#include <vector>

namespace mt::cpu {
namespace {

std::vector<uint8_t> expected(const DropoutStream &s, uint64_t first, int64_t n) {
  std::vector<uint8_t> keep(n);
  for (int64_t k = 0; k < n; ++k)
    keep[k] = rng::dropoutKeeps(s.seed, s.step, s.microBatch, s.stream, first + k, s.rate);
  return keep;
}

TEST(DropoutMask, EqualsThePerElementDecisionAtEveryStartAndLength) {
  DropoutStream s{0x1234567890abcdefull, 7, 3, 11, 0.1};
  for (uint64_t base : {0ull, 1000ull, (1ull << 34) - 70, (1ull << 36) + 5})
    for (uint64_t offset = 0; offset < 5; ++offset)
      for (int64_t n : {0, 1, 3, 4, 5, 31, 32, 33, 67, 300}) {
        const uint64_t first = base + offset;
        std::vector<uint8_t> vec(n + 1, 7), scalar(n + 1, 7);
        dropoutKeeps(s, first, n, vec.data());
        dropoutKeepsScalar(s, first, n, scalar.data());
        const std::vector<uint8_t> want = expected(s, first, n);
        ASSERT_EQ(std::vector<uint8_t>(vec.begin(), vec.begin() + n), want)
            << "first " << first << ", n " << n;
        ASSERT_EQ(vec, scalar) << "first " << first << ", n " << n;
        EXPECT_EQ(vec[n], 7) << "wrote past the end";
      }
}

/// The attention keep mask's quads (rng::attentionKeeps, what the CUDA backend gives
/// cuDNN): each key's per-element decision where the row sees it, false where it does
/// not, from a Philox block or element by element, at every alignment of the quad's
/// global index and every overlap with the keys seen.
TEST(AttentionKeeps, EqualTheRowsPerElementDecisions) {
  const uint64_t seed = 0x0123456789abcdefull;
  for (double rate : {0.1, 0.5})
    for (uint64_t base : {0ull, 4096ull, (1ull << 34) - 8, (1ull << 34) - 4, (1ull << 36) + 5})
      for (uint64_t offset = 0; offset < 4; ++offset) // from -4 + 1: quads across 2^34
        for (int count = 1; count <= 4; ++count)
          for (const auto &[first, end] : {std::pair<int64_t, int64_t>{0, 64},
                                           {0, 9},
                                           {10, 64},
                                           {11, 13},
                                           {12, 12},
                                           {0, 8},
                                           {14, 64}})
            for (int64_t j : {int64_t{8}, int64_t{12}}) {
              const uint64_t index = base + offset;
              bool keep[4];
              rng::attentionKeeps(seed, 9, 2, 5, index, j, count, first, end, rate, keep);
              for (int k = 0; k < 4; ++k) {
                const bool seen = k < count && j + k >= first && j + k < end;
                EXPECT_EQ(keep[k], seen && rng::dropoutKeeps(seed, 9, 2, 5, index + k, rate))
                    << "index " << index << ", key " << j + k << " of [" << first << ", " << end
                    << "), count " << count << ", rate " << rate;
              }
            }
}

TEST(DropoutMask, RatesAtAndBetweenTheEdges) {
  // 2⁻²⁴ steps: a rate exactly on a 24-bit uniform, and one just above it.
  for (double rate :
       {0.0, 0.1, 1.0 / 3.0, 0.5, 0.75, 0.999, 1.0, 5.0 / 16777216.0, 5.0 / 16777216.0 + 1e-12}) {
    DropoutStream s{42, 1, 0, 2, rate};
    std::vector<uint8_t> keep(4096);
    dropoutKeeps(s, 8, 4096, keep.data());
    EXPECT_EQ(keep, expected(s, 8, 4096)) << "rate " << rate;
  }
}

TEST(DropoutMask, KeepsAboutOneMinusTheRate) {
  DropoutStream s{3, 2, 1, 5, 0.25};
  std::vector<uint8_t> keep(1 << 20);
  dropoutKeeps(s, 0, keep.size(), keep.data());
  int64_t kept = 0;
  for (uint8_t k : keep)
    kept += k;
  EXPECT_NEAR(static_cast<double>(kept) / keep.size(), 0.75, 0.003);
}

} // namespace
} // namespace mt::cpu
