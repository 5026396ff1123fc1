// The plan reader refuses every damaged plan with a message that says what is wrong,
// and never crashes: a truncated, bit-flipped or wrong-version file, and a bounded
// random-mutation fuzz that re-seals the CRC so the mutations reach the FlatBuffers
// verifier and the semantic checks behind it, and runs a step of every plan accepted;
// the same fuzz of a pipelined plan, and pipelined plans edited in place into a
// deadlocking schedule, a program out of its place, a gradient sent to another stage's
// parameter, an instruction that writes over or reads a parameter's gradient, and a norm
// gradient's residual gradient of another shape.
#include "CompileWithMtc.h"
#include "OpCases.h"
#include "StatusAssertions.h"
#include "TestSeed.h"
#include "backends/Backend.h"
#include "comm/Comm.h"
#include "exec/Executor.h"
#include "plan/PlanFormat.h"
#include "plan/PlanReader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fstream>
#include <iterator>
#include <random>
#include <set>

namespace mt {
namespace {

/// The bytes of gpt-tiny compiled by the mtc under test with `flags`.
std::vector<uint8_t> compileTiny(const std::string &flags, const std::string &name) {
  std::string path = test::compileModel(test::zooModel("gpt-tiny"), flags, name);
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

/// Rewrites a plan file's length and CRC so that only the reader's deeper checks can
/// object.
void reseal(std::vector<uint8_t> &file) {
  size_t n = file.size() - plan::kTrailerBytes;
  plan::putLittleEndian(file.data() + 8, n - plan::kHeaderBytes, 8);
  plan::putLittleEndian(file.data() + n, plan::crc32Of(file.data(), n), 4);
}

/// gpt-tiny, once for the whole suite.
const std::vector<uint8_t> &compiledPlan() {
  static const std::vector<uint8_t> bytes =
      compileTiny("--micro-batch-size 2 --global-batch-size 4", "plan_reader_test");
  return bytes;
}

class PlanReaderTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(compiledPlan().empty()) << MTC_BINARY << " could not compile gpt-tiny";
  }
  std::vector<uint8_t> plan() const { return compiledPlan(); }

  static Status parse(std::vector<uint8_t> bytes) {
    LoadedPlan loaded;
    return LoadedPlan::parse(std::move(bytes), "test.mtp", loaded);
  }

  const uint64_t seed = test::testSeed("MT_FUZZ_SEED");
  std::mt19937_64 rng{seed};
};

TEST_F(PlanReaderTest, CompiledPlanLoadsWithItsContents) {
  LoadedPlan loaded;
  Status s = LoadedPlan::parse(plan(), "gpt-tiny.mtp", loaded);
  ASSERT_TRUE(s.ok()) << s.message();
  const plan::Plan &p = loaded.plan();
  EXPECT_EQ(p.micro_batch_size(), 2);
  EXPECT_EQ(p.global_batch_size(), 4);
  ASSERT_EQ(p.programs()->size(), 1u);
  // Two micro-batches, the gradient synchronisation, then the optimizer step.
  ASSERT_EQ(p.stages()->Get(0)->actions()->size(), 4u);
  EXPECT_EQ(p.stages()->Get(0)->actions()->Get(2)->kind(), plan::ActionKind::GradSync);
  EXPECT_EQ(p.stages()->Get(0)->actions()->Get(3)->kind(), plan::ActionKind::OptimizerStep);
  uint64_t parameters = 0;
  for (const plan::Param *param : *p.params()) {
    uint64_t n = 1;
    for (int64_t d : *param->shape())
      n *= d;
    parameters += n;
  }
  EXPECT_EQ(parameters, p.accounting()->parameters());
}

TEST_F(PlanReaderTest, TruncatedPlanIsNamedTruncated) {
  std::vector<uint8_t> full = plan();
  for (size_t keep : {size_t{10}, size_t{20}, full.size() / 2, full.size() - 1}) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + keep);
    Status s = parse(cut);
    ASSERT_FALSE(s.ok()) << "kept " << keep << " bytes";
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
  }
}

TEST_F(PlanReaderTest, WrongVersionIsNamed) {
  std::vector<uint8_t> file = plan();
  plan::putLittleEndian(file.data() + 4, plan::kFormatVersion + 1, 4);
  Status s = parse(file);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("version " + std::to_string(plan::kFormatVersion + 1)),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("reads version " + std::to_string(plan::kFormatVersion)),
            std::string::npos)
      << s.message();
}

