// Autodiff checked numerically: for every op's gradient rule, and for the whole
// gpt-tiny loss, the gradient the compiled training step computes agrees with central
// finite differences in f64 (relative error ≤ 1e-6), on fresh random inputs.
#include "CompileWithMtc.h"
#include "OpCases.h"
#include "StatusAssertions.h"
#include "TestSeed.h"
#include "backends/Backend.h"
#include "comm/Comm.h"
#include "exec/Executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace mt {
namespace {

constexpr double kTolerance = 1e-6;

class GradientCheck : public ::testing::TestWithParam<test::OpCase> {};

TEST_P(GradientCheck, MatchesCentralDifferences) {
  const test::OpCase &c = GetParam();
  const uint64_t seed = test::testSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::string flags = "--micro-batch-size 2 --global-batch-size 2 --precision fp64 "
                      "--seq-length " + std::to_string(c.seqLength) + " " + c.flags;
  std::string planPath = c.mlir.empty()
                             ? test::compileModel(test::zooModel(c.zooModel), flags, c.name)
                             : test::compileSource(c.mlir, flags, c.name);
  ASSERT_FALSE(planPath.empty()) << "mtc could not compile " << c.name;
  LoadedPlan plan;
  Status loaded = LoadedPlan::read(planPath, plan);
  ASSERT_TRUE(loaded.ok()) << loaded.message();

  std::unique_ptr<Backend> backend = makeCpuBackend();
  std::unique_ptr<Comm> comm = makeLocalComm();
  std::unique_ptr<Executor> executor;
  ASSERT_TRUE(Executor::create(plan, *backend, *comm, {}, executor).ok());
  ASSERT_TRUE(executor->initParameters(seed).ok());

  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab - 1));
  std::vector<int32_t> tokens(executor->tokensPerMicroBatch()), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = id(rng);
    targets[i] = id(rng);
  }
  const StepContext context{seed, 3, 1};
  auto loss = [&] {
    double value = 0;
    EXPECT_TRUE(executor->forwardBackward(tokens.data(), targets.data(), context, value).ok());
    return value;
  };

  // The analytic gradients, before the finite differences run more steps.
  ASSERT_OK(executor->zeroGradients());
  loss();
  std::vector<std::vector<double>> gradients;
  for (Executor::Parameter &p : executor->parameters())
    gradients.emplace_back(p.grad.as<double>(), p.grad.as<double>() + p.grad.numel());

  for (size_t n = 0; n < executor->parameters().size(); ++n) {
    Executor::Parameter &p = executor->parameters()[n];
    SCOPED_TRACE("parameter " + p.name);
    auto *w = p.weight.as<double>();
    const std::vector<double> &analytic = gradients[n];
    // Every element of small tensors; of large ones, a random sample, half of it among
    // the elements backward gave a gradient (an untied embedding's rows of tokens not in
    // the batch have none, rightly, and a uniform sample may hold only those).
    std::vector<int64_t> elements, touched;
    for (int64_t i = 0; i < p.weight.numel(); ++i)
      if (analytic[i] != 0)
        touched.push_back(i);
    std::uniform_int_distribution<int64_t> pick(0, p.weight.numel() - 1);
    std::uniform_int_distribution<size_t> pickTouched(0, touched.empty() ? 0 : touched.size() - 1);
    for (int64_t i = 0; i < std::min<int64_t>(p.weight.numel(), 48); ++i)
      elements.push_back(p.weight.numel() <= 48           ? i
                         : i % 2 == 0 || touched.empty() ? pick(rng)
                                                          : touched[pickTouched(rng)]);
    double diff = 0, norm = 0;
    for (int64_t i : elements) {
      // The step balances the difference's truncation error, h^2·|L'''|/6, against its
      // rounding error, eps·|L|/h: best near (3·eps·|L|/|L'''|)^(1/3), about 1e-5 for a
      // loss of a few nats. (At 1e-6 rounding dominated: the small gradients of rarely
      // used embedding rows came out 1e-6 off.)
      const double h = 1e-5 * std::max(1.0, std::abs(w[i])), saved = w[i];
      w[i] = saved + h;
      double up = loss();
      w[i] = saved - h;
      double down = loss();
      w[i] = saved;
      double numeric = (up - down) / (2 * h);
      diff += (analytic[i] - numeric) * (analytic[i] - numeric);
      norm += numeric * numeric;
    }
    ASSERT_GT(norm, 0) << "the loss does not depend on " << p.name;
    EXPECT_LE(std::sqrt(diff / norm), kTolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GradientCheck, ::testing::ValuesIn(test::opCases()),
                         [](const auto &info) { return info.param.name; });

} // namespace
} // namespace mt
