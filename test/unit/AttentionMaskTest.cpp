// Attention's masks by position (core/SharedMath.h: AttentionMask) against their
// definition, pair by pair: a causal query sees the keys at or before it, and under a
// window of w only the last w of those. The backends take spans of rows from the masks
// (a ring step's share of keys, the queries of a context rank's share), which must be
// exactly the rows whose positions the definition lets through.
#include "core/SharedMath.h"
#include "core/Tensor.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

bool sees(bool causal, int64_t window, int64_t q, int64_t k) {
  return (!causal || k <= q) && (window == 0 || q - k < window);
}

TEST(AttentionMask, SpansArePositionsTheDefinitionLetsThrough) {
  const int64_t s = 24;
  for (bool causal : {false, true})
    for (int64_t window : {0, 1, 2, 5, 6, 24, 30}) {
      if (window && !causal)
        continue; // a window is causal only (the ops' verifier)
      const AttentionMask mask{causal, window};
      for (int64_t p = 0; p < s; ++p)
        for (int64_t t = 0; t < s; ++t) {
          const bool key = t >= mask.firstKey(p) && t < mask.endKey(p, s);
          const bool query = p >= mask.firstQuery(t) && p < mask.endQuery(t, s);
          EXPECT_EQ(key, sees(causal, window, p, t)) << window << " " << p << " " << t;
          EXPECT_EQ(query, sees(causal, window, p, t)) << window << " " << p << " " << t;
        }
    }
}

/// A ring step: context rank `rank`'s queries against rank `owner`'s keys, each a share
/// of two chunks. The rows a span covers are those the definition lets through.
TEST(AttentionMask, ContextParallelSharesSeeSpansOfRows) {
  for (int64_t cp : {2, 4})
    for (int64_t window : {0, 3, 6, 9})
      for (int rank = 0; rank < cp; ++rank)
        for (int owner = 0; owner < cp; ++owner) {
          const int64_t s = 32, rows = s / cp;
          const SequenceMap queries(rows, 0, 1, rank, static_cast<int>(cp)),
              keys(rows, 0, 1, owner, static_cast<int>(cp));
          const AttentionMask mask{true, window};
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < rows; ++j) {
              const int64_t p = queries(i), t = keys(j);
              const bool key = j >= keys.rowsBefore(mask.firstKey(p), rows) &&
                               j < keys.rowsBefore(mask.endKey(p, s), rows);
              const bool query = i >= queries.rowsBefore(mask.firstQuery(t), rows) &&
                                 i < queries.rowsBefore(mask.endQuery(t, s), rows);
              EXPECT_EQ(key, sees(true, window, p, t))
                  << cp << " " << window << " " << i << " " << j;
              EXPECT_EQ(query, sees(true, window, p, t))
                  << cp << " " << window << " " << i << " " << j;
            }
        }
}

/// FLOPs count a mask's share of the s×s scores as areas: all, half, and the band of a
/// window, which is half again as it spans the sequence.
TEST(AttentionMask, ShareOfTheScores) {
  EXPECT_EQ((AttentionMask{false, 0}.share(1024)), 1.0);
  EXPECT_EQ((AttentionMask{true, 0}.share(1024)), 0.5);
  EXPECT_EQ((AttentionMask{true, 1024}.share(1024)), 0.5);
  EXPECT_EQ((AttentionMask{true, 4096}.share(1024)), 0.5);
  // w = s/4: the band's area is s²/2 − (3s/4)²/2 = 7s²/32.
  EXPECT_DOUBLE_EQ((AttentionMask{true, 256}.share(1024)), 7.0 / 32);
}

} // namespace
} // namespace mt