TEST_F(PlanReaderTest, NotAPlanIsNamed) {
  std::string text = "module { func.func @forward() }";
  Status s = parse(std::vector<uint8_t>(text.begin(), text.end()));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not an mtc plan"), std::string::npos) << s.message();
  LoadedPlan loaded;
  Status missing = LoadedPlan::read("/nonexistent/plan.mtp", loaded);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("cannot open"), std::string::npos);
}

TEST_F(PlanReaderTest, EveryFlippedBitIsRefused) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<uint8_t> good = plan();
  std::uniform_int_distribution<size_t> bit(0, good.size() * 8 - 1);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bad = good;
    size_t b = bit(rng);
    bad[b / 8] ^= static_cast<uint8_t>(1u << (b % 8));
    Status s = parse(bad);
    ASSERT_FALSE(s.ok()) << "flipping bit " << b << " went unnoticed";
    EXPECT_FALSE(s.message().empty());
  }
}

/// Mutates `good` 3000 times (bytes overwritten, the payload cut short, small integers
/// written), reseals each, and runs what the reader accepts: nothing may crash or write
/// past the arena, and both layers of defence must refuse some.
void mutationsNeverCrash(const std::vector<uint8_t> &good, std::mt19937_64 &rng) {
  auto backend = makeCpuBackend();
  auto comm = makeLocalComm();
  const size_t payload = good.size() - plan::kHeaderBytes - plan::kTrailerBytes;
  std::uniform_int_distribution<size_t> pos(plan::kHeaderBytes, plan::kHeaderBytes + payload - 1);
  std::uniform_int_distribution<int> byte(0, 255), count(1, 8), kind(0, 2);
  int refusedByVerifier = 0, refusedByChecks = 0, accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> bad = good;
    switch (kind(rng)) {
    case 0: // overwrite a few bytes
      for (int k = count(rng); k > 0; --k)
        bad[pos(rng)] = static_cast<uint8_t>(byte(rng));
      break;
    case 1: // cut the payload short, with a header that agrees
      bad.resize(pos(rng));
      bad.resize(bad.size() + plan::kTrailerBytes);
      break;
    default: // small integers, the likeliest to survive the verifier
      for (int k = count(rng); k > 0; --k)
        bad[pos(rng)] = static_cast<uint8_t>(byte(rng) % 4);
      break;
    }
    reseal(bad);
    LoadedPlan loaded;
    Status s = LoadedPlan::parse(bad, "mutated.mtp", loaded);
    if (s.ok()) {
      // What the reader accepts, the executor can run (or refuse) without crashing.
      ++accepted;
      std::unique_ptr<Executor> executor;
      if (Executor::create(loaded, *backend, *comm, {}, executor).ok()) {
        std::vector<int32_t> ids(executor->tokensPerMicroBatch());
        for (size_t k = 0; k < ids.size(); ++k)
          ids[k] = static_cast<int32_t>(k % 512);
        double loss;
        (void)executor->forwardBackward(ids.data(), ids.data(), {1, 0, 0}, loss);
        // Nothing was written past the arena (it, and a guard after it, started out
        // holding the sentinel).
        uint64_t written = 0;
        EXPECT_OK(executor->arenaBytesWritten(Executor::kSentinel, written));
        EXPECT_LE(written, executor->plannedArenaBytes());
      }
      continue;
    }
    if (s.message().find("FlatBuffers verification failed") != std::string::npos)
      ++refusedByVerifier;
    else
      ++refusedByChecks;
  }
  // Both layers of defence were exercised, not only the first.
  EXPECT_GT(refusedByVerifier, 0);
  EXPECT_GT(refusedByChecks, 0);
  ::testing::Test::RecordProperty("accepted", accepted);
}

TEST_F(PlanReaderTest, ResealedMutationsNeverCrashTheReaderOrTheExecutor) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  mutationsNeverCrash(plan(), rng);
}

