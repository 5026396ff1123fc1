// The executor against the compiler's promises: the arena reaches exactly the planned
// peak, the plan's buffer reuse changes no bit of the result, and random numbers
// depend on global indices only.
#include "exec/Executor.h"
#include "CompileWithMtc.h"
#include "StatusAssertions.h"
#include "TestSeed.h"
#include "backends/Backend.h"
#include "comm/Comm.h"
#include "core/Rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

namespace mt {
namespace {

struct StepRun {
  std::unique_ptr<Backend> backend = makeCpuBackend();
  std::unique_ptr<Comm> comm = makeLocalComm();
  std::unique_ptr<Executor> executor;
  double loss = 0;
};

/// runStep's micro-batch of `n` tokens and targets.
void stepBatch(size_t n, std::vector<int32_t> &tokens, std::vector<int32_t> &targets) {
  tokens.resize(n);
  targets.resize(n);
  for (size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>((i * 37) % 256);
    targets[i] = static_cast<int32_t>((i * 11 + 5) % 256);
  }
}

void runStep(const LoadedPlan &plan, ExecutorOptions options, StepRun &run) {
  ASSERT_TRUE(Executor::create(plan, *run.backend, *run.comm, options, run.executor).ok());
  ASSERT_TRUE(run.executor->initParameters(42).ok());
  std::vector<int32_t> tokens, targets;
  stepBatch(run.executor->tokensPerMicroBatch(), tokens, targets);
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

/// Evaluation runs a program forward to its loss and no further, without dropout: the
/// gradients a step accumulated are untouched, the loss is the one a plan without
/// dropout computes, whatever the random numbers' counters, and nothing is timed.
TEST_F(ExecutorTest, EvaluationIsTheForwardWithoutDropout) {
  LoadedPlan plain;
  const std::string path = test::compileModel(
      test::zooModel("gpt-tiny"),
      "--micro-batch-size 2 --global-batch-size 2 --attention-dropout 0 --hidden-dropout 0",
      "executor_test_plain");
  ASSERT_FALSE(path.empty());
  ASSERT_OK(LoadedPlan::read(path, plain));
  StepRun withDropout, without;
  runStep(plan, {}, withDropout);
  runStep(plain, {}, without);
  ASSERT_NE(withDropout.loss, without.loss) << "the plan must drop something in training";

  std::vector<int32_t> tokens, targets;
  stepBatch(withDropout.executor->tokensPerMicroBatch(), tokens, targets);
  auto &params = withDropout.executor->parameters();
  std::vector<std::vector<char>> grads;
  for (auto &p : params)
    grads.emplace_back(static_cast<char *>(p.grad.data),
                       static_cast<char *>(p.grad.data) + p.bytes);
  Profile profile(withDropout.backend->stopwatch());
  withDropout.executor->setProfile(&profile);
  for (StepContext context : {StepContext{7, 0, 0}, StepContext{8, 3, 1}}) {
    double loss = 0;
    ASSERT_OK(withDropout.executor->evaluate(tokens.data(), targets.data(), context, loss));
    EXPECT_EQ(loss, without.loss);
  }
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(std::memcmp(params[i].grad.data, grads[i].data(), params[i].bytes), 0)
        << params[i].name << "'s gradient changed";
  EXPECT_TRUE(profile.entries().empty());
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

/// The CPU backend, recording as a queued backend does: record() keeps the calls its
/// work makes (running none), a replay runs them with the replay's own context, and what
/// a call finds wrong with its data is reported by checkRuns, not by run().
class RecordingBackend final : public Backend {
public:
  const char *name() const override { return "recording"; }
  Status allocate(size_t bytes, void *&out) override { return cpu_->allocate(bytes, out); }
  void release(void *data) noexcept override { cpu_->release(data); }
  Status copyToDevice(void *device, const void *host, size_t bytes) override {
    return cpu_->copyToDevice(device, host, bytes);
  }
  Status copyToHost(void *host, const void *device, size_t bytes) override {
    return cpu_->copyToHost(host, device, bytes);
  }
  Status setBytes(void *device, uint8_t value, size_t bytes) override {
    return cpu_->setBytes(device, value, bytes);
  }
  Status extentNot(const void *device, uint8_t value, size_t bytes, uint64_t &extent) override {
    return cpu_->extentNot(device, value, bytes, extent);
  }
  Status copyOnDevice(void *dst, const void *src, size_t bytes) override {
    return cpu_->copyOnDevice(dst, src, bytes);
  }
  Status convert(const TensorView &dst, const TensorView &src) override {
    return cpu_->convert(dst, src);
  }
  Status initParameter(const TensorView &weight, const plan::Param &param, uint64_t seed,
                       int tpRank, int tpSize) override {
    return cpu_->initParameter(weight, param, seed, tpRank, tpSize);
  }
  Status sumOfSquares(const std::vector<TensorView> &xs, double &sum) override {
    return cpu_->sumOfSquares(xs, sum);
  }
  Status adamw(const std::vector<AdamWTensors> &tensors, const AdamWStep &step) override {
    return cpu_->adamw(tensors, step);
  }

  Status run(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
             const StepContext &context) override {
    if (!recording_)
      return runNow(inst, in, out, context);
    calls_.push_back({&inst, {in, in + inst.inputs()->size()},
                      {out, out + inst.outputs()->size()}});
    return Status::success();
  }
  bool records() const override { return true; }
  bool recordable(const plan::Instruction &inst) const override {
    return !unrecordable.count(inst.opcode());
  }
  std::unique_ptr<Recording> record(const std::function<Status()> &work,
                                    std::string &why) override {
    ++attempts;
    recording_ = true;
    calls_.clear();
    Status s = work();
    recording_ = false;
    if (refuse > 0) {
      --refuse;
      why = "refused on purpose";
      return nullptr;
    }
    if (!s.ok()) {
      why = s.message();
      return nullptr;
    }
    return std::make_unique<Replay>(*this, std::exchange(calls_, {}));
  }
  Status checkRuns(size_t &call) override {
    call = failedCall_;
    runs_ = 0;
    return std::exchange(failure_, Status::success());
  }

  /// Memory the recordings use moves: each is stale from now on.
  void move() { ++generation_; }
  int attempts = 0, replays = 0;
  int refuse = 0;      // recordings to refuse
  std::set<plan::Opcode> unrecordable; // run between the recorded stretches
  size_t failAt = ~size_t{0}; // the call that fails outright, counted from each checkRuns

private:
  struct Call {
    const plan::Instruction *inst;
    std::vector<TensorView> in, out;
  };
  class Replay final : public Recording {
  public:
    Replay(RecordingBackend &backend, std::vector<Call> calls)
        : backend_(backend), calls_(std::move(calls)), generation_(backend.generation_) {}
    Status replay(const StepContext &context, bool &stale) override {
      stale = generation_ != backend_.generation_;
      if (stale)
        return Status::success();
      ++backend_.replays;
      for (const Call &c : calls_)
        MT_TRY(backend_.runNow(*c.inst, c.in.data(), c.out.data(), context));
      return Status::success();
    }

  private:
    RecordingBackend &backend_;
    std::vector<Call> calls_;
    int generation_;
  };
  Status runNow(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
                const StepContext &context) {
    const size_t call = runs_++;
    if (Status s = cpu_->run(inst, in, out, context); !s.ok() && failure_.ok()) {
      failure_ = s;
      failedCall_ = call;
    }
    return call == failAt ? Status::failure("broken on purpose") : Status::success();
  }

  std::unique_ptr<Backend> cpu_ = makeCpuBackend();
  bool recording_ = false;
  std::vector<Call> calls_;
  int generation_ = 0;
  size_t runs_ = 0, failedCall_ = 0;
  Status failure_ = Status::success();
};

/// A program recorded once and replayed: gpt-tiny with dropout, so that each
/// micro-batch draws its own masks from the context its replay is given.
class RecordedProgramsTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string path = test::compileModel(
        test::zooModel("gpt-tiny"),
        "--micro-batch-size 2 --global-batch-size 2 --hidden-dropout 0.1 --attention-dropout 0.1",
        "recorded_programs_test");
    ASSERT_FALSE(path.empty());
    ASSERT_OK(LoadedPlan::read(path, plan));
  }

  struct Trace {
    std::vector<double> losses;
    std::vector<std::vector<char>> gradients;
  };
  /// Steps 0-2 of two micro-batches each, all on the same tokens, the gradients
  /// accumulating; `between` runs before each. Through `comm`, or a process's own.
  void train(Backend &backend, ExecutorOptions options, Trace &trace,
             const std::function<void(int)> &between = {}, Comm *comm = nullptr) {
    std::unique_ptr<Comm> local = makeLocalComm();
    std::unique_ptr<Executor> executor;
    ASSERT_OK(Executor::create(plan, backend, comm ? *comm : *local, options, executor));
    ASSERT_OK(executor->initParameters(42));
    std::vector<int32_t> tokens(executor->tokensPerMicroBatch()), targets(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 37) % 256);
      targets[i] = static_cast<int32_t>((i * 11 + 5) % 256);
    }
    for (int run = 0; run < 6; ++run) {
      if (between)
        between(run);
      double loss = 0;
      ASSERT_OK(executor->forwardBackward(tokens.data(), targets.data(),
                                          StepContext{7, static_cast<uint32_t>(run / 2),
                                                      static_cast<uint32_t>(run % 2)},
                                          loss));
      trace.losses.push_back(loss);
    }
    recorded = executor->recordings().programs;
    stretches = executor->recordings().stretches;
    for (const Executor::Parameter &p : executor->parameters()) {
      const char *g = static_cast<const char *>(p.grad.data);
      trace.gradients.emplace_back(g, g + p.bytes);
    }
  }
  void expectSameBits(const Trace &a, const Trace &b) {
    ASSERT_EQ(a.losses.size(), b.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i)
      EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0) << "run " << i;
    EXPECT_EQ(a.gradients, b.gradients);
  }

  LoadedPlan plan;
  int recorded = 0, stretches = 0;
};

