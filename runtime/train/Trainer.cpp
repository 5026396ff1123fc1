#include "train/Trainer.h"
#include "data/IndexedDataset.h"
#include "data/TokenStream.h"
#include "train/Checkpoint.h"

#include <chrono>
#include <map>
#include <set>
#include <fstream>
#include <nlohmann/json.hpp>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <cinttypes>
#include <vector>

namespace mt {
namespace {

/// While checkpoint files are written or read, one rank's I/O may keep the others
/// waiting far longer than any step: the watchdog waits at least 30 minutes then.
class IoWatchdog {
public:
  IoWatchdog(Comm &comm, double timeout) : comm_(comm), timeout_(timeout) {
    if (timeout > 0)
      comm.setWatchdog(std::max(timeout, 1800.0));
  }
  ~IoWatchdog() { comm_.setWatchdog(timeout_); }

private:
  Comm &comm_;
  double timeout_;
};

/// A committed save's line: bytes, time, throughput, how long training waited, and the
/// first rank's memory.
void logSave(std::FILE *log, const SaveReport &r, int ranks) {
  const double world = ranks, seconds = std::max(r.seconds, 1e-9);
  std::fprintf(log,
               "saved step %" PRId64 ": %" PRIu64 " bytes from %d ranks in %.2f s "
               "(%.3f GB/s in all, %.3f per rank); training blocked %.3f s",
               r.step, r.bytesAllRanks, ranks, seconds, r.bytesAllRanks / seconds / 1e9,
               r.bytesAllRanks / world / seconds / 1e9, r.blockedSeconds);
  if (r.residentPeak >= 0)
    std::fprintf(log,
                 "; rank 0's resident memory %" PRId64 " bytes, at most %" PRId64
                 " during the save",
                 r.residentBefore, r.residentPeak);
  std::fprintf(log, "\n");
}

/// The step's timeline in Chrome's trace-event format (chrome://tracing, Perfetto): one
/// complete event per forward, backward, gradient synchronisation and update.
class Timeline {
public:
  using Clock = std::chrono::steady_clock;
  explicit Timeline(int rank) : rank_(rank), origin_(Clock::now()) {}

  void add(const char *name, const char *category, Clock::time_point begin,
           Clock::time_point end, int64_t step, int64_t microBatch = -1) {
    auto us = [&](Clock::time_point t) {
      return std::chrono::duration<double, std::micro>(t - origin_).count();
    };
    nlohmann::json args = {{"step", step}};
    if (microBatch >= 0)
      args["micro_batch"] = microBatch;
    events_.push_back({{"name", name}, {"cat", category}, {"ph", "X"}, {"ts", us(begin)},
                       {"dur", us(end) - us(begin)}, {"pid", rank_}, {"tid", 0},
                       {"args", args}});
  }

