// The learning-rate and weight-decay schedules against values worked by hand from
// Megatron's OptimizerParamScheduler.get_lr and get_wd (at num_steps = the 0-based step,
// or its samples; warm-up one update ahead, as mtc counts it), for every style, and the
// schedules mtrun refuses.
#include "train/Optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mt {
namespace {

OptimizerConfig config(const std::string &style) {
  OptimizerConfig c;
  c.lr = 1.0;
  c.minLr = 0.1;
  c.warmup = 2;
  c.decay = 10;
  c.decayStyle = style;
  return c;
}

TEST(LearningRate, WarmUpStartsFromItsInitialRate) {
  OptimizerConfig c = config("cosine");
  EXPECT_DOUBLE_EQ(learningRate(c, 0, 20), 0.5); // update 1 of 2
  EXPECT_DOUBLE_EQ(learningRate(c, 1, 20), 1.0);
  c.warmupInit = 0.2;
  EXPECT_DOUBLE_EQ(learningRate(c, 0, 20), 0.6);
  EXPECT_DOUBLE_EQ(learningRate(c, 1, 20), 1.0);
}

TEST(LearningRate, CosineAndLinearDecayFromThePeakAfterWarmUp) {
  for (const char *style : {"cosine", "linear"}) {
    const OptimizerConfig c = config(style);
    EXPECT_DOUBLE_EQ(learningRate(c, 2, 20), 1.0) << style;
    EXPECT_NEAR(learningRate(c, 6, 20), 0.55, 1e-15) << style; // half way: both 1/2
    EXPECT_NEAR(learningRate(c, 10, 20), 0.1, 1e-15) << style;
    EXPECT_DOUBLE_EQ(learningRate(c, 11, 20), 0.1) << style;
  }
  EXPECT_NEAR(learningRate(config("linear"), 4, 20), 0.1 + 0.9 * 0.75, 1e-15);
  EXPECT_NEAR(learningRate(config("cosine"), 4, 20), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)),
              1e-15);
  EXPECT_DOUBLE_EQ(learningRate(config("constant"), 15, 20), 1.0);
}

// WSD: the peak until step 10 − 4 = 6, then the last 4 steps anneal.
TEST(LearningRate, WsdHoldsThePeakThenAnnealsInItsStyle) {
  OptimizerConfig c = config("WSD");
  c.wsdDecay = 4;
  for (int64_t step = 2; step <= 6; ++step)
    EXPECT_DOUBLE_EQ(learningRate(c, step, 20), 1.0) << step;
  const struct {
    const char *style;
    double quarter, half; // the coefficient a quarter and half of the way
  } styles[] = {{"exponential", 2 * std::pow(0.5, 0.25) - 1, 2 * std::sqrt(0.5) - 1},
                {"linear", 0.75, 0.5},
                {"cosine", 0.5 * (1 + std::cos(M_PI / 4)), 0.5},
                {"minus_sqrt", 0.5, 1 - std::sqrt(0.5)}};
  for (const auto &s : styles) {
    c.wsdDecayStyle = s.style;
    EXPECT_NEAR(learningRate(c, 7, 20), 0.1 + 0.9 * s.quarter, 1e-15) << s.style;
    EXPECT_NEAR(learningRate(c, 8, 20), 0.1 + 0.9 * s.half, 1e-15) << s.style;
    EXPECT_NEAR(learningRate(c, 10, 20), 0.1, 1e-15) << s.style;
    EXPECT_DOUBLE_EQ(learningRate(c, 12, 20), 0.1) << s.style;
    EXPECT_EQ(scheduleError(c, 20), "") << s.style;
  }
}

