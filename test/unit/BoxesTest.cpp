// The geometry of sharded checkpoints against brute force: a range's boxes are exactly
// its elements, few; intersections and tilings are what element sets say; a region
// copied between two boxes' buffers lands where element-by-element indexing puts it.
#include "TestSeed.h"
#include "train/Boxes.h"

#include <gtest/gtest.h>

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