TEST_F(RecordedProgramsTest, ReplaysGiveTheInstructionsBits) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  Trace eager;
  ASSERT_NO_FATAL_FAILURE(train(*cpu, {}, eager));
  EXPECT_EQ(recorded, 0) << "the CPU backend records nothing";
  // The masks follow the context: the same tokens lose differently in each micro-batch.
  EXPECT_NE(eager.losses[0], eager.losses[1]);
  EXPECT_NE(eager.losses[0], eager.losses[2]);

  // Run 0 goes instruction by instruction, run 1 is recorded and replayed, and so are
  // runs 2-5.
  RecordingBackend backend;
  Trace replayed;
  ASSERT_NO_FATAL_FAILURE(train(backend, {}, replayed));
  EXPECT_EQ(recorded, 1);
  EXPECT_EQ(stretches, 1) << "a program without collectives is one recording";
  EXPECT_EQ(backend.attempts, 1);
  EXPECT_EQ(backend.replays, 5);
  expectSameBits(eager, replayed);
}

/// Instructions no recording may hold run one by one between the recorded stretches of
/// their program, each stretch recorded at its second run: gpt-tiny's 5 LayerNorms (the
/// first after the embeddings' instructions) leave 6 stretches.
TEST_F(RecordedProgramsTest, UnrecordableInstructionsRunBetweenRecordedStretches) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  Trace eager, replayed;
  ASSERT_NO_FATAL_FAILURE(train(*cpu, {}, eager));
  RecordingBackend backend;
  backend.unrecordable = {plan::Opcode::LayerNorm};
  ASSERT_NO_FATAL_FAILURE(train(backend, {}, replayed));
  EXPECT_EQ(recorded, 1);
  EXPECT_EQ(stretches, 6);
  EXPECT_EQ(backend.attempts, 6);
  EXPECT_EQ(backend.replays, 6 * 5);
  expectSameBits(eager, replayed);
}