/// The same of mixtral-tiny, whose routing decides which rows its kernels touch: dropless,
/// and with its experts' capacity kept by the largest gates (the drop's -1 experts).
TEST_F(PlanReaderTest, ResealedMutationsOfAMixtureOfExpertsNeverCrash) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const char *capacity : {"", " --moe-expert-capacity-factor 1"}) {
    SCOPED_TRACE(capacity);
    const std::string path = test::compileModel(
        test::zooModel("mixtral-tiny"),
        std::string("--micro-batch-size 2 --global-batch-size 2 --seq-length 8") + capacity,
        capacity[0] ? "plan_reader_test_moe_drop" : "plan_reader_test_moe");
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> good((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    ASSERT_FALSE(good.empty()) << "mtc could not compile mixtral-tiny";
    mutationsNeverCrash(good, rng);
  }
}

/// gpt-tiny in two pipeline stages under 1F1B, four micro-batches.
const std::vector<uint8_t> &pipelinedPlan() {
  static const std::vector<uint8_t> bytes =
      compileTiny("--pp 2 --schedule 1f1b --micro-batch-size 1 --global-batch-size 4",
                  "plan_reader_pipelined_test");
  return bytes;
}

/// Parses a pipelined plan after `edit` changed it in place (and the CRC was resealed).
template <typename Edit> Status parseEdited(Edit edit) {
  std::vector<uint8_t> bytes = pipelinedPlan();
  edit(*plan::GetMutablePlan(bytes.data() + plan::kHeaderBytes));
  reseal(bytes);
  LoadedPlan loaded;
  return LoadedPlan::parse(std::move(bytes), "edited.mtp", loaded);
}

TEST(PipelinedPlanTest, CompiledPlanLoads) {
  ASSERT_FALSE(pipelinedPlan().empty());
  Status s = parseEdited([](plan::Plan &) {});
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(PipelinedPlanTest, ResealedMutationsNeverCrashTheReader) {
  const uint64_t seed = test::testSeed("MT_FUZZ_SEED");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng{seed};
  const std::vector<uint8_t> &good = pipelinedPlan();
  std::uniform_int_distribution<size_t> pos(plan::kHeaderBytes,
                                            good.size() - plan::kTrailerBytes - 1);
  std::uniform_int_distribution<int> small(0, 3), count(1, 8);
  int refusedByChecks = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> bad = good;
    for (int k = count(rng); k > 0; --k)
      bad[pos(rng)] = static_cast<uint8_t>(small(rng));
    reseal(bad);
    LoadedPlan loaded;
    Status s = LoadedPlan::parse(std::move(bad), "mutated.mtp", loaded);
    if (!s.ok() && s.message().find("FlatBuffers verification failed") == std::string::npos)
      ++refusedByChecks;
  }
  EXPECT_GT(refusedByChecks, 0);
}

TEST(PipelinedPlanTest, ScheduleThatDeadlocksIsRefused) {
  // Stage 1 starts with a backward whose gradient can never arrive: its first forward
  // and first backward swap places.
  Status s = parseEdited([](plan::Plan &p) {
    auto *actions = p.mutable_stages()->GetMutableObject(1)->mutable_actions();
    plan::Action first = *actions->Get(0);
    int b = 0;
    while (actions->Get(b)->kind() != plan::ActionKind::Backward)
      ++b;
    plan::Action backward = *actions->Get(b);
    *actions->GetMutableObject(0) = backward;
    *actions->GetMutableObject(b) = first;
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("schedule"), std::string::npos) << s.message();
}

/// mtrun keeps the stashes in exactly the bytes the plan gives them: a stage whose
/// stash_bytes is not its in-flight micro-batches times its largest stash is refused.
TEST(PipelinedPlanTest, StashBytesThatDoNotFitTheScheduleAreRefused) {
  Status s = parseEdited([](plan::Plan &p) {
    plan::Stage *stage = p.mutable_stages()->GetMutableObject(0);
    stage->mutate_stash_bytes(stage->stash_bytes() - 1);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("stage 0 plans "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(" bytes of stashes, but its schedule keeps 2 micro-batches in "
                             "flight, whose stashes take up to "),
            std::string::npos)
      << s.message();
}

TEST(PipelinedPlanTest, ArenaLargerThanItsBuffersIsRefused) {
  // A corrupt arena size would have the runtime reserve (and fill) memory nothing uses.
  Status s = parseEdited([](plan::Plan &p) {
    plan::Program *prog = p.mutable_programs()->GetMutableObject(0);
    prog->mutate_arena_bytes(prog->arena_bytes() + (uint64_t{1} << 40));
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("but its buffers end at byte"), std::string::npos) << s.message();
}

TEST(PipelinedPlanTest, ProgramOutOfPlaceIsRefused) {
  Status s = parseEdited([](plan::Plan &p) {
    p.mutable_programs()->GetMutableObject(2)->mutate_stage(0);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not fit its place in the pipeline"), std::string::npos)
      << s.message();
}

TEST(PipelinedPlanTest, GradientToAParameterOfAnotherStageIsRefused) {
  // Stage 1's backward sends a gradient to a parameter of the same shape that only
  // stage 0 holds.
  bool edited = false;
  Status s = parseEdited([&](plan::Plan &p) {
    std::set<int32_t> stage0, stage1;
    for (const plan::Program *prog : *p.programs())
      for (const plan::Buffer *b : *prog->buffers())
        if (b->kind() == plan::BufferKind::Param)
          (prog->stage() == 0 ? stage0 : stage1).insert(b->param());
    auto shape = [&](int32_t param) {
      auto *dims = p.params()->Get(param)->shape();
      return std::vector<int64_t>(dims->begin(), dims->end());
    };
    auto *backward = p.mutable_programs()->GetMutableObject(3);
    for (flatbuffers::uoffset_t i = 0; i < backward->buffers()->size(); ++i) {
      auto *grad = backward->mutable_buffers()->GetMutableObject(i);
      if (grad->kind() != plan::BufferKind::Grad)
        continue;
      for (int32_t foreign : stage0)
        if (!stage1.count(foreign) && shape(foreign) == shape(grad->param())) {
          edited = grad->mutate_param(foreign);
          return;
        }
    }
  });
  ASSERT_TRUE(edited) << "no stage-0 parameter shares a shape with a stage-1 gradient";
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("which its stage does not hold"), std::string::npos)
      << s.message();
}

/// The first instruction of a backward program that adds into a parameter's gradient
/// (the plan's default: mt-fuse-grad-accumulation), and one of its gradient buffers.
std::pair<plan::Instruction *, uint32_t> accumulating(plan::Plan &p) {
  auto *backward = p.mutable_programs()->GetMutableObject(3);
  for (flatbuffers::uoffset_t i = 0; i < backward->instructions()->size(); ++i) {
    auto *inst = backward->mutable_instructions()->GetMutableObject(i);
    if (inst->accumulate())
      return {inst, inst->outputs()->Get(inst->outputs()->size() - 1)};
  }
  return {nullptr, 0};
}

TEST(PipelinedPlanTest, AnInstructionThatWritesOverAGradientIsRefused) {
  bool edited = false;
  Status s = parseEdited([&](plan::Plan &p) {
    if (plan::Instruction *inst = accumulating(p).first)
      edited = inst->mutate_accumulate(false);
  });
  ASSERT_TRUE(edited) << "no instruction accumulates";
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("writes over a parameter's gradient"), std::string::npos)
      << s.message();
}

TEST(PipelinedPlanTest, AnInstructionThatAddsIntoAnActivationIsRefused) {
  bool edited = false;
  Status s = parseEdited([&](plan::Plan &p) {
    auto [inst, grad] = accumulating(p);
    if (inst)
      edited = p.mutable_programs()->GetMutableObject(3)->mutable_buffers()->GetMutableObject(
          grad)->mutate_kind(plan::BufferKind::Activation);
  });
  ASSERT_TRUE(edited) << "no instruction accumulates";
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("adds into a buffer that is not a parameter's gradient"),
            std::string::npos)
      << s.message();
}

TEST(PipelinedPlanTest, AnOpcodeWithoutGradientOutputsThatAccumulatesIsRefused) {
  bool edited = false;
  Status s = parseEdited([&](plan::Plan &p) {
    plan::Instruction *inst = accumulating(p).first;
    if (inst && inst->opcode() == plan::Opcode::LinearGradWeight)
      edited = inst->mutate_opcode(plan::Opcode::LinearGradInput);
  });
  ASSERT_TRUE(edited) << "the first accumulating instruction is no LinearGradWeight";
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("accumulates, but has no gradient output"), std::string::npos)
      << s.message();
}

TEST(PipelinedPlanTest, AnEnumValueOutsideItsEnumIsRefused) {
  Status s = parseEdited([](plan::Plan &p) {
    p.mutable_programs()->GetMutableObject(1)->mutable_instructions()->GetMutableObject(2)
        ->mutate_opcode(static_cast<plan::Opcode>(999));
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("program 1 instruction 2: unknown opcode 999"), std::string::npos)
      << s.message();
}

// Any enum field, not the opcode alone: GELU's form beyond its two values.
TEST(PlanReaderEnumTest, AnEnumFieldBeyondItsValuesIsRefusedByName) {
  const auto cases = test::opCases();
  const auto exact = std::find_if(cases.begin(), cases.end(),
                                  [](const test::OpCase &c) { return c.name == "gelu_exact"; });
  ASSERT_NE(exact, cases.end());
  const std::string path = test::compileSource(
      exact->mlir, "--micro-batch-size 2 --global-batch-size 2 --seq-length 3",
      "plan_reader_gelu_exact");
  ASSERT_FALSE(path.empty());
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> good((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  for (int bad : {2, -1}) {
    std::vector<uint8_t> bytes = good;
    int edited = 0;
    auto *p = plan::GetMutablePlan(bytes.data() + plan::kHeaderBytes);
    for (flatbuffers::uoffset_t i = 0; i < p->programs()->size(); ++i) {
      auto *program = p->mutable_programs()->GetMutableObject(i);
      for (flatbuffers::uoffset_t j = 0; j < program->instructions()->size(); ++j) {
        auto *inst = program->mutable_instructions()->GetMutableObject(j);
        if (inst->opcode() == plan::Opcode::Gelu || inst->opcode() == plan::Opcode::GeluGrad)
          edited += inst->mutate_approximate(static_cast<plan::GeluApproximation>(bad));
      }
    }
    ASSERT_EQ(edited, 2) << "the exact GELU and its gradient, each with its form written";
    reseal(bytes);
    LoadedPlan loaded;
    Status s = LoadedPlan::parse(std::move(bytes), "edited.mtp", loaded);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(cat(": unknown approximate ", bad)), std::string::npos)
        << s.message();
  }
}

/// A bf16 gpt-tiny whose norms' weight gradients are written in bf16, then added into
/// the parameters' f32 gradients (no gradient-accumulation fusion), with the buffer of
/// a LayerNormGrad's weight gradient retyped f32 (twice the bytes, still inside the
/// arena): its kernels would write 4-byte elements into a 2-byte buffer's place and
/// past it. The plan is refused naming the instruction.
TEST(PlanReaderTypes, ANormWeightGradientOfAnotherTypeIsRefused) {
  const std::string path = test::compileModel(test::zooModel("gpt-tiny"),
                                              "--micro-batch-size 2 --global-batch-size 2 --bf16 "
                                              "--no-gradient-accumulation-fusion",
                                              "plan_reader_norm_types");
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty()) << "mtc could not compile gpt-tiny";
  LoadedPlan good;
  ASSERT_OK(LoadedPlan::parse(bytes, "good.mtp", good));
  plan::Plan &p = *plan::GetMutablePlan(bytes.data() + plan::kHeaderBytes);
  bool edited = false;
  for (flatbuffers::uoffset_t k = 0; k < p.programs()->size() && !edited; ++k) {
    auto *program = p.mutable_programs()->GetMutableObject(k);
    for (flatbuffers::uoffset_t i = 0; i < program->instructions()->size() && !edited; ++i) {
      const plan::Instruction *inst = program->instructions()->Get(i);
      if (inst->opcode() != plan::Opcode::LayerNormGrad)
        continue;
      plan::Buffer *dw = program->mutable_buffers()->GetMutableObject(inst->outputs()->Get(1));
      if (dw->offset() + 2 * dw->bytes() > program->arena_bytes())
        continue; // retyped, it would leave the arena: another check's refusal
      ASSERT_EQ(dw->dtype(), plan::DType::BF16);
      edited = dw->mutate_dtype(plan::DType::F32) && dw->mutate_bytes(2 * dw->bytes());
    }
  }
  ASSERT_TRUE(edited) << "no layer norm's gradient to retype";
  reseal(bytes);
  LoadedPlan loaded;
  const Status s = LoadedPlan::parse(std::move(bytes), "retyped.mtp", loaded);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(LayerNormGrad): LayerNormGrad operands disagree"), std::string::npos)
      << s.message();
}

TEST(PipelinedPlanTest, AResidualGradientOfAnotherShapeIsRefused) {
  // A norm's gradient that sums the residual stream's (mt-fuse-norm-grad-add) is given
  // its weight, a vector, in its place.
  bool edited = false;
  Status s = parseEdited([&](plan::Plan &p) {
    auto *backward = p.mutable_programs()->GetMutableObject(3);
    for (flatbuffers::uoffset_t i = 0; i < backward->instructions()->size() && !edited; ++i) {
      auto *inst = backward->mutable_instructions()->GetMutableObject(i);
      if (inst->opcode() == plan::Opcode::LayerNormGrad && inst->inputs()->size() == 4) {
        inst->mutable_inputs()->Mutate(3, inst->inputs()->Get(2));
        edited = true;
      }
    }
  });
  ASSERT_TRUE(edited) << "no layer norm's gradient sums a residual gradient";
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("LayerNormGrad operands disagree"), std::string::npos)
      << s.message();
}

TEST(PipelinedPlanTest, ABiasGradientOfAnotherLengthIsRefused) {
  // A weight gradient that sums its bias gradient too (mt-fuse-bias-grad) is given a
  // vector of another length for it: a GPT layer's fc bias (256) for the proj's (64).
  bool edited = false;
  Status s = parseEdited([&](plan::Plan &p) {
    auto *backward = p.mutable_programs()->GetMutableObject(3);
    std::vector<plan::Instruction *> fused;
    for (flatbuffers::uoffset_t i = 0; i < backward->instructions()->size(); ++i) {
      auto *inst = backward->mutable_instructions()->GetMutableObject(i);
      if (inst->opcode() == plan::Opcode::LinearGradWeightBias)
        fused.push_back(inst);
    }
    // The stage's first (the MLP's output projection) takes the second's (its input).
    if (fused.size() >= 2) {
      fused[0]->mutable_outputs()->Mutate(1, fused[1]->outputs()->Get(1));
      edited = true;
    }
  });
  ASSERT_TRUE(edited) << "no two weight gradients sum their bias gradients";
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bias gradient disagrees"), std::string::npos) << s.message();
}

TEST(PipelinedPlanTest, AnInstructionThatReadsAGradientIsRefused) {
  bool edited = false;
  Status s = parseEdited([&](plan::Plan &p) {
    auto [inst, grad] = accumulating(p);
    if (inst) {
      inst->mutable_inputs()->Mutate(0, grad);
      edited = true;
    }
  });
  ASSERT_TRUE(edited) << "no instruction accumulates";
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("reads a parameter's gradient"), std::string::npos)
      << s.message();
}

/// gpt-tiny under context parallelism 2, and the same with ring attention.
const std::vector<uint8_t> &contextPlan(bool ring) {
  static const std::vector<uint8_t> gathered =
      compileTiny("--cp 2 --micro-batch-size 1 --global-batch-size 2", "plan_reader_cp_test");
  static const std::vector<uint8_t> ringed =
      compileTiny("--cp 2 --cp-comm-type p2p --micro-batch-size 1 --global-batch-size 2",
                  "plan_reader_ring_test");
  return ring ? ringed : gathered;
}

/// Parses a context-parallel plan after `edit` changed its first instruction of
/// `opcode` (or, without one, its grid) in place.
template <typename Edit> Status parseContextEdited(bool ring, plan::Opcode opcode, Edit edit) {
  std::vector<uint8_t> bytes = contextPlan(ring);
  plan::Plan &p = *plan::GetMutablePlan(bytes.data() + plan::kHeaderBytes);
  bool found = false;
  auto *instructions = p.mutable_programs()->GetMutableObject(0)->mutable_instructions();
  for (flatbuffers::uoffset_t i = 0; i < instructions->size() && !found; ++i)
    if (instructions->Get(i)->opcode() == opcode)
      found = edit(p, *instructions->GetMutableObject(i));
  EXPECT_TRUE(found) << "no " << plan::EnumNameOpcode(opcode) << " to edit";
  reseal(bytes);
  LoadedPlan loaded;
  return LoadedPlan::parse(std::move(bytes), "edited.mtp", loaded);
}

TEST(ContextParallelPlanTest, CompiledPlansLoad) {
  for (bool ring : {false, true}) {
    std::vector<uint8_t> bytes = contextPlan(ring);
    LoadedPlan loaded;
    Status s = LoadedPlan::parse(std::move(bytes), "cp.mtp", loaded);
    EXPECT_TRUE(s.ok()) << s.message();
  }
}

// A kernel that ignores context_parallel would index its operands as if it were absent:
// only the kernels that read it may carry it.
TEST(ContextParallelPlanTest, ContextParallelOnAnotherOpcodeIsRefused) {
  Status s = parseContextEdited(
      false, plan::Opcode::PositionEmbedding,
      [](plan::Plan &, plan::Instruction &inst) { return inst.mutate_opcode(plan::Opcode::Add); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("context_parallel on an instruction that has no context-parallel "
                             "form"),
            std::string::npos)
      << s.message();
}

TEST(ContextParallelPlanTest, AnotherGroupSizeIsRefused) {
  Status s =
      parseContextEdited(false, plan::Opcode::Attention, [](plan::Plan &, plan::Instruction &inst) {
        return inst.mutate_context_parallel(4);
      });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("context_parallel 4 is not the grid's cp 2"), std::string::npos)
      << s.message();
}

// Gathered attention's output is a share of qkv's rows; ring attention's are qkv's own.
TEST(ContextParallelPlanTest, AttentionOfTheOtherFormIsRefused) {
  for (bool ring : {false, true}) {
    Status s = parseContextEdited(
        ring, ring ? plan::Opcode::RingAttention : plan::Opcode::Attention,
        [&](plan::Plan &, plan::Instruction &inst) {
          return inst.mutate_opcode(ring ? plan::Opcode::Attention : plan::Opcode::RingAttention);
        });
    ASSERT_FALSE(s.ok()) << (ring ? "ring" : "gathered");
    EXPECT_NE(s.message().find("attention operands or heads disagree"), std::string::npos)
        << s.message();
  }
}

// The backends run a ring step's operands as they are: a 16-bit ring plan, or one whose
// operands mix types, would be widened by the instruction's own operand count.
TEST(ContextParallelPlanTest, RingAttentionInSixteenBitsIsRefused) {
  std::vector<uint8_t> bytes =
      compileTiny("--cp 2 --cp-comm-type p2p --bf16 --micro-batch-size 1 --global-batch-size 2",
                  "plan_reader_ring_bf16_test");
  LoadedPlan loaded;
  Status s = LoadedPlan::parse(std::move(bytes), "ring-bf16.mtp", loaded);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ring attention runs in fp32 or fp64"), std::string::npos)
      << s.message();
}

TEST(ContextParallelPlanTest, AContextCollectiveWithoutTheGroupIsRefused) {
  Status s =
      parseContextEdited(false, plan::Opcode::AllGather, [](plan::Plan &p, plan::Instruction &) {
        return p.mutable_grid()->mutate_cp(1);
      });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("context"), std::string::npos) << s.message();
}

/// mistral-tiny's plan: sliding-window attention.
TEST(WindowPlanTest, AWindowOutsideTheCausalMaskIsRefused) {
  const std::string path =
      test::compileModel(test::zooModel("mistral-tiny"),
                         "--micro-batch-size 1 --global-batch-size 1", "plan_reader_window_test");
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> windowed((std::istreambuf_iterator<char>(in)),
                                      std::istreambuf_iterator<char>());
  auto parseEdited = [&](auto edit) {
    std::vector<uint8_t> bytes = windowed;
    plan::Plan &p = *plan::GetMutablePlan(bytes.data() + plan::kHeaderBytes);
    auto *instructions = p.mutable_programs()->GetMutableObject(0)->mutable_instructions();
    bool edited = false;
    for (flatbuffers::uoffset_t i = 0; i < instructions->size(); ++i)
      if (instructions->Get(i)->window() != 0)
        edited = edit(*instructions->GetMutableObject(i)) || edited;
    EXPECT_TRUE(edited) << "no windowed instruction";
    reseal(bytes);
    LoadedPlan loaded;
    return LoadedPlan::parse(std::move(bytes), "windowed.mtp", loaded);
  };
  Status s = parseEdited([](plan::Instruction &) { return true; });
  EXPECT_TRUE(s.ok()) << s.message();
  s = parseEdited([](plan::Instruction &inst) { return inst.mutate_causal(false); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("an attention window without the causal mask"), std::string::npos)
      << s.message();
  s = parseEdited([](plan::Instruction &inst) { return inst.mutate_window(-6); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("attention window -6 is negative"), std::string::npos) << s.message();
}

} // namespace
} // namespace mt
