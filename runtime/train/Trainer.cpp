#include "train/Trainer.h"
#include "core/AtomicFile.h"
#include "data/IndexedDataset.h"
#include "data/TokenStream.h"
#include "train/Checkpoint.h"
#include "train/PipelinePasses.h"
#include "train/TensorBoard.h"

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
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
    const std::string text =
        nlohmann::json{{"traceEvents", events_}, {"displayTimeUnit", "ms"}}.dump();
    return AtomicFile::writeWhole(path, text.data(), text.size());
  }

private:
  int rank_;
  Clock::time_point origin_;
  std::vector<nlohmann::json> events_;
};

/// What mtc predicted this rank holds: its pipeline stage's figures, else the plan's
/// (without a pipeline, the rank's own; `exact` false where a pipelined plan from an
/// older mtc has none per stage, and they are the most any stage holds).
uint64_t predictedBytes(Executor &executor, bool &exact) {
  const plan::Plan &p = executor.plan();
  const int stage = executor.comm().rank(Group::Pipeline);
  exact = p.grid()->pp() == 1;
  if (!exact && p.stages() && stage < static_cast<int>(p.stages()->size())) {
    const plan::Stage &s = *p.stages()->Get(stage);
    if (uint64_t held =
            s.weight_bytes() + s.gradient_bytes() + s.optimizer_bytes() + s.activation_bytes()) {
      exact = true;
      return held;
    }
  }
  const plan::Accounting *a = p.accounting();
  return a ? a->weight_bytes() + a->gradient_bytes() + a->optimizer_bytes() + a->activation_bytes()
           : 0;
}