/// Rank 0 of a tensor- or context-parallel pair whose twin holds the same data (so that
/// one process can run a tp-2 or cp-2 plan): an all-reduce doubles, an all-gather repeats
/// its input along the axis, a ring step receives what it sends. Counts the collectives.
class TwinComm final : public Comm {
public:
  explicit TwinComm(Group g = Group::Tensor) {
    (g == Group::Context ? position_.cpSize : position_.tpSize) = 2;
  }
  Status shift(Group g, int, const void *send, int, void *recv, size_t bytes, int) override {
    if (g != Group::Context)
      return Status::failure("a twin's ring is of the context-parallel group");
    std::memcpy(recv, send, bytes);
    return Status::success();
  }
  Status allReduceSum(Group g, const TensorView &in, const TensorView &out) override {
    ++collectives;
    if (g != Group::Tensor || in.dtype != plan::DType::F32)
      return Status::failure("a twin reduces f32 over the tensor-parallel group only");
    const float *x = static_cast<const float *>(in.data);
    float *y = static_cast<float *>(out.data);
    for (int64_t i = 0; i < in.numel(); ++i)
      y[i] = 2 * x[i];
    return Status::success();
  }
  Status allGather(Group g, const TensorView &in, const TensorView &out, int axis) override {
    ++collectives;
    if (g != Group::Tensor || in.data == out.data)
      return Status::failure("a twin gathers apart over the tensor-parallel group only");
    int64_t outer = 1;
    for (int d = 0; d < axis; ++d)
      outer *= in.shape[d];
    const size_t block = in.bytes() / static_cast<size_t>(outer);
    const char *x = static_cast<const char *>(in.data);
    char *y = static_cast<char *>(out.data);
    for (int64_t o = 0; o < outer; ++o)
      for (int copy = 0; copy < 2; ++copy)
        std::memcpy(y + (2 * o + copy) * block, x + o * block, block);
    return Status::success();
  }
  Status reduceScatter(Group, const TensorView &, const TensorView &, int) override {
    return Status::failure("a twin does not scatter");
  }
  Status allReduceSum(Group, double &value) override {
    value *= 2;
    return Status::success();
  }
  Status allReduceSumAmong(Group, const std::vector<int> &, const TensorView &) override {
    return Status::failure("a twin has no stages");
  }
  Status allToAll(Group, const void *, const std::vector<size_t> &, void *,
                  const std::vector<size_t> &) override {
    return Status::failure("a twin has no experts");
  }
  Status send(Group, int, const void *, size_t, int) override {
    return Status::failure("a twin sends nothing");
  }
  Status recv(Group, int, void *, size_t, int) override {
    return Status::failure("a twin receives nothing");
  }
  Status waitSends() override { return Status::success(); }

