// The training loop, readable top to bottom: data, forward and backward per
// micro-batch, update, log, save.
#ifndef MT_RUNTIME_TRAIN_TRAINER_H
#define MT_RUNTIME_TRAIN_TRAINER_H

#include "data/Blend.h"
#include "exec/Executor.h"
#include "train/Checkpoint.h"
#include "train/Optimizer.h"

#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mt {

struct TrainerConfig {
  /// The data: one indexed dataset, or a blend of several with their weights or weighed
  /// by their samples in each split (Megatron's --data-path, data/Blend.h).
  std::vector<DataSource> data;
  /// Megatron's --train-data-path, --valid-data-path and --test-data-path: each split
  /// read whole from datasets of its own, in place of `data` cut by `split` (empty: not
  /// given).
  std::array<std::vector<DataSource>, 3> splitData;
  /// Megatron's --mock-data: synthetic documents (data/TokenStream.h's mockDataset) in
  /// place of `data`, cut by `split` alike.
  bool mockData = false;
  /// What messages call each split's own datasets: the flag that gave them.
  std::array<std::string, 3> splitDataFlags = {"--train-data-path", "--valid-data-path",
                                               "--test-data-path"};
  /// Megatron's --split: the relative sizes of the training, validation and test splits
  /// of the data's documents (data/TokenStream.h). By default training reads them all.
  std::array<double, 3> split = {1, 0, 0};
  /// Evaluation, where the split holds validation (test) documents: the mean loss of
  /// evalIters global batches of them, forward only and without dropout — the same
  /// batches each time, the first of the split's shuffled order. Validation after every
  /// evalInterval steps (0: none between) and after the last, the test split after the
  /// last. 0 evalIters: none.
  int64_t evalInterval = 0, evalIters = 0;
  int64_t steps = 0;
  /// Megatron's early exits, each decided after a step: every `exitInterval` steps (0:
  /// none), once more than `exitMinutes` have passed since launch on any rank (0: never),
  /// or once `exitSignalled` says `exitSignal` was caught by any rank (null: not caught).
  /// Every rank stops after the same step, saved first where saveDir is set, and the run
  /// ends as a finished one does.
  int64_t exitInterval = 0;
  double exitMinutes = 0;
  std::function<bool()> exitSignalled;
  std::string exitSignal;
  uint64_t seed = 1234;
  /// A resume whose learning-rate or weight-decay schedule is not its checkpoint's is
  /// refused, naming each difference, unless this is set: the schedule is then this
  /// run's (Megatron's --override-opt_param-scheduler).
  bool overrideSchedule = false;
  std::string saveDir, loadDir;
  int64_t saveEvery = 0; // 0: save only at the end (when saveDir is set)
  CheckpointOptions checkpoint;
  /// A wait for another rank longer than this fails the job, naming who is stalled
  /// (Comm::setWatchdog); 0: wait forever.
  double collectiveTimeout = 300;
  int64_t logEvery = 1;
  std::string metricsPath; // one line per step, full precision, when set
  std::string tensorboardDir; // TensorBoard event files (train/TensorBoard.h), when set
  /// The device's dense peak TFLOP/s in the plan's precision: when set, the log and
  /// TensorBoard give the model FLOP utilisation (MFU) beside the TFLOP/s per GPU.
  double peakTflops = 0;
  std::string tracePath;   // Chrome-trace / Perfetto timeline, one file per rank
  OptimizerConfig optimizer;
  LossScaler lossScaler; // fp16 plans: the first scale and the scaler's settings
  /// When the process started, and when each stage of its start-up before training
  /// ended (mtrun sets them): the log says how long it took to reach the first step, and
  /// where the time went (those stages, then the data and the optimizer's state, and
  /// initialising or loading the weights).
  std::optional<std::chrono::steady_clock::time_point> launched;
  struct StartStage {
    std::string what;
    std::chrono::steady_clock::time_point ended;
  };
  std::vector<StartStage> startStages;
};

/// One line per logged step; also what tests read.
struct StepRecord {
  int64_t step; // 1-based
  double loss, lr, gradNorm;
  double seconds, tokensPerSecond; // the step's wall time, and its throughput
};

Status train(Executor &executor, const TrainerConfig &config, std::FILE *log,
             const std::function<void(const StepRecord &)> &onStep = {});

} // namespace mt

#endif
