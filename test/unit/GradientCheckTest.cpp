// Autodiff checked numerically: for every op's gradient rule, and for the whole
// gpt-tiny loss, the gradient the compiled training step computes agrees with central
// finite differences in f64 (relative error ≤ 1e-6), on fresh random inputs.
#include "CompileWithMtc.h"
#include "backends/Backend.h"
#include "comm/Comm.h"
#include "core/Executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace mt {
namespace {

constexpr double kTolerance = 1e-6;

/// A one-op model: `body` computes %logits of shape [2, 3, V] from parameters, and the
/// loss is their cross-entropy against the targets.
std::string oneOpModel(const std::string &body, int64_t vocab, const std::string &loss = "") {
  std::string v = std::to_string(vocab);
  return "func.func @forward(%tokens: tensor<?x?xi32>, %targets: tensor<?x?xi32>) -> "
         "tensor<f32> {\n" +
         body + "\n" +
         (loss.empty() ? "  %loss = mt.cross_entropy %logits, %targets : (tensor<2x3x" + v +
                             "xf32>, tensor<?x?xi32>) -> tensor<f32>\n"
                       : loss + "\n") +
         "  return %loss : tensor<f32>\n}\n";
}

struct GradientCase {
  std::string name;
  std::string mlir;       // empty: a zoo model
  std::string zooModel;
  int64_t seqLength;
  int64_t vocab;          // token and target ids are drawn below this
  std::string flags = {}; // more mtc flags
};

void PrintTo(const GradientCase &c, std::ostream *os) { *os << c.name; }

std::vector<GradientCase> cases() {
  std::vector<GradientCase> c;
  c.push_back({"gelu", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %logits = mt.gelu %x : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  c.push_back({"linear", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x4xf32>
  %w = mt.param "w" normal(0.5) : tensor<5x4xf32>
  %b = mt.param "b" normal(0.5) : tensor<5xf32>
  %logits = mt.linear %x, %w, %b : (tensor<2x3x4xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  c.push_back({"layer_norm", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %g = mt.param "g" normal(1.0) : tensor<5xf32>
  %b = mt.param "b" normal(1.0) : tensor<5xf32>
  %logits = mt.layer_norm %x, %g, %b : (tensor<2x3x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  c.push_back({"add", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %y = mt.param "y" normal(1.0) : tensor<2x3x5xf32>
  %s = mt.add %x, %y : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %logits = mt.add %s, %x : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  for (const char *causal : {"causal, ", ""})
    c.push_back({std::string("attention") + (*causal ? "_causal" : ""), oneOpModel(
        std::string(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x24xf32>
  %logits = mt.attention %qkv {)") + causal + R"(heads = 2 : i64} : (tensor<2x3x24xf32>) -> tensor<2x3x8xf32>)", 8), "", 3, 8});
  // Dropped attention probabilities, fused (the mask regenerated in backward) and
  // unfused (the probabilities and the mask kept).
  const std::string dropped = oneOpModel(R"(
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x3x24xf32>
  %logits = mt.attention %qkv {causal, dropout = 3.0e-01 : f64, heads = 2 : i64, stream = 0 : i64} : (tensor<2x3x24xf32>) -> tensor<2x3x8xf32>)", 8);
  c.push_back({"attention_dropout", dropped, "", 3, 8});
  c.push_back({"attention_dropout_unfused", dropped, "", 3, 8, "--attention unfused"});
  c.push_back({"dropout", oneOpModel(R"(
  %x = mt.param "x" normal(1.0) : tensor<2x3x5xf32>
  %logits = mt.dropout %x {rate = 3.0e-01 : f64, stream = 0 : i64} : (tensor<2x3x5xf32>) -> tensor<2x3x5xf32>)", 5), "", 3, 5});
  c.push_back({"embeddings", oneOpModel(R"(
  %wte = mt.param "wte" normal(1.0) : tensor<7x5xf32>
  %wpe = mt.param "wpe" normal(1.0) : tensor<4x5xf32>
  %e = mt.embedding %wte, %tokens : (tensor<7x5xf32>, tensor<?x?xi32>) -> tensor<?x?x5xf32>
  %h = mt.position_embedding %e, %wpe : (tensor<?x?x5xf32>, tensor<4x5xf32>) -> tensor<?x?x5xf32>
  %logits = mt.linear %h, %wte : (tensor<?x?x5xf32>, tensor<7x5xf32>) -> tensor<?x?x7xf32>)", 7,
      "  %loss = mt.cross_entropy %logits, %targets : (tensor<?x?x7xf32>, tensor<?x?xi32>) -> "
      "tensor<f32>"), "", 3, 7});
  c.push_back({"cross_entropy_num_classes", oneOpModel(R"(
  %logits = mt.param "logits" normal(1.0) : tensor<2x3x6xf32>)", 6,
      "  %loss = mt.cross_entropy %logits, %targets {num_classes = 4 : i64} : "
      "(tensor<2x3x6xf32>, tensor<?x?xi32>) -> tensor<f32>"), "", 3, 4});
  c.push_back({"gpt_tiny", "", "gpt-tiny", 8, 512});
  c.push_back({"gpt_tiny_selective", "", "gpt-tiny", 8, 512, "--recompute selective"});
  return c;
}

class GradientCheck : public ::testing::TestWithParam<GradientCase> {};

TEST_P(GradientCheck, MatchesCentralDifferences) {
  const GradientCase &c = GetParam();
  const uint64_t seed = std::random_device{}();
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
  executor->zeroGradients();
  loss();
  std::vector<std::vector<double>> gradients;
  for (Executor::Parameter &p : executor->parameters())
    gradients.emplace_back(p.grad.as<double>(), p.grad.as<double>() + p.grad.numel());

  for (size_t n = 0; n < executor->parameters().size(); ++n) {
    Executor::Parameter &p = executor->parameters()[n];
    SCOPED_TRACE("parameter " + p.name);
    auto *w = p.weight.as<double>();
    const std::vector<double> &analytic = gradients[n];
    // Every element of small tensors; a random sample of large ones.
    std::vector<int64_t> elements;
    std::uniform_int_distribution<int64_t> pick(0, p.weight.numel() - 1);
    for (int64_t i = 0; i < std::min<int64_t>(p.weight.numel(), 48); ++i)
      elements.push_back(p.weight.numel() <= 48 ? i : pick(rng));
    double diff = 0, norm = 0;
    for (int64_t i : elements) {
      const double h = 1e-6 * std::max(1.0, std::abs(w[i])), saved = w[i];
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

INSTANTIATE_TEST_SUITE_P(Ops, GradientCheck, ::testing::ValuesIn(cases()),
                         [](const auto &info) { return info.param.name; });

} // namespace
} // namespace mt