/// What this rank holds of its device's memory, beside what mtc predicted for it: on the
/// log (the leader's, else null), and on stderr from any rank whose holding differs from
/// its exact prediction and the guard.
void reportMemory(Executor &executor, int rank, std::FILE *log) {
  Backend &backend = executor.backend();
  bool exact;
  const uint64_t predicted = predictedBytes(executor, exact);
  if (exact && predicted && backend.heldBytes() != predicted + Executor::kGuardBytes)
    std::fprintf(stderr,
                 "mtrun: rank %d holds %" PRIu64 " bytes for the plan, where mtc predicted %" PRIu64
                 " (+ %zu guard bytes)\n",
                 rank, backend.heldBytes(), predicted, Executor::kGuardBytes);
  if (!log)
    return;
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

/// The faults a test asks for: one rank dies at a step (SIGKILL), as a crashed process
/// would, stops (SIGSTOP), as a hung one does, or is sent SIGTERM, as a scheduler ends a
/// job (MT_FAULT_KILL_RANK and _STEP, MT_FAULT_STOP_RANK and _STEP, MT_FAULT_TERM_RANK
/// and _STEP).
class Faults {
public:
  /// Raises what is asked of `rank` at `step` (1-based).
  void at(int rank, int64_t step) const {
    for (const Fault &fault : faults_) {
      const char *faultRank = std::getenv(fault.rank), *faultStep = std::getenv(fault.step);
      if (faultRank && faultStep && std::atoi(faultRank) == rank && std::atoll(faultStep) == step)
        std::raise(fault.signal);
    }
  }

private:
  struct Fault {
    const char *rank, *step;
    int signal;
  };
  static constexpr Fault faults_[] = {{"MT_FAULT_KILL_RANK", "MT_FAULT_KILL_STEP", SIGKILL},
                                      {"MT_FAULT_STOP_RANK", "MT_FAULT_STOP_STEP", SIGSTOP},
                                      {"MT_FAULT_TERM_RANK", "MT_FAULT_TERM_STEP", SIGTERM}};
};

/// One training run on this rank, readable top to bottom: start() loads or initialises
/// the weights, step() walks the plan's schedule for one step (this rank's micro-batches
/// forward and backward, the gradient synchronisation, the update) and logs it, save()
/// checkpoints, finish() waits for the last save and reports.
class Run {
public:
  Run(Executor &executor, const TrainerConfig &config, std::FILE *log,
      const std::function<void(const StepRecord &)> &onStep)
      : executor_(executor), plan_(executor.plan()), comm_(executor.comm()), config_(config),
        schedule_(config.optimizer), leader_(comm_.position().worldRank() == 0),
        log_(leader_ ? log : nullptr), onStep_(onStep),
        // Each data-parallel rank takes a contiguous share of the global batch's
        // micro-batches (the context-parallel ranks of one read the same ones);
        // micro-batch numbers (and so dropout masks) are the global ones.
        microBatches_(plan_.global_batch_size() / plan_.micro_batch_size()),
        share_(microBatches_ / comm_.position().dpSize),
        firstMicroBatch_(comm_.position().dpRank * share_),
        // Each context-parallel rank's loss is the mean over its share of the sequence,
        // all shares of one length: Group::Data sums cp of them per micro-batch.
        lossTerms_(microBatches_ * comm_.size(Group::Context)), batch_(plan_.micro_batch_size()),
        seq_(plan_.seq_length()),
        // fp16 scales the loss (and so every gradient) to keep small gradients
        // representable, and skips the steps whose gradients overflow.
        scaleLoss_(plan_.precision() == plan::DType::F16), timeline_(comm_.position().worldRank()),
        passes_(executor), inputs_(batch_ * seq_), targets_(batch_ * seq_) {
    schedule_.samplesPerStep = plan_.global_batch_size(); // as Megatron counts its schedule
    scheduleRecord_ = scheduleRecord(schedule_, config_.steps);
  }

  Status start();
  Status step(int64_t step);
  Status save();
  Status finish();
  int64_t stepsDone() const { return state_.step; }
  /// Whether an early exit ended the run after the last step (TrainerConfig).
  bool exited() const { return !exitReason_.empty(); }

private:
  Status loadOrInitialise(bool &resumed);
  /// Whether this run may resume from a checkpoint whose training state is `loaded` (as
  /// its index gives it, before its tensors are read): the same seed, data and split,
  /// not past --steps, and the same schedule (or --override-opt-param-scheduler).
  Status resumable(const TrainingState &loaded) const;
  /// The data's splits: the training stream, and the validation and test streams where
  /// they are evaluated.
  Status openSplits();
  /// Opens the datasets and places their documents in the splits (openSplits's first
  /// part): --data's each cut by --split, or each split's own, whole.
  Status openSources();
  /// The documents [first, end) training reads of the first (or only) dataset.
  std::pair<uint64_t, uint64_t> trainingDocuments() const {
    return {sources_[0].bounds[0], sources_[0].bounds[1]};
  }
  /// The micro-batch of `stream` that starts at sample `position`, into inputs_ and
  /// targets_.
  Status load(BlendedStream &stream, uint64_t position);
  /// The mean loss of config_.evalIters global batches of `stream` (forward only, no
  /// dropout), logged as `split`'s.
  Status evaluate(BlendedStream &stream, const char *split);
  /// After the step's record: the save and the evaluations that are due.
  Status afterStep();
  /// Whether to exit early after this step (TrainerConfig's exits), agreed by every rank.
  Status decideExit();
  /// The test split's loss, where there is one (after the last step).
  Status evaluateTest();
  /// The counters of a micro-batch's random numbers, and the loss seed's scale.
  StepContext contextOf(int64_t step, int64_t mb) const;
  /// The update: the loss and gradient norm over the whole batch, the loss scale's
  /// verdict, AdamW.
  Status update(int64_t step, double lr);
  void logStep(const StepRecord &record, std::chrono::steady_clock::time_point now);
  /// TensorBoard's scalars of a step, when it is written. A log that cannot be written
  /// costs the log, not the step or its checkpoint.
  void logScalars(int64_t step, const std::vector<std::pair<std::string, double>> &scalars);
  /// An event file that cannot be written: warned about, and written no more.
  void dropTensorBoard(const Status &failure);
  /// The tokens of `steps` steps over `seconds`, per second.
  double tokensPerSecond(int64_t steps, double seconds) const;
  /// Model TFLOP/s per GPU of `steps` steps over `seconds` (0 without the plan's
  /// accounting).
  double tflopsPerGpu(int64_t steps, double seconds) const;
  /// A part of the step outside the programs, timed into the profile when there is one.
  template <typename Body> Status timed(const char *part, Body &&body);
  void reportSave();

  Executor &executor_;
  const plan::Plan &plan_;
  Comm &comm_;
  const TrainerConfig &config_;
  OptimizerConfig schedule_; // the learning rate's, over samples of the global batch
  std::string scheduleRecord_; // what a checkpoint records of it
  const bool leader_; // the first rank: it logs and writes the metrics
  std::FILE *log_;    // the first rank's only
  const std::function<void(const StepRecord &)> &onStep_;
  const int64_t microBatches_, share_, firstMicroBatch_, lossTerms_, batch_, seq_;
  const bool scaleLoss_;
  /// Each dataset of the blend (one without weights): its documents, and the streams of
  /// its splits (training, validation, test; null where not read).
  struct Source {
    DataSource given;
    IndexedDataset dataset;
    std::array<uint64_t, 4> bounds; // split s holds documents [bounds[s], bounds[s + 1])
    std::array<bool, 3> reads;      // the splits read of it
    const char *flag = nullptr;     // the flag that named it for its split, if one did
    std::array<std::unique_ptr<TokenStream>, 3> splits;
  };
  std::vector<Source> sources_;
  std::unique_ptr<BlendedStream> stream_, validation_, test_;
  std::string trainBlend_; // of a blend: each dataset's fraction and training documents
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<CheckpointSaver> saver_;
  TrainingState state_;
  bool resumed_ = false;
  int64_t loadedStep_ = 0, firstStep_ = 0;
  std::string exitReason_; // why the run exits early, once it does
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> metrics_{nullptr, [](std::FILE *f) {
                                                               return f ? std::fclose(f) : 0;
                                                             }};
  std::optional<tensorboard::EventWriter> tensorboard_; // the first rank's, when asked for
  Timeline timeline_;
  PipelinePasses passes_;
  Faults faults_;
  std::vector<int32_t> inputs_, targets_;
  // The first step's start, the last step's end, and the last logged step's end.
  std::chrono::steady_clock::time_point started_, stepEnded_, loggedAt_;
  int64_t loggedStep_ = 0;
  // The step's figures.
  double lossScale_ = 1, lossSum_ = 0, gradNorm_ = 0;
  bool skipped_ = false;
};

Status Run::start() {
  // The logs first: one that cannot be written is refused before the weights are made.
  if (leader_ && !config_.metricsPath.empty()) {
    std::FILE *file = nullptr;
    MT_TRY(openForAppending(config_.metricsPath, file));
    metrics_.reset(file);
  }
  if (leader_ && !config_.tensorboardDir.empty()) {
    tensorboard::EventWriter writer;
    MT_TRY(tensorboard::EventWriter::open(config_.tensorboardDir, writer));
    tensorboard_ = std::move(writer);
  }
  std::vector<TrainerConfig::StartStage> stages = config_.startStages;
  // Each stage ends when the device has done its work, not when its kernels are queued.
  auto ended = [&](std::string what) {
    if (!config_.launched || !log_)
      return Status::success();
    MT_TRY(executor_.backend().finish());
    stages.push_back({std::move(what), std::chrono::steady_clock::now()});
    return Status::success();
  };
  MT_TRY(openSplits());
  MT_TRY(AdamW::create(executor_, config_.optimizer, plan_.distributed_optimizer(), optimizer_));
  state_.seed = config_.seed;
  if (trainBlend_.empty())
    state_.trainDocuments = trainingDocuments();
  state_.trainBlend = trainBlend_;
  state_.schedule = scheduleRecord_;
  state_.lossScaler = config_.lossScaler;
  comm_.setWatchdog(config_.collectiveTimeout);
  MT_TRY(ended("the data and the optimizer's state"));
  MT_TRY(loadOrInitialise(resumed_));
  MT_TRY(ended(resumed_ ? "loading the weights" : "initialising the weights"));
  // A resumed run's steps replace any the run before logged past its checkpoint (where
  // it has steps to train: a run that only evaluates its checkpoint replaces none). A
  // log that cannot be written costs the log, as logScalars's.
  if (tensorboard_ && resumed_ && state_.step < config_.steps)
    if (Status s = tensorboard_->restart(state_.step + 1); !s.ok())
      dropTensorBoard(s);
  if (config_.launched && log_) {
    std::fprintf(log_, "start-up: %.2f s from launch to the first step:",
                 std::chrono::duration<double>(stages.back().ended - *config_.launched).count());
    auto from = *config_.launched;
    for (const TrainerConfig::StartStage &stage : stages) {
      std::fprintf(log_, "%s %s %.2f s", &stage == stages.data() ? "" : ",", stage.what.c_str(),
                   std::chrono::duration<double>(stage.ended - from).count());
      from = stage.ended;
    }
    std::fprintf(log_, "\n");
  }
  loadedStep_ = firstStep_ = state_.step;
  // Saves, and on the first rank a line of what each cost once it is committed.
  saver_ = std::make_unique<CheckpointSaver>(executor_, *optimizer_, config_.checkpoint);
  // The trace's clock starts with the first step.
  timeline_ = Timeline(comm_.position().worldRank());
  started_ = stepEnded_ = loggedAt_ = std::chrono::steady_clock::now();
  loggedStep_ = state_.step;
  return Status::success();
}

Status Run::openSources() {
  const bool perSplit = !config_.splitData[0].empty();
  const std::vector<DataSource> mock = {{1, "mock data"}};
  if (!perSplit && !config_.mockData && config_.data.empty())
    return Status::failure("no data to train on");
  for (int split = 0; split < (perSplit ? 3 : 1); ++split)
    for (const DataSource &given : perSplit           ? config_.splitData[split]
                                   : config_.mockData ? mock
                                                      : config_.data) {
      Source &source = sources_.emplace_back();
      source.given = given;
      MT_TRY(config_.mockData ? mockDataset(plan_.vocab_size(), source.dataset)
                              : IndexedDataset::open(given.prefix, source.dataset));
      const uint64_t documents = source.dataset.numDocuments();
      if (perSplit) { // [0, documents) in its own split, none in the others
        source.flag = config_.splitDataFlags[split].c_str();
        for (int bound = 0; bound < 4; ++bound)
          source.bounds[bound] = bound > split ? documents : 0;
      } else {
        source.bounds = splitDocuments(config_.split, documents);
      }
      // Training reads each of its datasets; the held-out splits, where evaluated.
      for (int read = 0; read < 3; ++read)
        source.reads[read] = perSplit
                                 ? read == split && (read == 0 || config_.evalIters > 0)
                                 : read == 0 || (config_.evalIters > 0 && config_.split[read] > 0);
    }
  return Status::success();
}

Status Run::openSplits() {
  MT_TRY(openSources());
  char sizes[96];
  std::snprintf(sizes, sizeof sizes, "%g,%g,%g", config_.split[0], config_.split[1],
                config_.split[2]);
  // Per split, the datasets that have it, and why one does not.
  std::array<std::vector<size_t>, 3> members;
  std::array<std::string, 3> lacking;
  for (size_t i = 0; i < sources_.size(); ++i) {
    Source &source = sources_[i];
    const std::string &prefix = source.given.prefix;
    const std::array<uint64_t, 4> &bounds = source.bounds;
    const uint64_t documents = bounds[3];
    if (!source.flag && bounds[1] == bounds[0])
      return Status::failure(cat(prefix, ": --split ", sizes, " leaves no training ",
                                 "documents (of ", documents, ")"));
    // A held-out split's blend of --data leaves out the datasets with no documents
    // there; each dataset is read from the same seed's order of its own samples.
    for (auto [split, name] :
         {std::pair{0, "training"}, std::pair{1, "validation"}, std::pair{2, "test"}}) {
      if (!source.reads[split])
        continue;
      auto lacks = [&, split = split](const std::string &why) {
        lacking[split] += cat(lacking[split].empty() ? "" : "; ", why);
      };
      if (!source.flag && bounds[split + 1] == bounds[split]) { // asked for, nothing there
        lacks(cat(prefix, ": --split ", sizes, " gives the ", name, " split none of the ",
                  documents, " documents"));
        continue;
      }
      DocumentRange d{bounds[split], bounds[split + 1], "data"};
      if (d.first > 0 || d.end < documents)
        d.name = cat("the ", name, " split (documents [", d.first, ", ", d.end, ") of ", documents,
                     ", --split ", sizes, ")");
      auto stream = std::make_unique<TokenStream>(source.dataset, seq_, config_.seed, d);
      if (!stream->usable()) { // a dataset named for the split must have samples
        if (split == 0 || source.flag)
          return Status::failure(
              cat(stream->whyUnusable(), source.flag ? cat(" (", source.flag, ")") : ""));
        lacks(stream->whyUnusable());
        continue;
      }
      MT_TRY(stream->checkVocabulary(plan_.vocab_size()));
      source.splits[split] = std::move(stream);
      members[split].push_back(i);
    }
  }
  // A split's weights: those given, or each dataset's samples there.
  auto weights = [&](int split) {
    std::vector<double> shares;
    for (size_t i : members[split]) {
      const double given = sources_[i].given.weight;
      shares.push_back(given == DataSource::kBySamples
                           ? double(sources_[i].splits[split]->numSamples())
                           : given);
    }
    return shares;
  };
  // What a checkpoint records of a blend: each dataset's fraction and its documents.
  if (members[0].size() > 1) {
    const Blend blend(weights(0));
    for (size_t k = 0; k < members[0].size(); ++k) {
      char fraction[32];
      std::snprintf(fraction, sizeof fraction, "%.17g", blend.fractions()[k]);
      const Source &source = sources_[members[0][k]];
      trainBlend_ += cat(k ? ";" : "", fraction, ",", source.bounds[0], ",", source.bounds[1]);
    }
  }
  if (trainBlend_.size() > kMaxBlendText)
    return Status::failure(cat("a blend of ", members[0].size(), " datasets is more than a ",
                               "checkpoint records (", kMaxBlendText, " characters)"));
  // Each split a blend of the datasets' own that have it, with their weights.
  std::array<std::unique_ptr<BlendedStream> *, 3> streams = {&stream_, &validation_, &test_};
  for (int split = 0; split < 3; ++split) {
    if (members[split].empty()) {
      if (!lacking[split].empty())
        return Status::failure(lacking[split]);
      continue;
    }
    const char *name = split == 0 ? "training" : split == 1 ? "validation" : "test";
    if (!lacking[split].empty() && log_)
      std::fprintf(log_, "the %s blend leaves out the datasets without samples there: %s\n", name,
                   lacking[split].c_str());
    std::vector<TokenStream *> read;
    std::string counts;
    for (size_t i : members[split]) {
      read.push_back(sources_[i].splits[split].get());
      counts +=
          cat(counts.empty() ? "" : ", ", sources_[i].given.prefix, " ", read.back()->numSamples());
    }
    if (read.size() > 1 && sources_[members[split][0]].given.weight == DataSource::kBySamples &&
        log_)
      std::fprintf(log_, "the %s blend weighs each dataset by its samples there: %s\n", name,
                   counts.c_str());
    *streams[split] = std::make_unique<BlendedStream>(read, weights(split));
  }
  return Status::success();
}

Status Run::resumable(const TrainingState &loaded) const {
  auto refuse = [&](const std::string &why) {
    return Status::failure(cat("checkpoint in ", config_.loadDir, " ", why));
  };
  if (loaded.seed != config_.seed)
    return refuse(cat("was trained with seed ", loaded.seed, ", not ", config_.seed));
  // The data position counts samples of the training split (of each dataset of a blend,
  // with the blend's fractions): another's are others.
  auto data = [](const std::string &blend) {
    return blend.empty() ? std::string("one dataset") : "the blend " + blend;
  };
  if (loaded.trainBlend != trainBlend_)
    return refuse(cat("was trained on ", data(loaded.trainBlend), ", this run's data is ",
                      data(trainBlend_), ": resume with the same data and --split"));
  const auto trained = loaded.trainDocuments.value_or(
      std::pair<uint64_t, uint64_t>{0, sources_[0].dataset.numDocuments()});
  const std::pair training = trainingDocuments();
  if (trainBlend_.empty() && trained != training)
    return refuse(cat("was trained on documents [", trained.first, ", ", trained.second,
                      ") of the data, this run's training split is [", training.first, ", ",
                      training.second, "): resume with the same data and --split"));
  if (loaded.step > config_.steps)
    return refuse(cat("is at step ", loaded.step, ", past --steps ", config_.steps));
  // The schedule counts samples, a step's the global batch: a run given in samples ends
  // and decays by them, so it resumes with the batch its checkpoint was trained with.
  const uint64_t batch = static_cast<uint64_t>(plan_.global_batch_size());
  std::string otherBatch;
  if (loaded.dataPosition != static_cast<uint64_t>(loaded.step) * batch) {
    otherBatch =
        loaded.step > 0 && loaded.dataPosition % loaded.step == 0
            ? cat("global batch ", loaded.dataPosition / loaded.step, " there, ", batch, " here")
            : cat(loaded.dataPosition, " samples in ", loaded.step, " steps there, global batch ",
                  batch, " here");
    if (schedule_.trainSamples > 0)
      return refuse(cat("was trained with another global batch (", otherBatch,
                        "): a run of --train-samples resumes with its checkpoint's"));
  }
  // As Megatron's scheduler: the schedule goes on as it was, or is overridden by name.
  const std::string difference = scheduleDifference(loaded.schedule, scheduleRecord_);
  if (!loaded.schedule.empty() && !difference.empty() && !config_.overrideSchedule)
    return refuse(cat("was trained on another schedule (", difference,
                      otherBatch.empty() ? "" : "; ", otherBatch,
                      "): resume with its settings, or give --override-opt-param-scheduler to ",
                      "go on with these"));
  return Status::success();
}

Status Run::loadOrInitialise(bool &resumed) {
  // Megatron users' auto-resume: a job that saves to and loads from one directory starts
  // fresh while the directory holds no checkpoint, so a job script restarted after a
  // failure just continues. A --load of anything else must hold one.
  resumed = !config_.loadDir.empty();
  if (resumed && config_.loadDir == config_.saveDir) {
    MT_TRY(findCheckpoint(config_.loadDir, comm_, resumed));
    if (!resumed && log_)
      std::fprintf(log_, "no checkpoint in %s yet: starting fresh\n", config_.loadDir.c_str());
  }
  if (!resumed)
    return executor_.initParameters(config_.seed);
  comm_.setActivity("loading " + config_.loadDir);
  IoWatchdog io(comm_, config_.collectiveTimeout);
  const auto loadStarted = std::chrono::steady_clock::now();
  uint64_t bytesRead = 0;
  std::string note; // why the marker was passed over, if it was
  MT_TRY(loadCheckpoint(config_.loadDir, executor_, *optimizer_, state_, config_.checkpoint,
                        &bytesRead, &note,
                        [&](const TrainingState &loaded) { return resumable(loaded); }));
  const double loadSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loadStarted).count();
  // The checkpoint has the scaler's state; its settings are this run's.
  state_.lossScaler.minScale = config_.lossScaler.minScale;
  state_.lossScaler.window = config_.lossScaler.window;
  state_.lossScaler.hysteresis = config_.lossScaler.hysteresis;
  if (trainBlend_.empty())
    state_.trainDocuments = trainingDocuments();
  if (const std::string difference = scheduleDifference(state_.schedule, scheduleRecord_);
      !state_.schedule.empty() && !difference.empty() && log_) // overridden: resumable
    std::fprintf(log_, "the schedule is this run's, not the checkpoint's: %s\n",
                 difference.c_str());
  state_.schedule = scheduleRecord_;
  // A lost marker does not stop the resume, and the log says what stood in for it.
  if (log_ && !note.empty())
    std::fprintf(log_, "%s\n", note.c_str());
  if (log_)
    std::fprintf(log_,
                 "resumed from %s at step %" PRId64 ": %" PRIu64 " bytes read by %d ranks in "
                 "%.2f s (%.3f GB/s in all)\n",
                 config_.loadDir.c_str(), state_.step, bytesRead, comm_.position().worldSize(),
                 loadSeconds, bytesRead / std::max(loadSeconds, 1e-9) / 1e9);
  return Status::success();
}