// peak·sqrt(max(W, 1))/sqrt(max(step, 1)), at least the minimum, the minimum past the
// decay steps.
TEST(LearningRate, InverseSquareRootFallsWithTheStep) {
  OptimizerConfig c = config("inverse-square-root");
  c.warmup = 4;
  c.decay = 100;
  EXPECT_DOUBLE_EQ(learningRate(c, 4, 200), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(c, 16, 200), 0.5);
  EXPECT_DOUBLE_EQ(learningRate(c, 100, 200), 0.2);
  EXPECT_DOUBLE_EQ(learningRate(c, 101, 200), 0.1);
  c.minLr = 0.3;
  EXPECT_DOUBLE_EQ(learningRate(c, 100, 200), 0.3);
  c.warmup = 0;
  EXPECT_DOUBLE_EQ(learningRate(c, 0, 200), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(c, 4, 200), 0.5);
  // Megatron counts in samples: without warm-up, a step of 4 samples is 4 of them.
  c.samplesPerStep = 4;
  c.minLr = 0;
  EXPECT_DOUBLE_EQ(learningRate(c, 4, 200), 0.25);
  c.warmup = 4; // with it, the samples cancel
  EXPECT_DOUBLE_EQ(learningRate(c, 16, 200), 0.5);
}

// Megatron's --lr-warmup-fraction: warm-up over a share of the decay steps, 2.5 of 10 here
// (Megatron's ramp at num_steps 1, 2 is 0.4, 0.8; mtc's, a step ahead, 0.4, 0.8, then 1 at
// the step the warm-up ends in), then cosine from 2.5.
TEST(LearningRate, AFractionalWarmUpEndsAtThePeak) {
  OptimizerConfig c = config("cosine");
  c.warmup = 0;
  c.warmupFraction = 0.25;
  EXPECT_DOUBLE_EQ(learningRate(c, 0, 20), 0.4);
  EXPECT_DOUBLE_EQ(learningRate(c, 1, 20), 0.8);
  EXPECT_DOUBLE_EQ(learningRate(c, 2, 20), 1.0);
  EXPECT_NEAR(learningRate(c, 3, 20), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5 / 7.5)), 1e-15);
  EXPECT_EQ(scheduleError(c, 20), "");
  c.warmup = 2;
  EXPECT_EQ(scheduleError(c, 20), "warm-up is --warmup-steps or --lr-warmup-fraction, not both");
  c.warmup = 0;
  c.warmupFraction = 1;
  EXPECT_EQ(scheduleError(c, 20), "--lr-warmup-fraction must be at least 0 and below 1");
}

// As Megatron's: an anneal of 0 steps keeps the peak to the end of the decay; one longer
// than the decay after warm-up starts annealing during warm-up, which takes precedence.
TEST(LearningRate, WsdAnnealsOfNoStepsAndOfMoreThanTheDecayRun) {
  OptimizerConfig c = config("WSD");
  c.wsdDecay = 0;
  EXPECT_DOUBLE_EQ(learningRate(c, 10, 20), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(c, 11, 20), 0.1);
  c.wsdDecay = 10;
  c.wsdDecayStyle = "linear";
  EXPECT_DOUBLE_EQ(learningRate(c, 1, 20), 1.0); // warm-up
  EXPECT_DOUBLE_EQ(learningRate(c, 2, 20), 1.0); // num_steps = W: Megatron's warm-up still
  EXPECT_NEAR(learningRate(c, 3, 20), 0.1 + 0.9 * 0.7, 1e-15);
  EXPECT_EQ(scheduleError(c, 20), "");
}

TEST(LearningRate, SchedulesThatCannotRunAreRefused) {
  OptimizerConfig c = config("WSD");
  EXPECT_EQ(scheduleError(c, 20),
            "--lr-decay WSD needs --lr-wsd-decay-steps: the decay steps it anneals over");
  c.wsdDecay = 4;
  EXPECT_EQ(scheduleError(c, 20), "");
  c.wsdDecayStyle = "step";
  EXPECT_EQ(scheduleError(c, 20),
            "--lr-wsd-decay-style must be exponential, linear, cosine or minus_sqrt");
  c.wsdDecayStyle = "";
  c.warmup = 10; // Megatron asserts warm-up ends before the decay does
  EXPECT_EQ(scheduleError(c, 20), "--lr-decay WSD needs more decay steps (10) than warm-up (10)");
  c.decayStyle = "inverse-square-root";
  c.wsdDecay = -1;
  EXPECT_NE(scheduleError(c, 20), "");
  c.decayStyle = "cosine"; // the older styles keep the peak after such a warm-up
  EXPECT_EQ(scheduleError(c, 20), "");
  EXPECT_DOUBLE_EQ(learningRate(c, 15, 20), 1.0);
  c = config("cosine");
  c.wsdDecay = 3;
  EXPECT_EQ(scheduleError(c, 20),
            "--lr-wsd-decay-steps and --lr-wsd-decay-style apply to --lr-decay WSD");
  c.wsdDecay = -1;
  c.wsdDecayStyle = "linear";
  EXPECT_NE(scheduleError(c, 20), "");
  c = config("wsd");
  EXPECT_EQ(scheduleError(c, 20),
            "--lr-decay must be cosine, linear, constant, inverse-square-root or WSD");
  c = config("linear");
  c.warmupInit = 2;
  EXPECT_NE(scheduleError(c, 20), "");
  c.warmupInit = 0;
  c.minLr = 2;
  EXPECT_NE(scheduleError(c, 20), "");
}

