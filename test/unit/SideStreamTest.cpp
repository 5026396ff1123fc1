// The CUDA backend's second stream: which instructions on the main stream must wait for
// what it has in flight (runtime/backends/cuda/SideStream.h), on byte ranges alone.
#include "backends/cuda/SideStream.h"

#include <gtest/gtest.h>

using namespace mt;

namespace {

ByteRange at(uintptr_t begin, uintptr_t end) { return {begin, end}; }

// A weight gradient on the side stream reads dy [100, 200) and x [300, 400) and adds into
// its gradient [1000, 1100).
SideStreamHazards weightGradient() {
  SideStreamHazards h;
  h.issued({at(100, 200), at(300, 400)}, {at(1000, 1100)});
  return h;
}

TEST(SideStream, ReadingWhatItReadsNeedsNoWait) {
  const SideStreamHazards h = weightGradient();
  EXPECT_TRUE(h.pending());
  // The input gradient reads the same dy and writes dx elsewhere.
  EXPECT_FALSE(h.mustWait({at(100, 200), at(5000, 5100)}, {at(200, 300)}));
  // Touching ends are not overlaps.
  EXPECT_FALSE(h.mustWait({at(0, 100)}, {at(400, 500), at(1100, 1200)}));
}

TEST(SideStream, OverwritingWhatItReadsWaits) {
  const SideStreamHazards h = weightGradient();
  EXPECT_TRUE(h.mustWait({}, {at(150, 160)})); // dy's memory reused
  EXPECT_TRUE(h.mustWait({}, {at(399, 401)})); // x's last byte
  EXPECT_TRUE(h.mustWait({}, {at(0, 10000)})); // a write over everything
}

TEST(SideStream, ReadingOrWritingWhatItWritesWaits) {
  const SideStreamHazards h = weightGradient();
  EXPECT_TRUE(h.mustWait({at(1050, 1051)}, {})); // the gradient read (its norm, a ParamGrad)
  EXPECT_TRUE(h.mustWait({}, {at(1099, 1200)})); // another adds into it (a tied weight)
}

TEST(SideStream, AJoinForgetsEverythingIssued) {
  SideStreamHazards h = weightGradient();
  h.issued({at(600, 700)}, {at(2000, 2100)});
  EXPECT_TRUE(h.mustWait({at(2000, 2001)}, {}));
  h.joined();
  EXPECT_FALSE(h.pending());
  EXPECT_FALSE(h.mustWait({at(0, 10000)}, {at(0, 10000)}));
}

TEST(SideStream, EmptyRangesMeetNothing) {
  const SideStreamHazards h = weightGradient();
  EXPECT_FALSE(h.mustWait({at(150, 150)}, {at(1050, 1050)}));
  EXPECT_FALSE(ByteRange::of(nullptr, 0).overlaps(at(0, 100)));
}

} // namespace
