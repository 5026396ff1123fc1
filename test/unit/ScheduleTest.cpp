// The schedule checker finds what would hang or lose work at run time: a receive whose
// send never comes first, an action run twice, a micro-batch that skips a stage.
#include "plan/Schedule.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

PipelineSchedule oneFOneB(int64_t stages, int64_t microBatches) {
  PipelineSchedule s;
  EXPECT_EQ(buildSchedule(ScheduleKind::OneFOneB, stages, 1, microBatches, s), "");
  return s;
}

TEST(ScheduleCheck, EveryBuiltScheduleIsDeadlockFree) {
  for (int64_t p : {1, 2, 3, 4, 8})
    for (int64_t m : {1, 2, 4, 8, 16}) {
      for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
        PipelineSchedule s;
        ASSERT_EQ(buildSchedule(kind, p, 1, m, s), "");
        ScheduleCheck check = checkSchedule(s);
        EXPECT_TRUE(check.deadlockFree) << "p " << p << " m " << m << ": " << check.problem;
        // With as many micro-batches as it can use, a stage is idle (p-1)/m of the time.
        EXPECT_NEAR(check.bubble, idealBubble(s), 1e-12) << "p " << p << " m " << m;
      }
      for (int64_t v : {2, 3}) {
        PipelineSchedule s;
        if (m % p != 0)
          continue;
        ASSERT_EQ(buildSchedule(ScheduleKind::Interleaved, p, v, m, s), "");
        ScheduleCheck check = checkSchedule(s);
        EXPECT_TRUE(check.deadlockFree) << "p " << p << " v " << v << " m " << m;
      }
    }
}

// Korthikanti et al. (2022): the first stage holds p micro-batches of activations under
// 1F1B, and p·(1 + (p−1)/(p·v)) under interleaving (each chunk holds 1/v of a stage's
// layers) — whenever there are more micro-batches than stages.
TEST(ScheduleCheck, FirstStageInFlightMatchesKorthikanti) {
  for (int64_t p : {2, 4, 8})
    for (int64_t m : {2 * p, 4 * p}) {
      PipelineSchedule s;
      ASSERT_EQ(buildSchedule(ScheduleKind::OneFOneB, p, 1, m, s), "");
      EXPECT_EQ(checkSchedule(s).maxInFlight[0], p);
      for (int64_t v : {2, 3, 4}) {
        ASSERT_EQ(buildSchedule(ScheduleKind::Interleaved, p, v, m, s), "");
        double chunks = static_cast<double>(checkSchedule(s).maxInFlight[0]);
        EXPECT_DOUBLE_EQ(chunks / v, p * (1.0 + (p - 1.0) / (p * v)))
            << "p " << p << " v " << v << " m " << m;
      }
    }
}

TEST(ScheduleCheck, OneFOneBKeepsAtMostStagesMinusRankInFlight) {
  ScheduleCheck check = checkSchedule(oneFOneB(4, 8));
  ASSERT_TRUE(check.deadlockFree);
  EXPECT_EQ(check.maxInFlight, (std::vector<int64_t>{4, 3, 2, 1}));
}

TEST(ScheduleCheck, ABackwardBeforeItsForwardIsADeadlock) {
  PipelineSchedule s = oneFOneB(2, 2);
  // Stage 0 runs micro-batch 1's backward before its forward: it waits for its own F1,
  // while stage 1 waits for the activation that F1 would send.
  s.perStage[0] = {{true, 0, 0}, {false, 0, 1}, {true, 0, 1}, {false, 0, 0}};
  ScheduleCheck check = checkSchedule(s);
  EXPECT_FALSE(check.deadlockFree);
  EXPECT_NE(check.problem.find("deadlock: stage 0 waits at B1"), std::string::npos)
      << check.problem;
}

TEST(ScheduleCheck, ARepeatedOrMissingActionIsFound) {
  PipelineSchedule twice = oneFOneB(2, 2);
  twice.perStage[1].insert(twice.perStage[1].begin(), {true, 0, 0});
  EXPECT_NE(checkSchedule(twice).problem.find("runs F0 twice"), std::string::npos);

  PipelineSchedule missing = oneFOneB(2, 2);
  missing.perStage[0].pop_back(); // stage 0 never runs B1
  ScheduleCheck check = checkSchedule(missing);
  EXPECT_FALSE(check.deadlockFree);
  EXPECT_NE(check.problem.find("misses"), std::string::npos) << check.problem;
}