Status Run::load(BlendedStream &stream, uint64_t position) {
  for (int64_t b = 0; b < batch_; ++b)
    MT_TRY(stream.sample(position + b, &inputs_[b * seq_], &targets_[b * seq_]));
  return Status::success();
}

StepContext Run::contextOf(int64_t step, int64_t mb) const {
  StepContext context{config_.seed, static_cast<uint32_t>(step), static_cast<uint32_t>(mb)};
  context.lossScale = lossScale_;
  return context;
}

template <typename Body> Status Run::timed(const char *part, Body &&body) {
  Profile *profile = executor_.profile();
  if (!profile)
    return body();
  profile->forget(); // whatever a failure before left
  MT_TRY(profile->mark());
  MT_TRY(body());
  MT_TRY(profile->mark());
  return profile->record({&profile->part(part)});
}

Status Run::step(int64_t step) {
  comm_.setActivity("step " + std::to_string(step + 1));
  faults_.at(comm_.position().worldRank(), step + 1);
  auto failed = [&](const Status &s) {
    return Status::failure("step " + std::to_string(step + 1) + ": " + s.message());
  };
  // The plan's schedule: this rank's micro-batches forward and backward (gradients
  // accumulate), the gradient synchronisation, the update. The loss, and so the
  // gradient, is the mean over all micro-batches of the global batch.
  MT_TRY(timed("zero gradients", [&] { return executor_.zeroGradients(); }));
  lossScale_ = scaleLoss_ ? state_.lossScaler.scale : 1.0;
  skipped_ = false;
  lossSum_ = gradNorm_ = 0;
  const double lr = learningRate(schedule_, step, config_.steps);
  for (const plan::Action *action : *plan_.stages()->Get(comm_.rank(Group::Pipeline))->actions()) {
    const int64_t mb = firstMicroBatch_ + action->micro_batch();
    auto begin = Timeline::Clock::now();
    switch (action->kind()) {
    case plan::ActionKind::ForwardBackward: {
      MT_TRY(load(*stream_, state_.dataPosition + mb * batch_));
      begin = Timeline::Clock::now();
      double loss = 0;
      if (Status s = executor_.forwardBackward(inputs_.data(), targets_.data(),
                                               contextOf(step, mb), loss);
          !s.ok())
        return failed(s);
      timeline_.add("forward", "compute", begin, executor_.lastBackwardStart(), step + 1, mb);
      timeline_.add("backward", "compute", executor_.lastBackwardStart(),
                    Timeline::Clock::now(), step + 1, mb);
      lossSum_ += loss;
      break;
    }
    case plan::ActionKind::Forward:
    case plan::ActionKind::Backward: {
      MT_TRY(load(*stream_, state_.dataPosition + mb * batch_));
      PipelinePasses::Pass pass;
      if (Status s = passes_.run(*action, mb, inputs_.data(), targets_.data(),
                                 contextOf(step, mb), pass);
          !s.ok())
        return failed(s);
      if (pass.hasLoss)
        lossSum_ += pass.loss;
      timeline_.add(action->kind() == plan::ActionKind::Backward ? "backward" : "forward",
                    "compute", pass.begin, pass.end, step + 1, mb);
      break;
    }
    case plan::ActionKind::GradSync:
      if (Status s = comm_.waitSends(); !s.ok())
        return failed(s);
      if (Status s = timed("gradient sync", [&] {
            return synchronizeGradients(executor_, plan_.distributed_optimizer(),
                                        plan_.ddp_bucket_bytes());
          });
          !s.ok())
        return failed(s);
      timeline_.add("gradient sync", "communication", begin, Timeline::Clock::now(), step + 1);
      break;
    case plan::ActionKind::OptimizerStep:
      if (Status s = update(step, lr); !s.ok())
        return failed(s);
      timeline_.add("optimizer", "compute", begin, Timeline::Clock::now(), step + 1);
      break;
    }
  }
  state_.dataPosition += microBatches_ * batch_;
  state_.step = step + 1;
  passes_.endStep();

  const auto now = std::chrono::steady_clock::now();
  const double seconds =
      std::chrono::duration<double>(now - std::exchange(stepEnded_, now)).count();
  StepRecord record{state_.step, lossSum_ / lossTerms_,      lr, gradNorm_,
                    seconds,     tokensPerSecond(1, seconds)};
  if (onStep_)
    onStep_(record);
  logStep(record, now);
  // Evaluations and saves are not the step's work: the throughput leaves their time out,
  // as Megatron's does.
  const Status after = afterStep();
  const auto end = std::chrono::steady_clock::now();
  loggedAt_ += end - stepEnded_;
  stepEnded_ = end;
  return after;
}