// Megatron counts its schedule in samples whether its lengths were given in iterations
// or samples: lengths of whole steps give the steps' schedule to the bit (the ratios of
// whole numbers are the same ratios), with a global batch of 12 here, warm-up's ramp
// (peak − init)·(k·12)/(W·12) as Megatron rounds it; others fall within a step.
TEST(LearningRate, ARunInSamplesCountsItsScheduleInThem) {
  for (const char *style : {"cosine", "linear", "WSD", "inverse-square-root"}) {
    OptimizerConfig steps = config(style);
    steps.warmup = 3;
    steps.warmupInit = 0.1;
    steps.wsdDecay = std::string(style) == "WSD" ? 4 : -1;
    steps.samplesPerStep = 12;
    OptimizerConfig samples = steps;
    samples.trainSamples = 240;
    samples.warmup = 36;
    samples.decay = 120;
    if (samples.wsdDecay > 0)
      samples.wsdDecay = 48;
    for (int64_t step = 0; step < 20; ++step)
      EXPECT_EQ(learningRate(samples, step, 20), learningRate(steps, step, 20)) << style;
    EXPECT_EQ(learningRate(steps, 1, 20), 0.1 + 0.9 * (2.0 * 12) / (3.0 * 12)) << style;
    EXPECT_EQ(scheduleError(samples, 20), "") << style;
  }
  // Warm-up of 6 samples, linear decay to sample 30 of 40: step k reads sample 4k.
  OptimizerConfig c = config("linear");
  c.samplesPerStep = 4;
  c.trainSamples = 40;
  c.warmup = 6;
  c.decay = 30;
  EXPECT_DOUBLE_EQ(learningRate(c, 0, 10), 4.0 / 6); // update 1 reaches sample 4 of 6
  EXPECT_DOUBLE_EQ(learningRate(c, 1, 10), 1.0);     // and update 2 passes it
  EXPECT_NEAR(learningRate(c, 2, 10), 0.1 + 0.9 * (1 - 2.0 / 24), 1e-15);
  EXPECT_NEAR(learningRate(c, 7, 10), 0.1 + 0.9 * (1 - 22.0 / 24), 1e-15);
  EXPECT_DOUBLE_EQ(learningRate(c, 8, 10), 0.1);
  c.decay = 0; // the whole run: its 40 samples
  EXPECT_NEAR(learningRate(c, 5, 10), 0.1 + 0.9 * (1 - 14.0 / 34), 1e-15);
  c.decayStyle = "WSD";
  EXPECT_EQ(scheduleError(c, 10),
            "--lr-decay WSD needs --lr-wsd-decay-samples: the decay samples it anneals over");
  c.wsdDecay = 8;
  c.warmup = 40;
  EXPECT_EQ(scheduleError(c, 10), "--lr-decay WSD needs more decay samples (40) than warm-up (40)");
}

