// The executor against the compiler's promises: the arena reaches exactly the planned
// peak, the plan's buffer reuse changes no bit of the result, and random numbers
// depend on global indices only.
#include "CompileWithMtc.h"
#include "StatusAssertions.h"
#include "backends/Backend.h"
#include "comm/Comm.h"
#include "exec/Executor.h"
#include "core/Rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <cstring>
#include <random>

namespace mt {
namespace {

struct StepRun {
  std::unique_ptr<Backend> backend = makeCpuBackend();
  std::unique_ptr<Comm> comm = makeLocalComm();
  std::unique_ptr<Executor> executor;
  double loss = 0;
};

void runStep(const LoadedPlan &plan, ExecutorOptions options, StepRun &run) {
  ASSERT_TRUE(Executor::create(plan, *run.backend, *run.comm, options, run.executor).ok());
  ASSERT_TRUE(run.executor->initParameters(42).ok());
  std::vector<int32_t> tokens(run.executor->tokensPerMicroBatch()), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 37) % 256);
    targets[i] = static_cast<int32_t>((i * 11 + 5) % 256);
  }
  Status s = run.executor->forwardBackward(tokens.data(), targets.data(), {7, 0, 0}, run.loss);
  ASSERT_TRUE(s.ok()) << s.message();
}

class ExecutorTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string path = test::compileModel(test::zooModel("gpt-tiny"),
                                          "--micro-batch-size 2 --global-batch-size 2",
                                          "executor_test");
    ASSERT_FALSE(path.empty());
    Status s = LoadedPlan::read(path, plan);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  LoadedPlan plan;
};

TEST_F(ExecutorTest, MeasuredArenaHighWaterEqualsPlannedPeak) {
  // The arena starts out filled with a sentinel; after a step, the last byte that no
  // longer holds it is the measured high-water mark. Two sentinels, so that a byte
  // written with the sentinel's value by chance cannot shorten the measurement.
  uint64_t measured = 0;
  for (uint8_t sentinel : {uint8_t{0xA5}, uint8_t{0x5A}}) {
    StepRun run;
    ASSERT_TRUE(Executor::create(plan, *run.backend, *run.comm, {}, run.executor).ok());
    ASSERT_OK(run.executor->fillArena(sentinel));
    ASSERT_TRUE(run.executor->initParameters(42).ok());
    std::vector<int32_t> ids(run.executor->tokensPerMicroBatch(), 3);
    ASSERT_TRUE(run.executor->forwardBackward(ids.data(), ids.data(), {7, 0, 0}, run.loss).ok());
    uint64_t written = 0;
    ASSERT_OK(run.executor->arenaBytesWritten(sentinel, written));
    measured = std::max(measured, written);
  }
  EXPECT_GT(measured, 0u);
  EXPECT_EQ(measured, plan.plan().accounting()->activation_bytes());
}

TEST_F(ExecutorTest, PlannedReuseEqualsSeparateBuffersBitForBit) {
  StepRun planned, separate;
  runStep(plan, {}, planned);
  runStep(plan, {/*separateBuffers=*/true}, separate);
  EXPECT_EQ(planned.loss, separate.loss);
  auto &a = planned.executor->parameters(), &b = separate.executor->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(a[i].grad.data, b[i].grad.data, a[i].bytes), 0) << a[i].name;
}

