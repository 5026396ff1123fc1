#include "plan/Schedule.h"

#include <algorithm>

namespace mt {

std::string buildSchedule(ScheduleKind kind, int64_t stages, int64_t chunks,
                          int64_t microBatches, PipelineSchedule &out) {
  if (stages < 1 || chunks < 1 || microBatches < 1)
    return "pipeline stages, virtual stages and micro-batches must be positive";
  if (kind != ScheduleKind::Interleaved && chunks != 1)
    return "virtual pipeline stages (" + std::to_string(chunks) +
           ") need the interleaved schedule";
  if (kind == ScheduleKind::Interleaved && chunks < 2)
    return "the interleaved schedule needs at least 2 virtual stages per pipeline stage";
  if (kind == ScheduleKind::Interleaved && microBatches % stages != 0)
    return "the interleaved schedule needs the micro-batches (" +
           std::to_string(microBatches) + ") to be a multiple of the pipeline stages (" +
           std::to_string(stages) + ")";
  out = PipelineSchedule{kind, stages, chunks, microBatches, {}};
  out.perStage.resize(stages);
  const int64_t total = microBatches * chunks;
  for (int64_t s = 0; s < stages; ++s) {
    std::vector<PipelineAction> &actions = out.perStage[s];
    // The k-th forward (backward) of this stage: micro-batches in groups of p per chunk,
    // chunks in order forward and in reverse backward.
    auto nth = [&](int64_t k, bool forward) {
      int64_t chunk = (k / stages) % chunks;
      if (!forward)
        chunk = chunks - 1 - chunk;
      return PipelineAction{forward, chunk, (k / (stages * chunks)) * stages + k % stages};
    };
    int64_t warmup = 0;
    switch (kind) {
    case ScheduleKind::GPipe:
      warmup = total;
      break;
    case ScheduleKind::OneFOneB:
      warmup = std::min(stages - s - 1, total);
      break;
    case ScheduleKind::Interleaved:
      warmup = microBatches == stages
                   ? total
                   : std::min((stages - s - 1) * 2 + (chunks - 1) * stages, total);
      break;
    }
    for (int64_t k = 0; k < warmup; ++k)
      actions.push_back(nth(k, true));
    for (int64_t k = 0; k < total - warmup; ++k) {
      actions.push_back(nth(warmup + k, true));
      actions.push_back(nth(k, false));
    }
    for (int64_t k = total - warmup; k < total; ++k)
      actions.push_back(nth(k, false));
  }
  return "";
}

namespace {

/// Runs the schedule with non-blocking sends and blocking receives, each action of
/// virtual stage `c·p + s` taking `seconds(c·p + s, forward)` and each tensor passed between
/// virtual stages arriving `messageSeconds` after it was made. Fills `check` (in-flight
/// counts, and the problem when the schedule is not deadlock free) and `timing`.
void run(const PipelineSchedule &schedule,
         const std::function<double(int64_t, bool)> &seconds, double messageSeconds,
         ScheduleCheck &check, ScheduleTiming &timing) {
  const int64_t p = schedule.stages, v = schedule.chunks, m = schedule.microBatches;
  const int64_t lastVirtual = p * v - 1;
  // Finish times of executed actions, by (forward?, virtual stage, micro-batch); < 0: not run.
  std::vector<double> done(static_cast<size_t>(2 * p * v * m), -1.0);
  auto slot = [&](bool forward, int64_t stage, int64_t mb) -> double & {
    return done[static_cast<size_t>(((forward ? 1 : 0) * p * v + stage) * m + mb)];
  };
  check.maxInFlight.assign(p, 0);
  timing.busy.assign(p, 0);
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0);
  std::vector<int64_t> inFlight(p, 0);
  int64_t executed = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      while (next[s] < schedule.perStage[s].size()) {
        const PipelineAction &a = schedule.perStage[s][next[s]];
        const int64_t stage = a.chunk * p + s;
        if (a.microBatch < 0 || a.microBatch >= m || stage > lastVirtual) {
          check.problem = "stage " + std::to_string(s) + " runs " + actionName(a, v > 1) +
                          ", which does not exist";
          return;
        }
        // What the action waits for: the activation from the previous virtual stage,
        // or the gradient from the next one and this stage's own forward.
        double start = clock[s];
        bool ready = true;
        auto need = [&](bool forward, int64_t from, double delay) {
          const double finished = slot(forward, from, a.microBatch);
          ready = ready && finished >= 0;
          start = std::max(start, finished + delay);
        };
        if (a.forward && stage > 0)
          need(true, stage - 1, messageSeconds);
        if (!a.forward) {
          need(true, stage, 0);
          if (stage < lastVirtual)
            need(false, stage + 1, messageSeconds);
        }
        if (!ready)
          break;
        double &finish = slot(a.forward, stage, a.microBatch);
        if (finish >= 0) {
          check.problem = "stage " + std::to_string(s) + " runs " + actionName(a, v > 1) +
                          " twice";
          return;
        }
        const double duration = seconds(stage, a.forward);
        clock[s] = start + duration;
        timing.busy[s] += duration;
        finish = clock[s];
        ++executed;
        inFlight[s] += a.forward ? 1 : -1;
        check.maxInFlight[s] = std::max(check.maxInFlight[s], inFlight[s]);
        ++next[s];
        progress = true;
      }
    }
  }
  for (int64_t s = 0; s < p; ++s)
    if (next[s] < schedule.perStage[s].size()) {
      check.problem = "deadlock: ";
      for (int64_t t = 0; t < p; ++t)
        if (next[t] < schedule.perStage[t].size())
          check.problem += "stage " + std::to_string(t) + " waits at " +
                           actionName(schedule.perStage[t][next[t]], v > 1) + "; ";
      return;
    }
  // Every micro-batch passed forward and backward through every virtual stage once.
  if (executed != 2 * p * v * m) {
    check.problem = "some micro-batch misses a forward or a backward on some stage";
    return;
  }
  timing.finish = clock;
  timing.makespan = *std::max_element(clock.begin(), clock.end());
  check.deadlockFree = true;
}

} // namespace