// What a checkpoint records of the schedule, and how another run's differs: each setting
// by name, lengths in samples; a setting one has and the other not is "none" there.
TEST(LearningRate, ARecordNamesEachSettingThatDiffers) {
  OptimizerConfig c = config("cosine");
  c.samplesPerStep = 4;
  const std::string record = scheduleRecord(c, 20);
  EXPECT_EQ(record, "lr=1;lr-decay-style=cosine;lr-warmup-samples=8;lr-warmup-init=0;min-lr=0.1;"
                    "lr-decay-samples=40;weight-decay=0.1");
  EXPECT_EQ(scheduleDifference(record, record), "");
  OptimizerConfig other = c;
  other.decayStyle = "WSD";
  other.wsdDecay = 4;
  other.lr = 6e-4;
  EXPECT_EQ(scheduleDifference(record, scheduleRecord(other, 20)),
            "lr 1 there, 0.0006 here; lr-decay-style cosine there, WSD here; "
            "lr-wsd-decay-samples none there, 16 here; lr-wsd-decay-style none there, "
            "exponential here");
  // Constant: no decay to record, and no warm-up's start without warm-up; an increment
  // of weight decay records its ends and length (the run).
  other = c;
  other.decayStyle = "constant";
  other.warmup = 0;
  other.warmupInit = 0.5;
  other.weightDecayIncrStyle = "linear";
  other.startWeightDecay = 0.0;
  other.endWeightDecay = 0.25;
  EXPECT_EQ(scheduleRecord(other, 20),
            "lr=1;lr-decay-style=constant;lr-warmup-samples=0;weight-decay-incr-style=linear;"
            "start-weight-decay=0;end-weight-decay=0.25;weight-decay-incr-samples=80");
  other = c; // a warm-up fraction records the samples it comes to
  other.warmup = 0;
  other.warmupFraction = 0.3;
  EXPECT_NE(scheduleRecord(other, 20).find(";lr-warmup-samples=12;"), std::string::npos);
  other = c; // the same lengths in samples are the same schedule
  other.trainSamples = 80;
  other.warmup = 8;
  other.decay = 40;
  EXPECT_EQ(scheduleRecord(other, 20), record);
}

// Megatron's get_wd: from the start to the end over the run, linearly or on a half
// cosine, the end after it; constant is --weight-decay's.
TEST(WeightDecay, IncreasesOverTheRunInItsStyle) {
  OptimizerConfig c = config("cosine");
  c.weightDecay = 0.3;
  EXPECT_EQ(weightDecay(c, 7, 10), 0.3);
  c.weightDecayIncrStyle = "linear";
  c.startWeightDecay = 0.0;
  c.endWeightDecay = 0.1;
  EXPECT_EQ(scheduleError(c, 10), "");
  EXPECT_EQ(weightDecay(c, 0, 10), 0.0);
  EXPECT_NEAR(weightDecay(c, 5, 10), 0.05, 1e-17);
  EXPECT_NEAR(weightDecay(c, 10, 10), 0.1, 1e-17);
  EXPECT_EQ(weightDecay(c, 11, 10), 0.1);
  c.weightDecayIncrStyle = "cosine";
  EXPECT_NEAR(weightDecay(c, 0, 10), 0.0, 1e-17);
  EXPECT_NEAR(weightDecay(c, 5, 10), 0.05, 1e-17);
  EXPECT_NEAR(weightDecay(c, 2, 8), 0.1 * 0.5 * (1 - std::sqrt(0.5)), 1e-17);
  c.samplesPerStep = 4; // in samples: step 2 reads sample 8 of 16
  c.trainSamples = 16;
  EXPECT_NEAR(weightDecay(c, 2, 4), 0.05, 1e-17);
  c.endWeightDecay = -0.1; // Megatron's scheduler asserts 0 <= start <= end
  EXPECT_EQ(scheduleError(c, 4),
            "the weight decay increment needs 0 <= --start-weight-decay <= --end-weight-decay");
  c.startWeightDecay = -0.2;
  EXPECT_NE(scheduleError(c, 4), "");
  c.endWeightDecay.reset();
  EXPECT_EQ(scheduleError(c, 4),
            "--weight-decay-incr-style cosine needs --start-weight-decay and --end-weight-decay");
  c.weightDecayIncrStyle = "constant";
  EXPECT_EQ(scheduleError(c, 4), "--start-weight-decay and --end-weight-decay apply to "
                                 "--weight-decay-incr-style linear or cosine (constant: "
                                 "--weight-decay)");
  c.weightDecayIncrStyle = "step";
  EXPECT_EQ(scheduleError(c, 4), "--weight-decay-incr-style must be constant, linear or cosine");
}

} // namespace
} // namespace mt
