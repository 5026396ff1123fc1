#include "plan/Schedule.h"

#include <algorithm>
#include <map>

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

ScheduleCheck checkSchedule(const PipelineSchedule &schedule) {
  const int64_t p = schedule.stages, v = schedule.chunks;
  const int64_t lastVirtual = p * v - 1;
  // Finish times of executed actions, by (forward?, virtual stage, micro-batch).
  std::map<std::tuple<bool, int64_t, int64_t>, double> done;
  const double forwardTime = 1.0 / v, backwardTime = 2.0 / v;

  ScheduleCheck check;
  check.maxInFlight.assign(p, 0);
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0), busy(p, 0);
  std::vector<int64_t> inFlight(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      while (next[s] < schedule.perStage[s].size()) {
        const PipelineAction &a = schedule.perStage[s][next[s]];
        const int64_t stage = a.chunk * p + s;
        // What the action waits for: the activation from the previous virtual stage,
        // or the gradient from the next one and this stage's own forward.
        std::vector<std::tuple<bool, int64_t, int64_t>> needs;
        if (a.forward && stage > 0)
          needs.emplace_back(true, stage - 1, a.microBatch);
        if (!a.forward) {
          needs.emplace_back(true, stage, a.microBatch);
          if (stage < lastVirtual)
            needs.emplace_back(false, stage + 1, a.microBatch);
        }
        double start = clock[s];
        bool ready = true;
        for (const auto &need : needs) {
          auto it = done.find(need);
          if (it == done.end()) {
            ready = false;
            break;
          }
          start = std::max(start, it->second);
        }
        if (!ready)
          break;
        double duration = a.forward ? forwardTime : backwardTime;
        clock[s] = start + duration;
        busy[s] += duration;
        if (!done.emplace(std::make_tuple(a.forward, stage, a.microBatch), clock[s]).second) {
          check.problem = "stage " + std::to_string(s) + " runs " + actionName(a, v > 1) +
                          " twice";
          return check;
        }
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
      return check;
    }
  // Every micro-batch passed forward and backward through every virtual stage once.
  if (static_cast<int64_t>(done.size()) != 2 * p * v * schedule.microBatches) {
    check.problem = "some micro-batch misses a forward or a backward on some stage";
    return check;
  }
  double makespan = *std::max_element(clock.begin(), clock.end());
  for (int64_t s = 0; s < p; ++s)
    check.bubble = std::max(check.bubble, (makespan - busy[s]) / busy[s]);
  check.deadlockFree = true;
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