/// The profile times every instruction of every run, names each by its opcode, and
/// its table counts each opcode's runs per step exactly.
TEST_F(ExecutorTest, ProfileTimesEveryInstructionOfEveryRun) {
  StepRun run;
  ASSERT_OK(Executor::create(plan, *run.backend, *run.comm, {}, run.executor));
  Profile profile(run.backend->stopwatch());
  run.executor->setProfile(&profile);
  ASSERT_OK(run.executor->initParameters(42));
  std::vector<int32_t> ids(run.executor->tokensPerMicroBatch(), 3);
  // A mark that a failure left behind is dropped by the next run, not counted as a lap.
  ASSERT_OK(profile.mark());
  const int runs = 3;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i)
    ASSERT_OK(run.executor->forwardBackward(ids.data(), ids.data(), {7, 0, 0}, run.loss));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const auto &instructions = *plan.plan().programs()->Get(0)->instructions();
  ASSERT_EQ(profile.entries().size(), instructions.size());
  std::map<std::string, int> perOpcode;
  double timed = 0;
  for (uint32_t i = 0; i < instructions.size(); ++i) {
    const Profile::Entry &e = *profile.entries()[i];
    const std::string opcode = plan::EnumNameOpcode(instructions.Get(i)->opcode());
    EXPECT_EQ(e.what, opcode) << i;
    EXPECT_EQ(e.where, "train_step #" + std::to_string(i));
    ASSERT_EQ(e.runs.size(), static_cast<size_t>(runs)) << i;
    EXPECT_EQ(e.count, runs) << i;
    for (double t : e.runs) {
      EXPECT_GE(t, 0) << i;
      timed += t;
    }
    ++perOpcode[opcode];
  }
  EXPECT_LE(timed, wall);
  EXPECT_GT(perOpcode["Linear"], 1);

  // The linears' FLOPs, forward and both backward products: 6 x tokens x the elements
  // of every weight matrix (6NT). gpt-tiny: 2 x 32 tokens; per layer qkv 64x192,
  // projection 64x64, MLP 64x256 and 256x64 (49,152), twice, and the tied 512x64 head:
  // 131,072 elements.
  // Causal attention: 4·b·s²·hidden halved forward, 2.5 times that backward; 2 layers.
  double linearFlops = 0, attentionFlops = 0;
  for (const auto &e : profile.entries())
    (e->what.rfind("Attention", 0) == 0 ? attentionFlops : linearFlops) += e->flops;
  EXPECT_EQ(linearFlops, 6.0 * 64 * 131072);
  EXPECT_EQ(attentionFlops, 2 * 3.5 * (4.0 * 2 * 32 * 32 * 64 / 2));

  // Printed as one step, which all the runs fall in: each opcode's row counts its
  // instructions times the runs.
  char *text = nullptr;
  size_t size = 0;
  std::FILE *out = open_memstream(&text, &size);
  profile.print(out, 1);
  std::fclose(out);
  std::istringstream lines{std::string(text, size)};
  std::free(text);
  std::string line;
  std::map<std::string, double> printed;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string what;
    double runsPerStep = 0;
    if (words >> what >> runsPerStep && perOpcode.count(what))
      printed[what] = runsPerStep;
  }
  ASSERT_EQ(printed.size(), perOpcode.size());
  for (const auto &[opcode, count] : perOpcode)
    EXPECT_EQ(printed[opcode], count * runs) << opcode;
}

/// Laps and entries must agree: a profile fed more laps than entries says so.
TEST(Profile, LapsWithoutTheirEntriesAreRefused) {
  Profile profile(std::make_unique<HostStopwatch>());
  ASSERT_OK(profile.mark());
  ASSERT_OK(profile.mark());
  Status s = profile.record({});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "profile: 1 laps timed for 0 entries");
  // The marks were used up: a new lap starts afresh.
  ASSERT_OK(profile.mark());
  ASSERT_OK(profile.mark());
  ASSERT_OK(profile.record({&profile.part("optimizer")}));
  EXPECT_EQ(profile.part("optimizer").runs.size(), 1u);
  EXPECT_EQ(profile.entries().size(), 1u);
}

/// An entry keeps its latest kWindow runs (bounded memory) and counts them all; its
/// median is of those kept.
TEST(Profile, KeepsTheLatestRunsAndCountsAll) {
  Profile::Entry e;
  for (int i = 0; i < 1000; ++i)
    e.add(i < 600 ? 100.0 : 1.0);
  EXPECT_EQ(e.count, 1000);
  EXPECT_EQ(e.runs.size(), Profile::kWindow);
  EXPECT_EQ(e.median(), 1.0);
}

/// Running out of memory is a Status naming the request, not an exception; memory that
/// DeviceMemory holds goes back when it does.
TEST(BackendErrors, OutOfMemoryIsAStatus) {
  std::unique_ptr<Backend> backend = makeCpuBackend();
  DeviceMemory memory;
  const size_t huge = size_t{1} << 62;
  Status s = memory.allocate(*backend, huge);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "cpu backend: out of memory allocating " + std::to_string(huge) +
                             " bytes");
  EXPECT_EQ(memory.data(), nullptr);
  ASSERT_OK(memory.allocate(*backend, 64));
  EXPECT_NE(memory.data(), nullptr);
}

