// The geometry of sharded checkpoints against brute force: a range's boxes are exactly
// its elements, few; intersections and tilings are what element sets say; a region
// copied between two boxes' buffers lands where element-by-element indexing puts it.
#include "TestSeed.h"
#include "train/Boxes.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <numeric>
#include <random>

namespace mt {
namespace {

std::vector<int64_t> randomShape(std::mt19937_64 &rng) {
  std::uniform_int_distribution<int> rank(1, 4), size(1, 5);
  std::vector<int64_t> shape(rank(rng));
  for (int64_t &s : shape)
    s = size(rng);
  return shape;
}

/// A random range [begin, end) of elements [0, n].
std::pair<int64_t, int64_t> randomRange(std::mt19937_64 &rng, int64_t n) {
  std::uniform_int_distribution<int64_t> at(0, n);
  int64_t begin = at(rng), end = at(rng);
  return {std::min(begin, end), std::max(begin, end)};
}

/// The row-major index in `shape` of each element of `box`, in the box's own order.
std::vector<int64_t> elementsOf(const Box &box, const std::vector<int64_t> &shape) {
  std::vector<int64_t> out;
  const int64_t n = box.numel();
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e, flat = 0, stride = 1;
    std::vector<int64_t> index(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
      index[d] = box.offsets[d] + rest % box.sizes[d];
      rest /= box.sizes[d];
    }
    for (size_t d = shape.size(); d-- > 0;) {
      flat += index[d] * stride;
      stride *= shape[d];
    }
    out.push_back(flat);
  }
  return out;
}

TEST(Boxes, ARangeIsExactlyItsElementsInOrderInFewBoxes) {
  std::mt19937_64 rng(test::testSeed());
  for (int trial = 0; trial < 2000; ++trial) {
    const std::vector<int64_t> shape = randomShape(rng);
    const auto [begin, end] = randomRange(rng, wholeBox(shape).numel());
    const std::vector<Box> boxes = boxesOfRange(shape, begin, end);
    EXPECT_LE(boxes.size(), 2 * shape.size() - 1);
    std::vector<int64_t> seen;
    for (const Box &b : boxes) {
      ASSERT_GT(b.numel(), 0);
      for (int64_t e : elementsOf(b, shape))
        seen.push_back(e);
    }
    std::vector<int64_t> expected(end - begin);
    std::iota(expected.begin(), expected.end(), begin);
    ASSERT_EQ(seen, expected) << "range [" << begin << ", " << end << ") of a rank-"
                              << shape.size() << " tensor";
  }
}

TEST(Boxes, IntersectionsAndTilingsAgreeWithElementSets) {
  std::mt19937_64 rng(test::testSeed());
  for (int trial = 0; trial < 500; ++trial) {
    const std::vector<int64_t> shape = randomShape(rng);
    const int64_t n = wholeBox(shape).numel();
    // A random split of the flat range into pieces tiles the tensor.
    const auto [first, second] = randomRange(rng, n);
    const std::vector<int64_t> cuts = {0, first, second, n};
    std::vector<Box> tiling;
    for (size_t i = 0; i + 1 < cuts.size(); ++i)
      for (Box &b : boxesOfRange(shape, cuts[i], cuts[i + 1]))
        tiling.push_back(std::move(b));
    std::string problem;
    ASSERT_TRUE(tilesExactly(tiling, shape, problem)) << problem;
    // Every pair's intersection is the set of elements both hold (none: they tile).
    for (const Box &a : tiling)
      for (const Box &b : tiling) {
        if (!(a == b)) {
          EXPECT_FALSE(intersect(a, b)) << "tiles overlap";
        }
      }
    // Without its last box the tiling leaves a gap; with a box twice, an overlap.
    std::vector<Box> gap(tiling.begin(), tiling.end() - 1);
    EXPECT_FALSE(tilesExactly(gap, shape, problem));
    EXPECT_NE(problem.find("cover"), std::string::npos) << problem;
    std::vector<Box> twice = tiling;
    twice.push_back(tiling.front());
    EXPECT_FALSE(tilesExactly(twice, shape, problem));
    EXPECT_NE(problem.find("overlap"), std::string::npos) << problem;
    // A box against the whole tensor is itself.
    EXPECT_EQ(intersect(tiling.front(), wholeBox(shape)), tiling.front());
  }
  std::string problem;
  Box outside{{0, 3}, {1, 2}};
  EXPECT_FALSE(tilesExactly({outside}, {2, 4}, problem));
  EXPECT_NE(problem.find("not inside"), std::string::npos) << problem;
  // As many elements as the tensor, one row twice and the other not at all.
  EXPECT_FALSE(tilesExactly({Box{{0, 0}, {1, 4}}, Box{{0, 0}, {1, 4}}}, {2, 4}, problem));
  EXPECT_EQ(problem, "boxes [0:1, 0:4] and [0:1, 0:4] overlap in [0:1, 0:4]");
}

/// The brute-force answer: every element counted.
bool coversOnce(const std::vector<Box> &boxes, const std::vector<int64_t> &shape) {
  std::vector<int> count(static_cast<size_t>(wholeBox(shape).numel()), 0);
  for (const Box &b : boxes) {
    if (!(intersect(b, wholeBox(shape)) == b))
      return false;
    for (int64_t i = 0; i < b.sizes[0]; ++i)
      for (int64_t j = 0; j < b.sizes[1]; ++j)
        for (int64_t k = 0; k < b.sizes[2]; ++k)
          ++count[((b.offsets[0] + i) * shape[1] + b.offsets[1] + j) * shape[2] + b.offsets[2] + k];
  }
  return std::all_of(count.begin(), count.end(), [](int c) { return c == 1; });
}

/// Cut `box` in two along a random dimension, recursively: a random exact tiling.
void cut(const Box &box, std::mt19937_64 &rng, int depth, std::vector<Box> &out) {
  std::vector<int> cuttable;
  for (int d = 0; d < 3; ++d)
    if (box.sizes[d] > 1)
      cuttable.push_back(d);
  if (depth == 0 || cuttable.empty()) {
    out.push_back(box);
    return;
  }
  const int d = cuttable[rng() % cuttable.size()];
  const int64_t at = 1 + static_cast<int64_t>(rng() % (box.sizes[d] - 1));
  Box low = box, high = box;
  low.sizes[d] = at;
  high.offsets[d] += at;
  high.sizes[d] -= at;
  cut(low, rng, depth - 1, out);
  cut(high, rng, depth - 1, out);
}

/// The corner test against counting every element, on random tilings of a 3-d tensor and
/// on each moved by one element somewhere (the same number of elements, now wrong).
TEST(Boxes, TilingAgreesWithCountingEveryElement) {
  std::mt19937_64 rng(11);
  const std::vector<int64_t> shape = {6, 5, 7};
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<Box> tiling;
    cut(wholeBox(shape), rng, 1 + trial % 7, tiling);
    std::string problem;
    ASSERT_TRUE(tilesExactly(tiling, shape, problem)) << problem;
    std::vector<Box> moved = tiling;
    Box &b = moved[rng() % moved.size()];
    const int d = static_cast<int>(rng() % 3);
    b.offsets[d] += b.offsets[d] > 0 ? -1 : 1;
    const bool exact = coversOnce(moved, shape);
    EXPECT_EQ(tilesExactly(moved, shape, problem), exact) << problem;
    rejected += !exact;
  }
  EXPECT_GT(rejected, 250) << "the moved tilings must mostly be wrong";
}

