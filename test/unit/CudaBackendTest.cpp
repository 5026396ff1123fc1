// The CUDA backend against the CPU backend (the reference): every op's forward and
// backward, and whole gpt-tiny training steps, on fresh random parameters and tokens —
// the loss and every parameter's gradient within 1e-5 (f32) or 1e-2 (bf16, relative,
// norm-wise); then an optimizer update. Skipped, saying why, where no GPU is visible.
#include "CompileWithMtc.h"
#include "OpCases.h"
#include "backends/Backend.h"
#include "comm/Comm.h"
#include "core/Executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace mt {
namespace {

struct Precision {
  const char *flag;
  double tolerance;
};

struct Case {
  test::OpCase op;
  Precision precision;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.op.name << "_" << c.precision.flag; }

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const test::OpCase &op : test::opCases())
    for (Precision p : {Precision{"fp32", 1e-5}, Precision{"bf16", 1e-2}})
      all.push_back({op, p});
  // An unfused gpt-tiny, and a 16-bit one: the attention chain and fp16 storage.
  all.push_back({{"gpt_tiny_unfused", "", "gpt-tiny", 8, 512, "--attention unfused"}, {"fp32", 1e-5}});
  all.push_back({{"gpt_tiny", "", "gpt-tiny", 8, 512}, {"fp16", 1e-2}});
  return all;
}

/// Everything a step leaves behind, on the host: the loss and each gradient.
struct Result {
  double loss = 0;
  std::vector<std::vector<float>> gradients;
};

/// Norm-wise relative difference of two vectors.
double relative(const std::vector<float> &a, const std::vector<float> &b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

class CudaBackendTest : public ::testing::TestWithParam<Case> {
protected:
  void SetUp() override {
    if (cudaDevices() == 0)
      GTEST_SKIP() << "no GPU is visible: the CUDA backend is compiled, not run";
  }
};

TEST_P(CudaBackendTest, MatchesTheCpuBackend) {
  const Case &c = GetParam();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string flags = "--micro-batch-size 2 --global-batch-size 2 --precision " +
                            std::string(c.precision.flag) + " --seq-length " +
                            std::to_string(c.op.seqLength) + " " + c.op.flags;
  const std::string name = c.op.name + "_" + c.precision.flag + "_cuda";
  const std::string path = c.op.mlir.empty()
                               ? test::compileModel(test::zooModel(c.op.zooModel), flags, name)
                               : test::compileSource(c.op.mlir, flags, name);
  ASSERT_FALSE(path.empty()) << "mtc could not compile " << name;
  LoadedPlan plan;
  ASSERT_TRUE(LoadedPlan::read(path, plan).ok());

  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.op.vocab - 1));
  const int64_t tokensPerBatch = plan.plan().micro_batch_size() * plan.plan().seq_length();
  std::vector<int32_t> tokens(tokensPerBatch), targets(tokensPerBatch);
  for (int64_t i = 0; i < tokensPerBatch; ++i) {
    tokens[i] = id(rng);
    targets[i] = id(rng);
  }

  auto step = [&](Backend &backend, Result &out) {
    std::unique_ptr<Comm> comm = makeLocalComm();
    std::unique_ptr<Executor> executor;
    ASSERT_TRUE(Executor::create(plan, backend, *comm, {}, executor).ok());
    ASSERT_TRUE(executor->initParameters(seed).ok());
    executor->zeroGradients();
    Status s = executor->forwardBackward(tokens.data(), targets.data(), StepContext{seed, 5, 2},
                                         out.loss);
    ASSERT_TRUE(s.ok()) << s.message();
    for (Executor::Parameter &p : executor->parameters()) {
      std::vector<float> g(p.grad.numel());
      backend.copyToHost(g.data(), p.grad.data, sizeof(float) * g.size());
      out.gradients.push_back(std::move(g));
    }
    // The measured arena stays inside the plan.
    EXPECT_LE(executor->arenaBytesWritten(Executor::kSentinel), executor->plannedArenaBytes());
  };

  std::unique_ptr<Backend> cpu = makeCpuBackend(), cuda;
  Status made = makeCudaBackend(0, cuda);
  ASSERT_TRUE(made.ok()) << made.message();
  Result reference, gpu;
  ASSERT_NO_FATAL_FAILURE(step(*cpu, reference));
  ASSERT_NO_FATAL_FAILURE(step(*cuda, gpu));
  const double tolerance = c.precision.tolerance;
  EXPECT_NEAR(gpu.loss, reference.loss, tolerance * std::abs(reference.loss));
  ASSERT_EQ(gpu.gradients.size(), reference.gradients.size());
  for (size_t i = 0; i < gpu.gradients.size(); ++i)
    EXPECT_LE(relative(gpu.gradients[i], reference.gradients[i]), tolerance)
        << "gradient of parameter " << i;
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaBackendTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.op.name + "_" + info.param.precision.flag;
                         });

/// The optimizer's arithmetic: one AdamW update of the same weights and gradients.
TEST(CudaAdamW, MatchesTheCpuBackend) {
  if (cudaDevices() == 0)
    GTEST_SKIP() << "no GPU is visible: the CUDA backend is compiled, not run";
  std::unique_ptr<Backend> cpu = makeCpuBackend(), cuda;
  ASSERT_TRUE(makeCudaBackend(0, cuda).ok());
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  const int64_t n = 10007;
  std::vector<std::vector<float>> host(4, std::vector<float>(n));
  for (auto &v : host)
    for (float &x : v)
      x = normal(rng);
  for (float &x : host[3])
    x = std::abs(x); // a second moment
  AdamWStep step;
  step.lr = 1e-3;
  step.weightDecay = 0.1;
  step.gradScale = 0.5;
  step.step = 3;
  auto view = [&](void *data) {
    TensorView v;
    v.data = data;
    v.rank = 1;
    v.shape[0] = n;
    return v;
  };
  std::vector<std::vector<float>> expected = host;
  cpu->adamw(view(expected[0].data()), view(expected[1].data()), view(expected[2].data()),
             view(expected[3].data()), step);
  std::vector<void *> device;
  for (auto &v : host) {
    device.push_back(cuda->allocate(sizeof(float) * n));
    cuda->copyToDevice(device.back(), v.data(), sizeof(float) * n);
  }
  cuda->adamw(view(device[0]), view(device[1]), view(device[2]), view(device[3]), step);
  std::vector<float> weights(n);
  cuda->copyToHost(weights.data(), device[0], sizeof(float) * n);
  EXPECT_LE(relative(weights, expected[0]), 1e-6);
  EXPECT_NEAR(cuda->sumOfSquares(view(device[1])), cpu->sumOfSquares(view(host[1].data())),
              1e-9 * cpu->sumOfSquares(view(host[1].data())));
  for (void *p : device)
    cuda->release(p);
}

} // namespace
} // namespace mt