/// A backend counts what DeviceMemory holds of it, and the most at once.
TEST(BackendMemory, CountsWhatIsHeld) {
  std::unique_ptr<Backend> backend = makeCpuBackend();
  {
    DeviceMemory a, b;
    ASSERT_OK(a.allocate(*backend, 1000));
    ASSERT_OK(b.allocate(*backend, 24));
    EXPECT_EQ(backend->heldBytes(), 1024u);
    ASSERT_OK(a.allocate(*backend, 10)); // replaces its 1000 bytes
    EXPECT_EQ(backend->heldBytes(), 34u);
    DeviceMemory c = std::move(b); // moved, not counted twice
    EXPECT_EQ(backend->heldBytes(), 34u);
    EXPECT_FALSE(b.allocate(*backend, size_t{1} << 62).ok()); // a failure holds nothing
    EXPECT_EQ(backend->heldBytes(), 34u);
  }
  EXPECT_EQ(backend->heldBytes(), 0u);
  EXPECT_EQ(backend->heldPeakBytes(), 1024u);
}

TEST(Rng, ParameterInitDependsOnGlobalIndexOnly) {
  // A tensor-parallel shard holds exactly its block of the whole tensor's initial
  // values, along either dimension: no layout changes a parameter's initial value.
  std::vector<int64_t> shape{6, 10};
  auto backend = makeCpuBackend();
  auto init = [&](int shardDim, int rank, int parts) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<int64_t> local = shape;
    if (shardDim >= 0)
      local[shardDim] /= parts;
    fbb.Finish(plan::CreateParam(fbb, fbb.CreateString("h.3.mlp.fc.weight"),
                                 fbb.CreateVector(local), plan::DType::F32, plan::Init::Normal,
                                 0.02, fbb.CreateVector(shape), shardDim));
    const auto &param = *flatbuffers::GetRoot<plan::Param>(fbb.GetBufferPointer());
    std::vector<float> values(local[0] * local[1]);
    TensorView t;
    t.data = values.data();
    t.rank = 2;
    t.shape[0] = local[0];
    t.shape[1] = local[1];
    EXPECT_OK(backend->initParameter(t, param, 9, rank, parts));
    return values;
  };
  std::vector<float> whole = init(-1, 0, 1);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<float> rows = init(0, rank, 2), cols = init(1, rank, 2);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 10; ++j)
        EXPECT_EQ(rows[i * 10 + j], whole[(rank * 3 + i) * 10 + j]);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 5; ++j)
        EXPECT_EQ(cols[i * 5 + j], whole[i * 10 + rank * 5 + j]);
  }
  double mean = 0, var = 0;
  for (float x : whole)
    mean += x / 60;
  for (float x : whole)
    var += (x - mean) * (x - mean) / 60;
  EXPECT_NEAR(std::sqrt(var), 0.02, 0.006);
  EXPECT_NEAR(mean, 0.0, 0.01);
}

TEST(Rng, DropoutMasksFollowTheirCounters) {
  // Each counter (seed, both of its words, step, micro-batch, stream) changes the whole
  // mask: changed alone,
  // it draws an independent one, whose agreement with the first is that of two coin flips
  // (0.75² + 0.25² at rate 0.25); unchanged, the same mask (a pure function).
  const double rate = 0.25, independent = 0.75 * 0.75 + 0.25 * 0.25;
  const uint64_t n = 1 << 16;
  struct Counters {
    uint64_t seed;
    uint32_t step, microBatch, stream;
  };
  const Counters base{5, 10, 2, 4};
  const Counters others[] = {{6, 10, 2, 4}, {5 | (uint64_t{1} << 32), 10, 2, 4},
                             {5, 11, 2, 4}, {5, 10, 3, 4}, {5, 10, 2, 5}};
  const char *names[] = {"seed", "seed's high word", "step", "micro-batch", "stream"};
  auto keeps = [&](const Counters &c, uint64_t i) {
    return rng::dropoutKeeps(c.seed, c.step, c.microBatch, c.stream, i, rate);
  };
  uint64_t kept = 0, same = 0;
  for (uint64_t i = 0; i < n; ++i) {
    kept += keeps(base, i);
    same += keeps(base, i) == keeps(Counters(base), i);
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - rate, 0.01);
  EXPECT_EQ(same, n);
  for (int k = 0; k < 5; ++k) {
    uint64_t agree = 0;
    for (uint64_t i = 0; i < n; ++i)
      agree += keeps(base, i) == keeps(others[k], i);
    EXPECT_NEAR(static_cast<double>(agree) / n, independent, 0.01)
        << "another " << names[k] << " must draw an independent mask";
  }
}