  Status write(const std::string &path) const {
    std::ofstream out(path);
    out << nlohmann::json{{"traceEvents", events_}, {"displayTimeUnit", "ms"}}.dump();
    return out ? Status::success() : Status::failure(path + ": cannot write the trace");
  }

private:
  int rank_;
  Clock::time_point origin_;
  std::vector<nlohmann::json> events_;
};

/// What this rank holds of its device's memory, beside what mtc predicted for it.
void reportMemory(Executor &executor, std::FILE *log) {
  Backend &backend = executor.backend();
  const plan::Accounting *a = executor.plan().accounting();
  const uint64_t predicted = a ? a->weight_bytes() + a->gradient_bytes() + a->optimizer_bytes() +
                                     a->activation_bytes()
                               : 0;
  std::fprintf(log,
               "memory: %" PRIu64 " bytes held for the plan, %" PRIu64
               " predicted (+ %zu guard bytes after the arena); at most %" PRIu64 " at once",
               backend.heldBytes(), predicted, Executor::kGuardBytes, backend.heldPeakBytes());
  if (uint64_t workspace = backend.workspaceBytes())
    std::fprintf(log, "; %" PRIu64 " in the backend's workspaces", workspace);
  if (uint64_t used = 0, total = 0; backend.deviceMemory(used, total))
    std::fprintf(log, "; the device: %" PRIu64 " of %" PRIu64 " bytes in use", used, total);
  std::fprintf(log, "\n");
}

std::string duration(double seconds) {
  long s = static_cast<long>(seconds + 0.5);
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  return text;
}

} // namespace

Status train(Executor &executor, const TrainerConfig &config, std::FILE *log,
             const std::function<void(const StepRecord &)> &onStep) {
  const plan::Plan &plan = executor.plan();
  Comm &comm = executor.comm();
  // Each data-parallel rank takes a contiguous share of the global batch's
  // micro-batches; micro-batch numbers (and so dropout masks) are the global ones.
  const int64_t microBatches = plan.global_batch_size() / plan.micro_batch_size();
  const int64_t firstMicroBatch = comm.rank(Group::Data) * microBatches / comm.size(Group::Data);
  const int64_t batch = plan.micro_batch_size(), seq = plan.seq_length();
  const bool leader = comm.position().worldRank() == 0;
  if (!leader)
    log = nullptr;
  // fp16 scales the loss (and so every gradient) to keep small gradients representable,
  // and skips the steps whose gradients overflow.
  const bool scaleLoss = plan.precision() == plan::DType::F16;

  IndexedDataset dataset;
  if (Status s = IndexedDataset::open(config.dataPrefix, dataset); !s.ok())
    return s;
  TokenStream stream(dataset, seq, config.seed);
  if (Status s = stream.checkVocabulary(plan.vocab_size()); !s.ok())
    return s;

  std::unique_ptr<AdamW> created;
  if (Status s = AdamW::create(executor, config.optimizer, plan.distributed_optimizer(), created);
      !s.ok())
    return s;
  AdamW &optimizer = *created;
  TrainingState state;
  state.seed = config.seed;
  state.lossScaler = config.lossScaler;
  // Megatron users' auto-resume: a job that saves to and loads from one directory starts
  // fresh while the directory holds no checkpoint, so a job script restarted after a
  // failure just continues. A --load of anything else must hold one.
  comm.setWatchdog(config.collectiveTimeout);
  bool resume = !config.loadDir.empty();
  if (resume && config.loadDir == config.saveDir) {
    if (Status s = findCheckpoint(config.loadDir, comm, resume); !s.ok())
      return s;
    if (!resume && log)
      std::fprintf(log, "no checkpoint in %s yet: starting fresh\n", config.loadDir.c_str());
  }
  const auto weightsStarted = std::chrono::steady_clock::now();
  if (resume) {
    comm.setActivity("loading " + config.loadDir);
    IoWatchdog io(comm, config.collectiveTimeout);
    const auto loadStarted = std::chrono::steady_clock::now();
    uint64_t bytesRead = 0;
    if (Status s = loadCheckpoint(config.loadDir, executor, optimizer, state, config.checkpoint,
                                  &bytesRead);
        !s.ok())
      return s;
    const double loadSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loadStarted).count();
    // The checkpoint has the scaler's state; its settings are this run's.
    state.lossScaler.minScale = config.lossScaler.minScale;
    state.lossScaler.window = config.lossScaler.window;
    state.lossScaler.hysteresis = config.lossScaler.hysteresis;
    if (state.seed != config.seed)
      return Status::failure("checkpoint in " + config.loadDir + " was trained with seed " +
                             std::to_string(state.seed) + ", not " +
                             std::to_string(config.seed));
    if (state.step > config.steps)
      return Status::failure("checkpoint in " + config.loadDir + " is at step " +
                             std::to_string(state.step) + ", past --steps " +
                             std::to_string(config.steps));
    if (log)
      std::fprintf(log,
                   "resumed from %s at step %" PRId64 ": %" PRIu64 " bytes read by %d ranks in "
                   "%.2f s (%.3f GB/s in all)\n",
                   config.loadDir.c_str(), state.step, bytesRead, comm.position().worldSize(),
                   loadSeconds, bytesRead / std::max(loadSeconds, 1e-9) / 1e9);
  } else {
    if (Status s = executor.initParameters(config.seed); !s.ok())
      return s;
  }
  if (config.launched && log) {
    // The weights are ready when the device says so, not when their kernels are queued.
    if (Status s = executor.backend().finish(); !s.ok())
      return s;
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(log, "start-up: %.2f s from launch to the first step, %.2f s of it %s the weights\n",
                 std::chrono::duration<double>(now - *config.launched).count(),
                 std::chrono::duration<double>(now - weightsStarted).count(),
                 resume ? "loading" : "initialising");
  }