  int collectives = 0;
};

/// A program with collectives is recorded in the stretches between them, and the
/// collectives run between the replays, each in its place: gpt-tiny under tp 2 (on a
/// twin pair) has 11 (10 all-reduces and the vocabulary-parallel loss's gather of its
/// statistics), none first, last or beside another, so 12 stretches. A collective left
/// out of a replay would leave its output as the micro-batch before wrote it, with other
/// dropout masks.
/// A queued backend's check of an id (which a failure names by its run among those since
/// the program began) names the instruction that read it after ring attention too, whose
/// steps run the backend cp times each: gpt-tiny under cp 2 with the p2p form, on a twin
/// pair, a bad target before any recording and in a replay.
TEST_F(RecordedProgramsTest, AnIdCheckAfterARingNamesItsInstruction) {
  const std::string path = test::compileModel(
      test::zooModel("gpt-tiny"),
      "--cp 2 --cp-comm-type p2p --micro-batch-size 2 --global-batch-size 2", "recorded_ring_test");
  ASSERT_FALSE(path.empty());
  ASSERT_OK(LoadedPlan::read(path, plan));
  auto bad = [&](Backend &backend, int runs, Status &failure) {
    TwinComm twin(Group::Context);
    std::unique_ptr<Executor> executor;
    ASSERT_OK(Executor::create(plan, backend, twin, {}, executor));
    ASSERT_OK(executor->initParameters(42));
    std::vector<int32_t> tokens(executor->tokensPerMicroBatch(), 3), targets = tokens;
    double loss = 0;
    for (int i = 0; i < runs; ++i)
      ASSERT_OK(executor->forwardBackward(tokens.data(), targets.data(), {7, 0, 0}, loss));
    targets[5] = 100000;
    failure = executor->forwardBackward(tokens.data(), targets.data(), {7, 0, 0}, loss);
  };
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  Status expected;
  ASSERT_NO_FATAL_FAILURE(bad(*cpu, 0, expected));
  ASSERT_FALSE(expected.ok());
  EXPECT_NE(expected.message().find("target id 100000 at position 5"), std::string::npos)
      << expected.message();
  for (int runs : {0, 2}) {
    RecordingBackend backend;
    Status named;
    ASSERT_NO_FATAL_FAILURE(bad(backend, runs, named));
    EXPECT_EQ(named.message(), expected.message()) << runs << " runs before";
    // 5 stretches around the 2 layers' rings forward and backward, replayed in the run
    // after the first and in the bad one.
    EXPECT_EQ(backend.replays, runs > 0 ? 10 : 0);
  }
}