/// Dimensions of size 1 cost nothing; more dimensions than a plan holds are refused.
TEST(Boxes, TilingLeavesOutDimensionsOfSizeOne) {
  std::string problem;
  const std::vector<int64_t> shape = {1, 1, 1, 1, 1, 1, 4, 3};
  std::vector<Box> rows;
  for (int64_t r = 0; r < 4; ++r)
    rows.push_back(Box{{0, 0, 0, 0, 0, 0, r, 0}, {1, 1, 1, 1, 1, 1, 1, 3}});
  EXPECT_TRUE(tilesExactly(rows, shape, problem)) << problem;
  rows[3].offsets[6] = 2;
  EXPECT_FALSE(tilesExactly(rows, shape, problem));
  EXPECT_FALSE(tilesExactly({Box{std::vector<int64_t>(9, 0), std::vector<int64_t>(9, 1)}},
                            std::vector<int64_t>(9, 1), problem));
  EXPECT_EQ(problem, "a tensor of 9 dimensions, more than the 8 mtc holds");
}

/// A million chunks: a 1000 x 1000 tensor in single elements, in a shuffled order, is
/// checked in a moment; moving one element onto another is found, at its corner.
TEST(Boxes, AMillionChunksAreCheckedInLinearithmicTime) {
  std::vector<Box> boxes;
  boxes.reserve(1000000);
  for (int64_t i = 0; i < 1000; ++i)
    for (int64_t j = 0; j < 1000; ++j)
      boxes.push_back(Box{{i, j}, {1, 1}});
  std::shuffle(boxes.begin(), boxes.end(), std::mt19937_64(5));
  std::string problem;
  EXPECT_TRUE(tilesExactly(boxes, {1000, 1000}, problem)) << problem;
  for (Box &b : boxes)
    if (b.offsets == std::vector<int64_t>{999, 999})
      b.offsets = {0, 0};
  EXPECT_FALSE(tilesExactly(boxes, {1000, 1000}, problem));
  EXPECT_EQ(problem,
            "the boxes overlap (and leave as many elements uncovered) at the corner (0, 0)");
}

TEST(Boxes, ACopiedRegionLandsWhereIndexingPutsIt) {
  std::mt19937_64 rng(test::testSeed());
  for (int trial = 0; trial < 500; ++trial) {
    const std::vector<int64_t> shape = randomShape(rng);
    auto randomBox = [&] {
      Box b;
      for (int64_t s : shape) {
        std::uniform_int_distribution<int64_t> first(0, s - 1);
        const int64_t o = first(rng);
        std::uniform_int_distribution<int64_t> size(1, s - o);
        b.offsets.push_back(o);
        b.sizes.push_back(size(rng));
      }
      return b;
    };
    const Box from = randomBox(), to = randomBox();
    std::optional<Box> region = intersect(from, to);
    if (!region)
      continue;
    // Each buffer holds the global indices of its box's elements.
    std::vector<int64_t> source = elementsOf(from, shape), target(to.numel(), -1);
    copyRegion(*region, from, source.data(), to, target.data(), sizeof(int64_t));
    const std::vector<int64_t> toElements = elementsOf(to, shape),
                               regionElements = elementsOf(*region, shape);
    for (int64_t i = 0; i < to.numel(); ++i) {
      const bool inRegion = std::find(regionElements.begin(), regionElements.end(),
                                      toElements[i]) != regionElements.end();
      EXPECT_EQ(target[i], inRegion ? toElements[i] : -1) << "element " << i;
    }
  }
}

} // namespace
} // namespace mt
