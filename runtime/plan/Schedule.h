// Pipeline schedules: the order in which each stage runs the forward and backward
// passes of its model chunks over the micro-batches, and a checker that proves every
// receive meets its send before a plan is written.
//
// GPipe runs every forward, then every backward. 1F1B (PipeDream-Flush, Narayanan et al.
// 2021) warms up with p − s − 1 forwards on stage s, then alternates one forward and one
// backward, and cools down with the remaining backwards, so at most p − s micro-batches
// are in flight. Interleaved 1F1B gives each stage v model chunks (virtual stages
// c·p + s), cutting the bubble from (p − 1)/m to (p − 1)/(v·m); Megatron's order needs m
// to be a multiple of p.
#ifndef MT_RUNTIME_PLAN_SCHEDULE_H
#define MT_RUNTIME_PLAN_SCHEDULE_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mt {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved };

/// The kind `--schedule` names: "gpipe", "1f1b" or "interleaved", or, for an empty
/// name, the default: interleaved with several chunks per stage, else 1F1B. Returns an
/// error naming the choices, or "".
std::string parseScheduleKind(const std::string &name, int64_t chunks, ScheduleKind &kind);
/// The kind's `--schedule` name.
const char *scheduleName(ScheduleKind kind);

struct PipelineAction {
  bool forward;
  int64_t chunk, microBatch;
};

struct PipelineSchedule {
  ScheduleKind kind;
  int64_t stages, chunks, microBatches;
  std::vector<std::vector<PipelineAction>> perStage;
};

/// Builds the schedule, or returns an error naming the numbers that do not fit.
std::string buildSchedule(ScheduleKind kind, int64_t stages, int64_t chunks,
                          int64_t microBatches, PipelineSchedule &out);

/// What the checker found by running the schedule with non-blocking sends and blocking
/// receives: a deadlock (the actions every stage is stuck at), or the most micro-batches
/// each stage holds in flight and the bubble, with a forward taking one unit of time
/// and a backward two.
struct ScheduleCheck {
  bool deadlockFree = false;
  std::string problem;
  std::vector<int64_t> maxInFlight; // per stage: forwards whose backward has not run
  double bubble = 0;                // idle fraction of the busiest timeline
};
ScheduleCheck checkSchedule(const PipelineSchedule &schedule);

/// The schedule on a clock: how long it takes from its first action to its last, and
/// how long each stage computes in that time.
struct ScheduleTiming {
  double makespan = 0;
  std::vector<double> busy, finish; // per stage: time in its actions, end of its last
};
/// Runs a schedule whose actions of virtual stage c·p + s take `seconds(c·p + s,
/// forward)`, and whose activations and gradients reach the next virtual stage
/// `messageSeconds` after they were made (sends do not block; receives wait). The check
/// is checkSchedule's, but for its bubble.
ScheduleCheck timeSchedule(const PipelineSchedule &schedule,
                           const std::function<double(int64_t, bool)> &seconds,
                           double messageSeconds, ScheduleTiming &timing);

/// The ideal bubble: (p − 1)/m, or (p − 1)/(v·m) interleaved.
double idealBubble(const PipelineSchedule &schedule);

/// "F3" / "B3", or "F3.1" (micro-batch 3, chunk 1) when stages hold several chunks.
std::string actionName(const PipelineAction &action, bool showChunk);

} // namespace mt

#endif