// The estimator's clock: with equal stages (any forward and backward times) and free
// messages, every stage of 1F1B and of GPipe waits (p−1)/m of its busy time, and of the
// interleaved schedule (p−1)/(v·m). A message delay δ costs 1F1B at least the first
// forward's way down to the last stage and the last gradient's way back, 2(p−1)δ, and in
// its steady state, where each backward waits for the next stage's, more.
TEST(ScheduleTiming, EqualStagesWaitTheIdealBubble) {
  for (double f : {1.0, 0.37})
    for (double b : {2.0, 0.91})
      for (int64_t p : {2, 3, 4, 8})
        for (int64_t m : {4, 8, 16}) {
          for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
            PipelineSchedule s;
            ASSERT_EQ(buildSchedule(kind, p, 1, m, s), "");
            ScheduleTiming t;
            ScheduleCheck check =
                timeSchedule(s, [&](int64_t, bool fw) { return fw ? f : b; }, 0.0, t);
            ASSERT_TRUE(check.deadlockFree) << check.problem;
            for (int64_t stage = 0; stage < p; ++stage) {
              EXPECT_DOUBLE_EQ(t.busy[stage], m * (f + b));
              EXPECT_NEAR((t.makespan - t.busy[stage]) / t.busy[stage], idealBubble(s), 1e-12)
                  << scheduleName(kind) << " p " << p << " m " << m << " stage " << stage;
            }
          }
          for (int64_t v : {2, 4}) {
            PipelineSchedule s;
            if (m % p != 0)
              continue;
            ASSERT_EQ(buildSchedule(ScheduleKind::Interleaved, p, v, m, s), "");
            ScheduleTiming t;
            ASSERT_TRUE(timeSchedule(
                            s, [&](int64_t, bool fw) { return (fw ? f : b) / v; }, 0.0, t)
                            .deadlockFree);
            EXPECT_NEAR((t.makespan - t.busy[0]) / t.busy[0],
                        (p - 1.0) / (static_cast<double>(v) * m), 1e-12)
                << "interleaved p " << p << " v " << v << " m " << m;
          }
          PipelineSchedule s = oneFOneB(p, m);
          ScheduleTiming t;
          const double delay = 0.25;
          ASSERT_TRUE(
              timeSchedule(s, [&](int64_t, bool fw) { return fw ? f : b; }, delay, t)
                  .deadlockFree);
          EXPECT_GE(t.finish[0], (m + p - 1) * (f + b) + 2 * (p - 1) * delay - 1e-9)
              << "p " << p << " m " << m;
          EXPECT_LE(t.finish[0], (m + p - 1) * (f + b + 2 * delay) + 1e-9)
              << "p " << p << " m " << m;
        }
}

// The slowest stage sets the pace: with stage 2 of 4 twice as slow, the step takes its
// busy time, plus the two forwards before its first and the two backwards after its
// last, and every other stage waits.
TEST(ScheduleTiming, TheSlowestStageSetsThePace) {
  const int64_t p = 4, m = 16;
  PipelineSchedule s = oneFOneB(p, m);
  ScheduleTiming t;
  auto seconds = [&](int64_t stage, bool fw) { return (stage == 2 ? 2.0 : 1.0) * (fw ? 1 : 2); };
  ASSERT_TRUE(timeSchedule(s, seconds, 0.0, t).deadlockFree);
  EXPECT_DOUBLE_EQ(t.busy[2], m * 6.0);
  EXPECT_GE(t.makespan, m * 6.0 + 2 * 1.0 + 2 * 2.0);
  EXPECT_LT(t.makespan, m * 6.0 + (p - 1) * 6.0);
  for (int64_t stage : {0, 1, 3})
    EXPECT_GT(t.makespan - t.busy[stage], t.makespan - t.busy[2]);
}

TEST(ScheduleNames, MegatronsNamesAndTheDefaults) {
  ScheduleKind kind;
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
    EXPECT_EQ(parseScheduleKind(scheduleName(k), 1, kind), "");
    EXPECT_EQ(kind, k) << scheduleName(k);
  }
  EXPECT_EQ(parseScheduleKind("", 1, kind), "");
  EXPECT_EQ(kind, ScheduleKind::OneFOneB) << "one chunk per stage: 1F1B";
  EXPECT_EQ(parseScheduleKind("", 2, kind), "");
  EXPECT_EQ(kind, ScheduleKind::Interleaved) << "several chunks per stage: interleaved";
  EXPECT_EQ(parseScheduleKind("zero-bubble", 1, kind),
            "--schedule must be gpipe, 1f1b or interleaved, got 'zero-bubble'");
}

} // namespace
} // namespace mt
