// One rank's forward and backward passes under pipeline parallelism. A pass of a virtual
// stage (chunk × pp + this stage) receives its input from the neighbour before it (a
// backward: its output's gradient from the one after), runs its program, keeps or frees
// the stash of its micro-batch in one of the device's stash slots, and sends its output
// on; a message's tag names its micro-batch, receiving virtual stage and direction. The
// time between a step's first and last pass not spent in one is the bubble.
#ifndef MT_RUNTIME_TRAIN_PIPELINEPASSES_H
#define MT_RUNTIME_TRAIN_PIPELINEPASSES_H

#include "exec/Executor.h"

#include <chrono>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace mt {

class PipelinePasses {
public:
  using Clock = std::chrono::steady_clock;
  explicit PipelinePasses(Executor &executor);

  /// What a pass did: when it ran (from its input's arrival), and the loss where it
  /// computed one (the last virtual stage's forward).
  struct Pass {
    Clock::time_point begin, end;
    bool hasLoss = false;
    double loss = 0;
  };
  /// Runs `action` (a Forward or Backward) of micro-batch `mb` (global).
  Status run(const plan::Action &action, int64_t mb, const int32_t *tokens,
             const int32_t *targets, const StepContext &context, Pass &out);

  /// Evaluation (`context.training` false): micro-batch `mb` forward through each of this
  /// rank's virtual stages in turn, receiving and sending as a forward pass does, with
  /// no stash and outside the bubble's measure. `hasLoss` on the last virtual stage's rank.
  Status evaluate(int64_t mb, const int32_t *tokens, const int32_t *targets,
                  const StepContext &context, double &loss, bool &hasLoss);

  /// Closes a step's passes for the bubble's measurement.
  void endStep();
  /// The mean over the steps measured of idle over busy time between a step's first and
  /// last pass; how many steps that is.
  double meanBubble() const { return bubbleSteps_ ? bubbleSum_ / bubbleSteps_ : 0; }
  int64_t measuredSteps() const { return bubbleSteps_; }
  /// The most bytes of stashes held at once.
  uint64_t stashPeak() const { return stashPeak_; }

private:
  int tagOf(int64_t mb, int64_t v, bool backward) const;
  /// The input of virtual stage `v`'s pass from its neighbour, if it has one.
  Status receive(uint32_t program, int64_t v, int64_t mb, bool backward,
                 std::vector<char> &received);
  /// The output of virtual stage `v`'s pass to its neighbour, if it has one.
  Status sendOn(int64_t v, int64_t mb, bool backward, const std::vector<char> &sent);

  Executor &executor_;
  Comm &comm_;
  const int stage_;
  const int64_t stages_, virtualStages_;
  // The stash slot of each micro-batch in flight, by (chunk, micro-batch); the free
  // slots, lowest first.
  std::map<std::pair<int64_t, int64_t>, int> stashSlots_;
  std::set<int> freeSlots_;
  uint64_t stashHeld_ = 0, stashPeak_ = 0;
  Clock::time_point stepStart_, stepEnd_;
  double stepBusy_ = 0, bubbleSum_ = 0;
  int64_t bubbleSteps_ = 0;
};

} // namespace mt

#endif