Status Run::decideExit() {
  if (config_.exitInterval > 0 && state_.step % config_.exitInterval == 0)
    exitReason_ = cat("--exit-interval ", config_.exitInterval);
  if (config_.exitMinutes <= 0 && !config_.exitSignalled)
    return Status::success();
  // Each rank's clock and signals are its own: every rank takes what any has, from one
  // sum over them all of the ranks past the duration and, in units of kCaught, of those
  // that caught the signal.
  constexpr double kCaught = double(1 << 24);
  comm_.setActivity(cat("deciding whether to exit after step ", state_.step));
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                       config_.launched.value_or(started_))
                             .count() /
                         60;
  double votes = (config_.exitMinutes > 0 && minutes > config_.exitMinutes) +
                 (config_.exitSignalled && config_.exitSignalled()) * kCaught;
  MT_TRY(comm_.allReduceSumWorld(votes));
  const double caught = std::floor(votes / kCaught), late = votes - caught * kCaught;
  if (late > 0 && exitReason_.empty())
    exitReason_ = cat("past --exit-duration-in-mins ", config_.exitMinutes, " (", minutes,
                      " minutes since launch on rank 0)");
  if (caught > 0 && exitReason_.empty())
    exitReason_ = cat(config_.exitSignal, " caught by ", caught, " of ",
                      comm_.position().worldSize(), " ranks");
  return Status::success();
}