TEST_F(RecordedProgramsTest, CollectivesRunBetweenRecordedStretches) {
  const std::string path =
      test::compileModel(test::zooModel("gpt-tiny"),
                         "--tp 2 --micro-batch-size 2 --global-batch-size 2 --hidden-dropout 0.1 "
                         "--attention-dropout 0.1",
                         "recorded_stretches_test");
  ASSERT_FALSE(path.empty());
  ASSERT_OK(LoadedPlan::read(path, plan));
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  Trace eager, replayed;
  TwinComm eagerTwin, twin;
  ASSERT_NO_FATAL_FAILURE(train(*cpu, {}, eager, {}, &eagerTwin));
  EXPECT_EQ(eagerTwin.collectives, 11 * 6);
  RecordingBackend backend;
  ASSERT_NO_FATAL_FAILURE(train(backend, {}, replayed, {}, &twin));
  EXPECT_EQ(twin.collectives, 11 * 6);
  EXPECT_EQ(recorded, 1);
  EXPECT_EQ(stretches, 12);
  EXPECT_EQ(backend.attempts, 12);
  EXPECT_EQ(backend.replays, 12 * 5);
  expectSameBits(eager, replayed);
}

TEST_F(RecordedProgramsTest, MovedMemoryIsRecordedAgain) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  Trace eager, replayed;
  ASSERT_NO_FATAL_FAILURE(train(*cpu, {}, eager));
  RecordingBackend backend;
  // Before run 3: the recording made at run 1 is stale, so run 3 goes instruction by
  // instruction and run 4 records again.
  ASSERT_NO_FATAL_FAILURE(train(backend, {}, replayed, [&](int run) {
    if (run == 3)
      backend.move();
  }));
  EXPECT_EQ(backend.attempts, 2);
  EXPECT_EQ(backend.replays, 2 + 2);
  EXPECT_EQ(recorded, 1);
  expectSameBits(eager, replayed);
}

TEST_F(RecordedProgramsTest, ARefusedRecordingRunsTheInstructions) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  Trace eager, refused, once, off;
  ASSERT_NO_FATAL_FAILURE(train(*cpu, {}, eager));
  // Refused every time: tried on runs 1-3, then never again.
  RecordingBackend always;
  always.refuse = 100;
  ASSERT_NO_FATAL_FAILURE(train(always, {}, refused));
  EXPECT_EQ(always.attempts, 3);
  EXPECT_EQ(always.replays, 0);
  EXPECT_EQ(recorded, 0);
  expectSameBits(eager, refused);
  // Refused once: recorded at run 2, replayed from then on.
  RecordingBackend backend;
  backend.refuse = 1;
  ASSERT_NO_FATAL_FAILURE(train(backend, {}, once));
  EXPECT_EQ(backend.attempts, 2);
  EXPECT_EQ(backend.replays, 4);
  expectSameBits(eager, once);
  // Not asked to record: never tries.
  RecordingBackend unasked;
  ExecutorOptions options;
  options.recordPrograms = false;
  ASSERT_NO_FATAL_FAILURE(train(unasked, options, off));
  EXPECT_EQ(unasked.attempts, 0);
  expectSameBits(eager, off);
}

/// Ids a replay finds out of range are reported as the instruction that read them,
/// exactly as a run instruction by instruction reports them.
TEST_F(RecordedProgramsTest, AReplayNamesTheInstructionOfABadId) {
  for (bool target : {false, true}) {
    SCOPED_TRACE(target ? "a target" : "a token");
    auto bad = [&](Backend &backend, int runs, Status &failure) {
      std::unique_ptr<Comm> comm = makeLocalComm();
      std::unique_ptr<Executor> executor;
      ASSERT_OK(Executor::create(plan, backend, *comm, {}, executor));
      ASSERT_OK(executor->initParameters(42));
      std::vector<int32_t> tokens(executor->tokensPerMicroBatch(), 3), targets = tokens;
      double loss = 0;
      for (int i = 0; i < runs; ++i)
        ASSERT_OK(executor->forwardBackward(tokens.data(), targets.data(), {7, 0, 0}, loss));
      (target ? targets : tokens)[5] = 100000;
      failure = executor->forwardBackward(tokens.data(), targets.data(), {7, 0, 0}, loss);
      // The next run, of good ids again, succeeds: nothing of the failure is left.
      (target ? targets : tokens)[5] = 3;
      ASSERT_OK(executor->forwardBackward(tokens.data(), targets.data(), {7, 0, 0}, loss));
    };
    std::unique_ptr<Backend> cpu = makeCpuBackend();
    RecordingBackend backend;
    Status expected, replayed;
    ASSERT_NO_FATAL_FAILURE(bad(*cpu, 0, expected));
    ASSERT_NO_FATAL_FAILURE(bad(backend, 2, replayed));
    ASSERT_FALSE(expected.ok());
    EXPECT_NE(expected.message().find(target ? "target id 100000 at position 5"
                                             : "token id 100000 at position 5"),
              std::string::npos)
        << expected.message();
    EXPECT_EQ(replayed.message(), expected.message());
    EXPECT_EQ(backend.replays, 3) << "the bad run, and the run after it, were replays";
  }
}

