// The activations both backends run (core/SharedMath.h) against values of the normal
// distribution's tables: GELU is x·Φ(x), exactly or by its tanh approximation, and an
// instruction's `approximate` chooses which. (The backends are held to these functions
// by gradient_check_test and cuda_backend_test.)
#include "backends/Backend.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

/// x, Φ(x) and φ(x) for the standard normal distribution.
struct Normal {
  double x, cdf, pdf;
};
constexpr Normal kNormal[] = {{-3.0, 0.0013498980316300946, 0.0044318484119380075},
                              {-1.0, 0.15865525393145707, 0.24197072451914337},
                              {0.5, 0.6914624612740131, 0.3520653267642995},
                              {1.0, 0.8413447460685429, 0.24197072451914337},
                              {2.5, 0.9937903346742238, 0.01752830049356854}};

/// The instruction `approximate` makes, as a plan holds it.
std::vector<uint8_t> instruction(plan::GeluApproximation approximate) {
  flatbuffers::FlatBufferBuilder fbb;
  plan::InstructionBuilder b(fbb);
  b.add_opcode(plan::Opcode::Gelu);
  b.add_approximate(approximate);
  fbb.Finish(b.Finish());
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

TEST(Gelu, ExactIsXTimesTheNormalCdf) {
  const std::vector<uint8_t> bytes = instruction(plan::GeluApproximation::None);
  const Gelu gelu = activationOf<Gelu>(*flatbuffers::GetRoot<plan::Instruction>(bytes.data()));
  ASSERT_TRUE(gelu.exact);
  for (const Normal &n : kNormal) {
    SCOPED_TRACE(n.x);
    EXPECT_NEAR(gelu.value(n.x), n.x * n.cdf, 1e-15);
    EXPECT_NEAR(gelu.derivative(n.x), n.cdf + n.x * n.pdf, 1e-15);
    EXPECT_NEAR(gelu.value(float(n.x)), n.x * n.cdf, 1e-6);
  }
}

TEST(Gelu, TanhIsTheDefaultAndWithinItsErrorOfExact) {
  for (const Gelu &gelu :
       {Gelu{}, activationOf<Gelu>(*flatbuffers::GetRoot<plan::Instruction>(
                    instruction(plan::GeluApproximation::Tanh).data()))}) {
    ASSERT_FALSE(gelu.exact);
    for (const Normal &n : kNormal) {
      SCOPED_TRACE(n.x);
      // The approximation is not the function: close (within 5e-4), never equal.
      const double error = std::abs(gelu.value(n.x) - n.x * n.cdf);
      EXPECT_GT(error, 1e-6);
      EXPECT_LT(error, 5e-4);
    }
  }
  // GPT-2's gelu_new at 1: 0.5·(1 + tanh(√(2/π)·1.044715)).
  EXPECT_NEAR(Gelu{}.value(1.0), 0.8411919906082768, 1e-15);
}

} // namespace
} // namespace mt