TEST(Rng, ParameterNamesInitialiseIndependently) {
  // Two parameters of the same shape, told apart only by their names, draw uncorrelated
  // values; the same name, the same values.
  const uint64_t n = 1 << 14;
  const uint64_t a = rng::nameHash("h.0.attn.qkv.weight"), b = rng::nameHash("h.1.attn.qkv.weight");
  double dot = 0, normA = 0, normB = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double x = rng::standardNormal(9, a, i), y = rng::standardNormal(9, b, i);
    EXPECT_EQ(x, rng::standardNormal(9, a, i));
    dot += x * y;
    normA += x * x;
    normB += y * y;
  }
  EXPECT_NEAR(dot / std::sqrt(normA * normB), 0.0, 0.03);
  EXPECT_NEAR(normA / n, 1.0, 0.05);
}

TEST(Rng, BoxMullerMathIsWithinUlpsOfTheLibrarys) {
  // The logarithm and the sine and cosine written out for the device's sake: within a
  // few ulps of the C library's over every exponent of (0, 1] and a fine sweep of turns,
  // and exact where exactness is cheap (ln 1 = 0, a quarter turn).
  auto ulps = [](double got, double want) {
    return std::abs(got - want) / std::max(std::abs(want) * 0x1p-52, 0x1p-1074);
  };
  double worstLog = 0, worstTrig = 0;
  for (int i = 0; i < 200000; ++i) {
    const double x = std::ldexp(1.0 + i / 200000.0, -(i % 33)) / 2.0; // (2^-34, 1]
    worstLog = std::max(worstLog, ulps(rng::exact::log(x), std::log(x)));
    const double t = (i + 0.5) / 200000.0;
    double sine, cosine;
    rng::exact::sinCosTurns(t, sine, cosine);
    // In units of 2^-52 (near a zero of one, relative error means nothing): the
    // library's side carries up to 3 of them from rounding 2πt.
    const double angle = 6.283185307179586476925286766559 * t;
    worstTrig = std::max({worstTrig, std::abs(sine - std::sin(angle)) / 0x1p-52,
                          std::abs(cosine - std::cos(angle)) / 0x1p-52});
  }
  EXPECT_LT(worstLog, 4.0);
  EXPECT_LT(worstTrig, 8.0);
  EXPECT_EQ(rng::exact::log(1.0), 0.0);
  double sine, cosine;
  rng::exact::sinCosTurns(0.25, sine, cosine);
  EXPECT_EQ(sine, 1.0);
  EXPECT_EQ(cosine, 0.0);
}

TEST(Rng, MasksOfHugeTensorsDoNotRepeat) {
  // Attention probabilities of a large model exceed 2^34 elements; the mask 2^34
  // elements on is a fresh one, not a copy.
  const double rate = 0.5;
  const uint64_t n = 1 << 14, far = uint64_t{1} << 34;
  uint64_t same = 0;
  rng::DropoutMask run(5, 10, 2, 4, rate);
  for (uint64_t i = 0; i < n; ++i) {
    const bool k = rng::dropoutKeeps(5, 10, 2, 4, far + i, rate);
    same += k == rng::dropoutKeeps(5, 10, 2, 4, i, rate);
    EXPECT_EQ(run.keeps(far + i), k); // the cached draw is the same function
  }
  EXPECT_NEAR(static_cast<double>(same) / n, 0.5, 0.02);
}

} // namespace
} // namespace mt