Status Run::afterStep() {
  MT_TRY(decideExit());
  // The save first: an evaluation that fails or is cut short loses no training.
  const bool lastStep = state_.step == config_.steps;
  if (!config_.saveDir.empty() &&
      (lastStep || exited() || (config_.saveEvery > 0 && state_.step % config_.saveEvery == 0))) {
    MT_TRY(save());
  } else {
    // An asynchronous save is committed once every rank's write has ended.
    MT_TRY(saver_->poll());
    reportSave();
  }
  if (validation_ &&
      (lastStep || (config_.evalInterval > 0 && state_.step % config_.evalInterval == 0)))
    MT_TRY(evaluate(*validation_, "validation"));
  if (lastStep)
    MT_TRY(evaluateTest());
  if (exited() && !lastStep && log_)
    std::fprintf(log_, "exiting after step %" PRId64 " of %" PRId64 ": %s%s\n", state_.step,
                 config_.steps, exitReason_.c_str(),
                 config_.saveDir.empty()    ? " (no --save: not saved)"
                 : config_.checkpoint.async ? cat("; saving to ", config_.saveDir).c_str()
                                            : cat("; saved to ", config_.saveDir).c_str());
  return Status::success();
}

Status Run::evaluateTest() { return test_ ? evaluate(*test_, "test") : Status::success(); }