  const int64_t loadedStep = state.step;
  // Saves, and on the first rank a line of what each cost once it is committed.
  CheckpointSaver saver(executor, optimizer, config.checkpoint);
  auto reportSave = [&]() {
    SaveReport r;
    if (saver.takeReport(r) && log)
      logSave(log, r, comm.position().worldSize());
  };
  auto save = [&]() -> Status {
    comm.setActivity("saving step " + std::to_string(state.step));
    IoWatchdog io(comm, config.collectiveTimeout);
    MT_TRY(saver.save(config.saveDir, state));
    reportSave();
    return Status::success();
  };
  std::FILE *metrics = nullptr;
  if (leader && !config.metricsPath.empty() &&
      !(metrics = std::fopen(config.metricsPath.c_str(), "a")))
    return Status::failure(config.metricsPath + ": cannot write metrics");
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> closeMetrics(metrics, [](std::FILE *f) {
    return f ? std::fclose(f) : 0;
  });

  Timeline timeline(comm.position().worldRank());
  // Under pipeline parallelism: this rank's stage, and the stash slot of each in-flight
  // micro-batch (what a forward keeps on the device for its backward), by (chunk,
  // micro-batch); the free slots, lowest first.
  const int stage = comm.rank(Group::Pipeline);
  const int64_t pipelineStages = plan.grid()->pp();
  const int64_t virtualStages = pipelineStages * plan.virtual_stages();
  std::map<std::pair<int64_t, int64_t>, int> stashSlots;
  std::set<int> freeSlots;
  for (int slot = 0; slot < executor.stashSlots(); ++slot)
    freeSlots.insert(slot);
  uint64_t stashHeld = 0, stashPeak = 0;
  double bubbleSum = 0;
  int64_t bubbleSteps = 0;
  auto tagOf = [&](int64_t mb, int64_t v, bool backward) {
    // MPI guarantees tags up to 32767; micro-batches far apart may share one, and those
    // are delivered in order.
    return static_cast<int>(((mb % 1024) * virtualStages + v) * 2 + backward) % 32768;
  };
  std::vector<int32_t> inputs(batch * seq), targets(batch * seq);
  const auto started = std::chrono::steady_clock::now();
  const int64_t firstStep = state.step;
  // A test may ask one rank to die at a step, as a crashed process would, or to stop
  // (SIGSTOP), as a hung one does.
  const char *killRank = std::getenv("MT_FAULT_KILL_RANK");
  const char *killStep = std::getenv("MT_FAULT_KILL_STEP");
  const char *stopRank = std::getenv("MT_FAULT_STOP_RANK");
  const char *stopStep = std::getenv("MT_FAULT_STOP_STEP");
  // A part of the step outside the programs, timed into the profile when there is one.
  auto timed = [&](const char *part, auto &&body) -> Status {
    Profile *profile = executor.profile();
    if (!profile)
      return body();
    profile->forget(); // whatever a failure before left
    MT_TRY(profile->mark());
    MT_TRY(body());
    MT_TRY(profile->mark());
    return profile->record({&profile->part(part)});
  };
  for (int64_t step = state.step; step < config.steps; ++step) {
    comm.setActivity("step " + std::to_string(step + 1));
    if (killRank && killStep && std::atoi(killRank) == comm.position().worldRank() &&
        std::atoll(killStep) == step + 1)
      std::raise(SIGKILL);
    if (stopRank && stopStep && std::atoi(stopRank) == comm.position().worldRank() &&
        std::atoll(stopStep) == step + 1)
      std::raise(SIGSTOP);
    // Forward and backward over every micro-batch; gradients accumulate.
    Timeline::Clock::time_point passStart, passEnd;
    double passBusy = 0;
    // The plan's schedule: this rank's micro-batches forward and backward (gradients
    // accumulate), the gradient synchronisation, the update. The loss, and so the
    // gradient, is the mean over all micro-batches of the global batch.
    if (Status s = timed("zero gradients", [&] { return executor.zeroGradients(); }); !s.ok())
      return s;
    const double lossScale = scaleLoss ? state.lossScaler.scale : 1.0;
    bool skipped = false;
    double lossSum = 0, gradNorm = 0;
    // The counters of a micro-batch's random numbers, and the loss seed's scale.
    auto contextOf = [&](int64_t mb) {
      StepContext context{config.seed, static_cast<uint32_t>(step), static_cast<uint32_t>(mb)};
      context.lossScale = lossScale;
      return context;
    };
    const double lr = learningRate(config.optimizer, step, config.steps);
    auto failed = [&](const Status &s) {
      return Status::failure("step " + std::to_string(step + 1) + ": " + s.message());
    };
    // Micro-batch mb of this data-parallel rank's share, into inputs and targets.
    auto load = [&](int64_t mb) {
      for (int64_t b = 0; b < batch; ++b)
        if (Status s = stream.sample(state.dataPosition + mb * batch + b, &inputs[b * seq],
                                     &targets[b * seq]);
            !s.ok())
          return s;
      return Status::success();
    };
    for (const plan::Action *action : *plan.stages()->Get(stage)->actions()) {
      switch (action->kind()) {
      case plan::ActionKind::ForwardBackward: {
        const int64_t mb = firstMicroBatch + action->micro_batch();
        if (Status s = load(mb); !s.ok())
          return s;
        const StepContext context = contextOf(mb);
        double loss = 0;
        auto begin = Timeline::Clock::now();
        if (Status s = executor.forwardBackward(inputs.data(), targets.data(), context, loss);
            !s.ok())
          return failed(s);
        timeline.add("forward", "compute", begin, executor.lastBackwardStart(), step + 1, mb);
        timeline.add("backward", "compute", executor.lastBackwardStart(),
                     Timeline::Clock::now(), step + 1, mb);
        lossSum += loss;
        break;
      }
      case plan::ActionKind::Forward:
      case plan::ActionKind::Backward: {
        // One virtual stage (chunk × pp + this stage) of one micro-batch, its input from
        // the neighbour before, its output to the neighbour after; a message's tag names
        // its micro-batch, receiving virtual stage and direction.
        const bool backward = action->kind() == plan::ActionKind::Backward;
        const int64_t v = action->chunk() * pipelineStages + stage;
        const uint32_t program = static_cast<uint32_t>(2 * v + backward);
        const int64_t mb = firstMicroBatch + action->micro_batch();
        if (Status s = load(mb); !s.ok())
          return s;
        std::vector<char> received, sent;
        const bool receives = backward ? v + 1 < virtualStages : v > 0;
        if (receives) {
          const int64_t from = backward ? v + 1 : v - 1;
          received.resize(executor.receiveBytes(program));
          if (Status s = comm.recv(Group::Pipeline, static_cast<int>(from % pipelineStages),
                                   received.data(), received.size(), tagOf(mb, v, backward));
              !s.ok())
            return failed(s);
        }
        // Waiting for the neighbour is the bubble; the pass starts once its input is here.
        auto begin = Timeline::Clock::now();
        const StepContext context = contextOf(mb);
        const std::pair<int64_t, int64_t> key{action->chunk(), mb};
        const uint64_t stashBytes = executor.stashBytes(program);
        int slot = -1;
        if (backward) {
          auto held = stashSlots.find(key);
          if (held != stashSlots.end())
            slot = held->second;
          else if (stashBytes > 0)
            return failed(Status::failure(cat("stage ", stage, ": the backward of micro-batch ",
                                              mb, " (chunk ", action->chunk(),
                                              ") has no stash: its forward has not run")));
        } else if (stashBytes > 0) {
          if (freeSlots.empty())
            return failed(Status::failure(cat(
                "the schedule keeps more micro-batches in flight on stage ", stage,
                " than the plan's ", executor.stashSlots(), " stash slots")));
          slot = *freeSlots.begin();
        }
        double loss = 0;
        if (Status s = executor.runPiece(program, inputs.data(), targets.data(), context,
                                         receives ? &received : nullptr, slot, sent, loss);
            !s.ok())
          return failed(s);
        if (backward) {
          stashHeld -= stashBytes;
          if (slot >= 0)
            freeSlots.insert(slot);
          stashSlots.erase(key);
        } else {
          if (slot >= 0) {
            freeSlots.erase(slot);
            stashSlots[key] = slot;
          }
          stashHeld += stashBytes;
          stashPeak = std::max(stashPeak, stashHeld);
        }
        const bool sends = backward ? v > 0 : v + 1 < virtualStages;
        if (sends) {
          const int64_t to = backward ? v - 1 : v + 1;
          if (Status s = comm.send(Group::Pipeline, static_cast<int>(to % pipelineStages),
                                   sent.data(), sent.size(), tagOf(mb, to, backward));
              !s.ok())
            return failed(s);
        } else if (!backward) {
          lossSum += loss; // the last virtual stage computes the loss
        }
        const auto end = Timeline::Clock::now();
        timeline.add(backward ? "backward" : "forward", "compute", begin, end, step + 1, mb);
        // The bubble: time between this step's first and last pass not spent in one.
        if (passStart == Timeline::Clock::time_point())
          passStart = begin;
        passEnd = end;
        passBusy += std::chrono::duration<double>(end - begin).count();
        break;
      }
      case plan::ActionKind::GradSync: {
        auto begin = Timeline::Clock::now();
        if (Status s = comm.waitSends(); !s.ok())
          return failed(s);
        if (Status s = timed("gradient sync", [&] {
              return synchronizeGradients(executor, plan.distributed_optimizer(),
                                          plan.ddp_bucket_bytes());
            });
            !s.ok())
          return failed(s);
        timeline.add("gradient sync", "communication", begin, Timeline::Clock::now(),
                     step + 1);
        break;
      }
      case plan::ActionKind::OptimizerStep: {
        auto begin = Timeline::Clock::now();
        for (Group group : {Group::Pipeline, Group::Data})
          if (Status s = comm.allReduceSum(group, lossSum); !s.ok())
            return failed(s);
        if (!std::isfinite(lossSum) && !scaleLoss)
          return failed(Status::failure("the loss is not finite"));
        const double gradScale = 1.0 / (microBatches * lossScale);
        if (Status s = timed("gradient norm",
                             [&] { return optimizer.gradientNorm(gradScale, gradNorm); });
            !s.ok())
          return failed(s);
        if (scaleLoss) { // an overflow anywhere skips the step
          skipped = !std::isfinite(gradNorm) || !std::isfinite(lossSum);
          state.lossScaler.update(skipped);
          state.skippedSteps += skipped;
        }
        // Adam counts the updates it made, not the steps skipped.
        if (!skipped)
          if (Status s = timed("optimizer", [&] {
                return optimizer.step(step + 1 - state.skippedSteps, lr, gradScale, gradNorm);
              });
              !s.ok())
            return failed(s);
        timeline.add("optimizer", "compute", begin, Timeline::Clock::now(), step + 1);
        break;
      }
      }
    }
    state.dataPosition += microBatches * batch;
    state.step = step + 1;
    if (pipelineStages > 1 && passBusy > 0) {
      bubbleSum += (std::chrono::duration<double>(passEnd - passStart).count() - passBusy) /
                   passBusy;
      ++bubbleSteps;
    }

    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    int64_t done = state.step - firstStep;
    StepRecord record{state.step, lossSum / microBatches, lr, gradNorm,
                      done * microBatches * batch * seq / std::max(elapsed, 1e-9)};
    if (onStep)
      onStep(record);
    if (metrics) {
      std::fprintf(metrics, "step %" PRId64 " loss %.17g lr %.17g grad_norm %.17g\n",
                   record.step, record.loss, record.lr, record.gradNorm);
      std::fflush(metrics);
    }
    if (log && config.logEvery > 0 &&
        (state.step % config.logEvery == 0 || state.step == config.steps || skipped)) {
      std::fprintf(log,
                   "step %" PRId64 "/%" PRId64 " | loss %.4f | lr %.3e | grad norm %.3f | "
                   "%.0f tok/s | ETA %s",
                   state.step, config.steps, record.loss, lr, gradNorm, record.tokensPerSecond,
                   duration(elapsed / done * (config.steps - state.step)).c_str());
      if (scaleLoss)
        std::fprintf(log, " | loss scale %.0f | %s%" PRId64 " skipped", lossScale,
                     skipped ? "overflow, step skipped | " : "", state.skippedSteps);
      std::fprintf(log, "\n");
    }
    if (log)
      std::fflush(log);

    bool lastStep = state.step == config.steps;
    if (!config.saveDir.empty() &&
        (lastStep || (config.saveEvery > 0 && state.step % config.saveEvery == 0))) {
      if (Status s = save(); !s.ok())
        return s;
    } else {
      // An asynchronous save is committed once every rank's write has ended.
      if (Status s = saver.poll(); !s.ok())
        return s;
      reportSave();
    }
  }
  // A run that resumed at its last step saves what it loaded, now in its own layout
  // (as Megatron saves at the end whatever was not saved).
  if (resume && loadedStep == config.steps && !config.saveDir.empty() &&
      config.saveDir != config.loadDir)
    if (Status s = save(); !s.ok())
      return s;
  // The end of training waits for a save still in flight.
  comm.setActivity("finishing the save of step " + std::to_string(state.step));
  {
    IoWatchdog io(comm, config.collectiveTimeout);
    if (Status s = saver.finish(); !s.ok())
      return s;
  }
  reportSave();
  if (log && bubbleSteps > 0)
    std::fprintf(log,
                 "pipeline bubble: %.3f measured on rank 0 (idle over busy between its first "
                 "and last pass, mean of %" PRId64 " steps); ideal %.3f\n",
                 bubbleSum / bubbleSteps, bubbleSteps,
                 static_cast<double>(pipelineStages - 1) /
                     static_cast<double>(plan.virtual_stages() * microBatches /
                                         comm.size(Group::Data)));
  if (log)
    reportMemory(executor, log);
  if (log && executor.backend().records())
    std::fprintf(log, "programs recorded: %d, each replayed as one launch\n",
                 executor.recordedPrograms());
  if (log && executor.profile())
    executor.profile()->print(log, config.steps - firstStep);
  if (log && pipelineStages > 1)
    std::fprintf(log, "stash: %" PRIu64 " bytes held at most on rank 0, %" PRIu64 " planned\n",
                 stashPeak, static_cast<uint64_t>(plan.stages()->Get(stage)->stash_bytes()));
  if (!config.tracePath.empty()) {
    // One file per rank: PATH for a single rank, PATH with .rank<N> before the suffix
    // otherwise.
    std::string path = config.tracePath;
    if (comm.position().worldSize() > 1) {
      size_t slash = path.rfind('/'), dot = path.rfind('.');
      std::string suffix = ".rank" + std::to_string(comm.position().worldRank());
      bool inName = dot != std::string::npos && (slash == std::string::npos || dot > slash);
      path = inName ? path.insert(dot, suffix) : path + suffix;
    }
    if (Status s = timeline.write(path); !s.ok())
      return s;
  }
  return Status::success();
}

} // namespace mt