/// A bad id a queued backend found is reported, not a failure it may have caused later
/// in the same program.
TEST_F(RecordedProgramsTest, ABadIdComesBeforeTheFailureAfterIt) {
  for (bool bad : {true, false}) {
    RecordingBackend backend;
    backend.failAt = 3;
    std::unique_ptr<Comm> comm = makeLocalComm();
    std::unique_ptr<Executor> executor;
    ASSERT_OK(Executor::create(plan, backend, *comm, {}, executor));
    ASSERT_OK(executor->initParameters(42));
    std::vector<int32_t> tokens(executor->tokensPerMicroBatch(), 3);
    if (bad)
      tokens[5] = 100000;
    double loss = 0;
    Status s = executor->forwardBackward(tokens.data(), tokens.data(), {7, 0, 0}, loss);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(bad ? "instruction 0 (Embedding): token id 100000 at position 5"
                                   : "instruction 3 ("),
              std::string::npos)
        << s.message();
    EXPECT_EQ(s.message().find("broken on purpose") == std::string::npos, bad) << s.message();
  }
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

/// AdamW writes a weight's 16-bit copy where given, as convert() rounds the updated
/// weights, and leaves alone what it is not given.
TEST(BackendAdamW, WritesTheCopyConvertWouldRound) {
  std::unique_ptr<Backend> backend = makeCpuBackend();
  const int64_t n = 1000;
  std::mt19937_64 rng(test::testSeed());
  std::normal_distribution<float> normal;
  std::vector<float> stores[4];
  for (std::vector<float> &s : stores) {
    s.resize(2 * n);
    for (float &x : s)
      x = std::abs(normal(rng)); // the second moment's too
  }
  std::vector<uint16_t> copy(2 * n, 0xabcd);
  auto view = [&](void *data, plan::DType dtype) {
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.rank = 1;
    v.shape[0] = n;
    return v;
  };
  std::vector<AdamWTensors> tensors(2);
  for (int t = 0; t < 2; ++t) {
    TensorView *views[] = {&tensors[t].weight, &tensors[t].grad, &tensors[t].expAvg,
                           &tensors[t].expAvgSq};
    for (int i = 0; i < 4; ++i)
      *views[i] = view(stores[i].data() + t * n, plan::DType::F32);
  }
  tensors[0].compute = view(copy.data(), plan::DType::BF16); // the second has none
  AdamWStep step;
  step.lr = 1e-2;
  ASSERT_OK(backend->adamw(tensors, step));
  std::vector<uint16_t> rounded(n);
  ASSERT_OK(backend->convert(view(rounded.data(), plan::DType::BF16), tensors[0].weight));
  EXPECT_EQ(std::memcmp(copy.data(), rounded.data(), sizeof(uint16_t) * n), 0);
  EXPECT_EQ(std::count(copy.begin() + n, copy.end(), 0xabcd), n);
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
  for (uint64_t i = 0; i < n; ++i) {
    const bool k = rng::dropoutKeeps(5, 10, 2, 4, far + i, rate);
    same += k == rng::dropoutKeeps(5, 10, 2, 4, i, rate);
  }
  EXPECT_NEAR(static_cast<double>(same) / n, 0.5, 0.02);
}