ScheduleCheck checkSchedule(const PipelineSchedule &schedule) {
  ScheduleCheck check;
  ScheduleTiming timing;
  const double v = static_cast<double>(schedule.chunks);
  run(schedule, [&](int64_t, bool forward) { return (forward ? 1.0 : 2.0) / v; }, 0.0, check,
      timing);
  if (check.deadlockFree)
    for (double busy : timing.busy)
      check.bubble = std::max(check.bubble, (timing.makespan - busy) / busy);
  return check;
}

ScheduleCheck timeSchedule(const PipelineSchedule &schedule,
                           const std::function<double(int64_t, bool)> &seconds,
                           double messageSeconds, ScheduleTiming &timing) {
  ScheduleCheck check;
  run(schedule, seconds, messageSeconds, check, timing);
  return check;
}

double idealBubble(const PipelineSchedule &schedule) {
  return static_cast<double>(schedule.stages - 1) /
         static_cast<double>(schedule.chunks * schedule.microBatches);
}

std::string parseScheduleKind(const std::string &name, int64_t chunks, ScheduleKind &kind) {
  if (name.empty())
    kind = chunks > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
  else if (name == "gpipe")
    kind = ScheduleKind::GPipe;
  else if (name == "1f1b")
    kind = ScheduleKind::OneFOneB;
  else if (name == "interleaved")
    kind = ScheduleKind::Interleaved;
  else
    return "--schedule must be gpipe, 1f1b or interleaved, got '" + name + "'";
  return "";
}

const char *scheduleName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved:
    return "interleaved";
  }
  return "unknown";
}

std::string actionName(const PipelineAction &action, bool showChunk) {
  std::string name = (action.forward ? "F" : "B") + std::to_string(action.microBatch);
  if (showChunk)
    name += "." + std::to_string(action.chunk);
  return name;
}

} // namespace mt