Status Run::evaluate(BlendedStream &stream, const char *split) {
  comm_.setActivity(cat("the ", split, " loss after step ", state_.step));
  const auto began = std::chrono::steady_clock::now();
  // Each data-parallel rank takes its share of each batch's micro-batches, as in training.
  double sum = 0;
  for (int64_t batch = 0; batch < config_.evalIters; ++batch)
    for (int64_t mb = firstMicroBatch_; mb < firstMicroBatch_ + share_; ++mb) {
      const int64_t global = batch * microBatches_ + mb;
      MT_TRY(load(stream, static_cast<uint64_t>(global * batch_)));
      StepContext context = contextOf(state_.step, mb);
      context.training = false;
      double loss = 0;
      bool hasLoss = true;
      if (Status s = plan_.grid()->pp() > 1
                         ? passes_.evaluate(global, inputs_.data(), targets_.data(), context, loss,
                                            hasLoss)
                         : executor_.evaluate(inputs_.data(), targets_.data(), context, loss);
          !s.ok())
        return Status::failure(
            cat("the ", split, " loss after step ", state_.step, ": ", s.message()));
      if (hasLoss)
        sum += loss;
    }
  for (Group group : {Group::Pipeline, Group::Data})
    MT_TRY(comm_.allReduceSum(group, sum));
  const double loss = sum / static_cast<double>(config_.evalIters * lossTerms_);
  // Megatron's perplexity, exp of the loss clamped at 20.
  const double perplexity = std::exp(std::min(loss, 20.0));
  if (metrics_) {
    std::fprintf(metrics_.get(), "%s step %" PRId64 " loss %.17g\n", split, state_.step, loss);
    std::fflush(metrics_.get());
  }
  const std::string tag = cat("lm loss ", split); // Megatron's tags
  logScalars(state_.step, {{tag, loss}, {tag + " ppl", perplexity}});
  if (log_) {
    std::fprintf(log_,
                 "%s loss at step %" PRId64 ": %.4f | perplexity %.3f | %" PRId64
                 " batch%s of %" PRId64 " x %" PRId64 " tokens in %.2f s\n",
                 split, state_.step, loss, perplexity, config_.evalIters,
                 config_.evalIters == 1 ? "" : "es", microBatches_ * batch_, seq_,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
    std::fflush(log_);
  }
  return Status::success();
}

Status Run::update(int64_t step, double lr) {
  for (Group group : {Group::Pipeline, Group::Data})
    MT_TRY(comm_.allReduceSum(group, lossSum_));
  if (!std::isfinite(lossSum_) && !scaleLoss_)
    return Status::failure("the loss is not finite");
  const double gradScale = 1.0 / (lossTerms_ * lossScale_);
  MT_TRY(timed("gradient norm", [&] { return optimizer_->gradientNorm(gradScale, gradNorm_); }));
  if (scaleLoss_) { // an overflow anywhere skips the step
    skipped_ = !std::isfinite(gradNorm_) || !std::isfinite(lossSum_);
    state_.lossScaler.update(skipped_);
    state_.skippedSteps += skipped_;
  }
  if (skipped_)
    return Status::success();
  // Adam counts the updates it made, not the steps skipped. Without loss scaling to skip
  // it, a gradient that is not finite ends the run in AdamW::step, before it reaches the
  // weights, and so any checkpoint.
  return timed("optimizer", [&] {
    return optimizer_->step(step + 1 - state_.skippedSteps, lr,
                            weightDecay(schedule_, step, config_.steps), gradScale, gradNorm_);
  });
}

double Run::tokensPerSecond(int64_t steps, double seconds) const {
  return static_cast<double>(steps * microBatches_ * batch_ * seq_) / std::max(seconds, 1e-9);
}

double Run::tflopsPerGpu(int64_t steps, double seconds) const {
  // Megatron's --log-throughput: the plan's matrix products (one tp rank's, every
  // stage's) times this data-parallel rank's micro-batches, over the pipeline's stages.
  const plan::Accounting *a = plan_.accounting();
  if (!a)
    return 0;
  return static_cast<double>(a->gemm_flops_per_micro_batch()) * microBatches_ * steps /
         (comm_.position().dpSize * comm_.size(Group::Pipeline)) / std::max(seconds, 1e-9) / 1e12;
}

void Run::logStep(const StepRecord &record, std::chrono::steady_clock::time_point now) {
  if (metrics_) {
    std::fprintf(metrics_.get(), "step %" PRId64 " loss %.17g lr %.17g grad_norm %.17g\n",
                 record.step, record.loss, record.lr, record.gradNorm);
    std::fflush(metrics_.get());
  }
  if (tensorboard_) { // Megatron's tags, so that its users' dashboards read ours
    std::vector<std::pair<std::string, double>> scalars = {
        {"lm loss", record.loss},
        {"learning-rate", record.lr},
        {"grad-norm", record.gradNorm},
        {"tokens-per-second", record.tokensPerSecond},
        {"iteration-time", record.seconds}};
    if (plan_.accounting()) {
      const double tflops = tflopsPerGpu(1, record.seconds);
      scalars.emplace_back("throughput", tflops);
      if (config_.peakTflops > 0) // the fraction of the device's peak
        scalars.emplace_back("mfu", tflops / config_.peakTflops);
    }
    if (scaleLoss_)
      scalars.emplace_back("loss-scale", lossScale_);
    // Memory, as Megatron's --log-memory-to-tensorboard names it: what the first rank
    // holds for the plan now and at most; and where the backend knows it, the device's
    // memory in use, all of it (Megatron's mem-reserved-bytes is its allocator's reserve).
    const Backend &backend = executor_.backend();
    scalars.emplace_back("mem-allocated-bytes", static_cast<double>(backend.heldBytes()));
    scalars.emplace_back("mem-max-allocated-bytes", static_cast<double>(backend.heldPeakBytes()));
    if (uint64_t used = 0, total = 0; backend.deviceMemory(used, total))
      scalars.emplace_back("mem-reserved-bytes", static_cast<double>(used));
    logScalars(record.step, scalars);
  }
  if (!log_)
    return;
  if (config_.logEvery > 0 &&
      (state_.step % config_.logEvery == 0 || state_.step == config_.steps || skipped_)) {
    // The throughput of the steps since the last line, as Megatron logs it (the first
    // line's includes the first steps' warm-up); the ETA from the whole run's pace.
    const double elapsed = std::chrono::duration<double>(now - started_).count();
    const double interval = std::chrono::duration<double>(now - loggedAt_).count();
    std::fprintf(log_,
                 "step %" PRId64 "/%" PRId64 " | loss %.4f | lr %.3e | grad norm %.3f | "
                 "%.0f tok/s",
                 state_.step, config_.steps, record.loss, record.lr, record.gradNorm,
                 tokensPerSecond(state_.step - loggedStep_, interval));
    if (config_.peakTflops > 0 && plan_.accounting()) {
      const double tflops = tflopsPerGpu(state_.step - loggedStep_, interval);
      std::fprintf(log_, " | %.1f TFLOP/s per GPU | MFU %.1f%%", tflops,
                   100 * tflops / config_.peakTflops);
    }
    std::fprintf(
        log_, " | ETA %s",
        duration(elapsed / (state_.step - firstStep_) * (config_.steps - state_.step)).c_str());
    loggedStep_ = state_.step;
    loggedAt_ = now;
    if (scaleLoss_)
      std::fprintf(log_, " | loss scale %.0f | %s%" PRId64 " skipped", lossScale_,
                   skipped_ ? "overflow, step skipped | " : "", state_.skippedSteps);
    std::fprintf(log_, "\n");
  }
  std::fflush(log_);
}

void Run::logScalars(int64_t step, const std::vector<std::pair<std::string, double>> &scalars) {
  if (!tensorboard_)
    return;
  if (Status s = tensorboard_->scalars(step, scalars); !s.ok())
    dropTensorBoard(s);
}

void Run::dropTensorBoard(const Status &failure) {
  std::fprintf(stderr, "mtrun: warning: %s; no more TensorBoard events\n",
               failure.message().c_str());
  tensorboard_.reset();
}

void Run::reportSave() {
  SaveReport r;
  if (saver_->takeReport(r) && log_)
    logSave(log_, r, comm_.position().worldSize());
}

Status Run::save() {
  comm_.setActivity("saving step " + std::to_string(state_.step));
  IoWatchdog io(comm_, config_.collectiveTimeout);
  MT_TRY(saver_->save(config_.saveDir, state_));
  reportSave();
  return Status::success();
}

Status Run::finish() {
  // A run that resumed at its last step saves what it loaded, now in its own layout
  // (as Megatron saves at the end whatever was not saved).
  if (resumed_ && loadedStep_ == config_.steps && !config_.saveDir.empty() &&
      config_.saveDir != config_.loadDir)
    MT_TRY(save());
  // ... and evaluates it, as after a last step: a finished run can be evaluated again.
  if (resumed_ && loadedStep_ == config_.steps) {
    if (validation_)
      MT_TRY(evaluate(*validation_, "validation"));
    MT_TRY(evaluateTest());
  }
  // The end of training waits for a save still in flight.
  comm_.setActivity("finishing the save of step " + std::to_string(state_.step));
  {
    IoWatchdog io(comm_, config_.collectiveTimeout);
    MT_TRY(saver_->finish());
  }
  reportSave();
  const int64_t stages = plan_.grid()->pp();
  if (log_ && passes_.measuredSteps() > 0)
    std::fprintf(log_,
                 "pipeline bubble: %.3f measured on rank 0 (idle over busy between its first "
                 "and last pass, mean of %" PRId64 " steps); ideal %.3f\n",
                 passes_.meanBubble(), passes_.measuredSteps(),
                 static_cast<double>(stages - 1) /
                     static_cast<double>(plan_.virtual_stages() * share_));
  reportMemory(executor_, comm_.position().worldRank(), log_);
  if (log_ && executor_.backend().records()) {
    const Executor::Recordings recorded = executor_.recordings();
    std::fprintf(log_,
                 "programs recorded: %d, as %d stretches between collectives, each "
                 "replayed as one launch\n",
                 recorded.programs, recorded.stretches);
  }
  if (log_ && executor_.profile())
    executor_.profile()->print(log_, state_.step - firstStep_);
  if (log_ && stages > 1)
    std::fprintf(log_, "stash: %" PRIu64 " bytes held at most on rank 0, %" PRIu64 " planned\n",
                 passes_.stashPeak(),
                 static_cast<uint64_t>(
                     plan_.stages()->Get(comm_.rank(Group::Pipeline))->stash_bytes()));
  if (config_.tracePath.empty())
    return Status::success();
  // One file per rank: PATH for a single rank, PATH with .rank<N> before the suffix
  // otherwise.
  std::string path = config_.tracePath;
  if (comm_.position().worldSize() > 1) {
    size_t slash = path.rfind('/'), dot = path.rfind('.');
    std::string suffix = ".rank" + std::to_string(comm_.position().worldRank());
    bool inName = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    path = inName ? path.insert(dot, suffix) : path + suffix;
  }
  return timeline_.write(path);
}

} // namespace

Status train(Executor &executor, const TrainerConfig &config, std::FILE *log,
             const std::function<void(const StepRecord &)> &onStep) {
  Run run(executor, config, log, onStep);
  MT_TRY(run.start());
  for (int64_t step = run.stepsDone(); step < config.steps && !run.exited(); ++step)
    MT_TRY(run.step(step));
  return run.finish();
}

} // namespace mt