TEST(Rng, QuadDrawsDecideAsEachElementDoes) {
  // The GPU's four-at-a-time draw keeps exactly the elements dropoutKeeps keeps: unsharded
  // (one block per quad), sharded along a middle axis whose shards' rows start mid-block
  // (a local [2, 3, 5] of a global [2, 6, 5], shard 1: 15 elements a row, so the quads
  // straddle), and at a tail of 1 to 3 elements; and keeps everything at rate 0.
  TensorView local;
  local.rank = 3;
  local.shape = {2, 3, 5};
  // Also a block of a context-parallel share: sequence-parallel block 1 of 2 of context
  // rank 1 of 2's share (chunks 1 and 2 of 4 chunks of 3 rows), whose rows leave one
  // chunk for the next.
  for (const ShardMap &shard :
       {ShardMap{}, ShardMap{local, 1, 1, 2}, ShardMap{local, 1, 1, 2, 1, 2}}) {
    for (int64_t n : {30, 29, 28, 27}) {
      for (double rate : {0.0, 0.3}) {
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i += 4) {
          const int count = static_cast<int>(std::min<int64_t>(4, n - i));
          uint8_t keep[4] = {9, 9, 9, 9};
          rng::dropoutKeepsQuad(5, 10, 2, 4, shard, i, count, rate, keep);
          for (int k = 0; k < count; ++k) {
            EXPECT_EQ(keep[k] != 0, rng::dropoutKeeps(5, 10, 2, 4, shard.global(i + k), rate))
                << "element " << i + k << " of " << n << " at rate " << rate;
            kept += keep[k];
          }
        }
        if (rate == 0) {
          EXPECT_EQ(kept, n);
        }
      }
    }
  }
}

TEST(SequenceMap, ContextSharesHoldEveryPositionOnceInBalancedChunks) {
  // Every (context rank, sequence-parallel block) of a sequence cut into 2·cp chunks:
  // together they hold each position once; context rank r holds chunks r and 2·cp−1−r;
  // rowOf inverts the map and refuses positions held elsewhere; run() cuts the rows
  // where their positions jump; rowsBefore counts the rows before a position.
  for (int cp : {1, 2, 3, 4})
    for (int parts : {1, 2, 3, 4}) {
      const int64_t chunk = 6, whole = 2 * cp * chunk, share = whole / cp;
      if (share % parts != 0)
        continue;
      const int64_t rows = share / parts;
      std::vector<int> held(whole, 0);
      for (int r = 0; r < cp; ++r)
        for (int block = 0; block < parts; ++block) {
          const SequenceMap map(rows, block, parts, r, cp);
          const int64_t run = map.run(rows);
          ASSERT_EQ(rows % run, 0) << "cp " << cp << " parts " << parts;
          for (int64_t t = 0; t < rows; ++t) {
            const int64_t p = map(t);
            ASSERT_GE(p, 0);
            ASSERT_LT(p, whole);
            ++held[p];
            const int64_t c = p / chunk, ownChunk = cp == 1 ? c : (c < cp ? c : 2 * cp - 1 - c);
            EXPECT_EQ(cp == 1 ? 0 : ownChunk, cp == 1 ? 0 : r) << "position " << p;
            EXPECT_EQ(map.rowOf(p), t);
            if (t % run != 0) { // inside a run, positions are consecutive
              EXPECT_EQ(p, map(t - 1) + 1);
            }
          }
          for (int64_t p = 0; p < whole; ++p) {
            const int64_t t = map.rowOf(p);
            if (t >= 0 && t < rows) {
              EXPECT_EQ(map(t), p);
            }
            for (int64_t prefix : {rows, rows / 2}) {
              int64_t before = 0;
              for (int64_t u = 0; u < prefix; ++u)
                before += map(u) < p;
              EXPECT_EQ(map.rowsBefore(p, prefix), before) << "position " << p;
            }
          }
        }
      for (int64_t p = 0; p < whole; ++p)
        EXPECT_EQ(held[p], 1) << "position " << p << " of cp " << cp << " parts " << parts;
    }
}

TEST(ShardMap, ContextParallelBlocksNumberEveryElementOnce) {
  // [2, S, 3] over cp 2 and sp 2: the four local [2, S/4, 3] tensors' global indices
  // cover the global tensor once, so masks drawn per global index are the serial ones.
  const int64_t s = 16, local = s / 4;
  std::vector<int> seen(2 * s * 3, 0);
  TensorView t;
  t.rank = 3;
  t.shape = {2, local, 3};
  for (int r = 0; r < 2; ++r)
    for (int block = 0; block < 2; ++block) {
      const ShardMap map(t, 1, block, 2, r, 2);
      for (int64_t i = 0; i < t.numel(); ++i) {
        const int64_t g = map.global(i);
        ASSERT_GE(g, 0);
        ASSERT_LT(g, 2 * s * 3);
        ++seen[g];
        if (i % map.run() != 0) {
          EXPECT_EQ(g, map.global(i - 1) + 1);
        }
      }
    }
  for (int count : seen)
    EXPECT_EQ(count, 1);
}

} // namespace
} // namespace mt
