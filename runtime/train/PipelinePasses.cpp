#include "train/PipelinePasses.h"

#include <algorithm>
#include <vector>

namespace mt {

PipelinePasses::PipelinePasses(Executor &executor)
    : executor_(executor), comm_(executor.comm()), stage_(comm_.rank(Group::Pipeline)),
      stages_(executor.plan().grid()->pp()),
      virtualStages_(stages_ * executor.plan().virtual_stages()) {
  for (int slot = 0; slot < executor.stashSlots(); ++slot)
    freeSlots_.insert(slot);
}

int PipelinePasses::tagOf(int64_t mb, int64_t v, bool backward) const {
  // MPI guarantees tags up to 32767; micro-batches far apart may share one, and those
  // are delivered in order.
  return static_cast<int>(((mb % 1024) * virtualStages_ + v) * 2 + backward) % 32768;
}

Status PipelinePasses::receive(uint32_t program, int64_t v, int64_t mb, bool backward,
                               std::vector<char> &received) {
  if (backward ? v + 1 == virtualStages_ : v == 0)
    return Status::success();
  const int64_t from = backward ? v + 1 : v - 1;
  received.resize(executor_.receiveBytes(program));
  return comm_.recv(Group::Pipeline, static_cast<int>(from % stages_), received.data(),
                    received.size(), tagOf(mb, v, backward));
}

Status PipelinePasses::sendOn(int64_t v, int64_t mb, bool backward, const std::vector<char> &sent) {
  if (backward ? v == 0 : v + 1 == virtualStages_)
    return Status::success();
  const int64_t to = backward ? v - 1 : v + 1;
  return comm_.send(Group::Pipeline, static_cast<int>(to % stages_), sent.data(), sent.size(),
                    tagOf(mb, to, backward));
}

Status PipelinePasses::evaluate(int64_t mb, const int32_t *tokens, const int32_t *targets,
                                const StepContext &context, double &loss, bool &hasLoss) {
  hasLoss = false;
  for (int64_t chunk = 0; chunk < executor_.plan().virtual_stages(); ++chunk) {
    const int64_t v = chunk * stages_ + stage_;
    const auto program = static_cast<uint32_t>(2 * v);
    std::vector<char> received, sent;
    MT_TRY(receive(program, v, mb, false, received));
    double pieceLoss = 0;
    MT_TRY(executor_.runPiece(program, tokens, targets, context, v > 0 ? &received : nullptr, -1,
                              sent, pieceLoss));
    MT_TRY(sendOn(v, mb, false, sent));
    if (v + 1 == virtualStages_) {
      hasLoss = true;
      loss = pieceLoss;
    }
  }
  return Status::success();
}

Status PipelinePasses::run(const plan::Action &action, int64_t mb, const int32_t *tokens,
                           const int32_t *targets, const StepContext &context, Pass &out) {
  const bool backward = action.kind() == plan::ActionKind::Backward;
  const int64_t v = action.chunk() * stages_ + stage_;
  const uint32_t program = static_cast<uint32_t>(2 * v + backward);
  std::vector<char> received, sent;
  const bool receives = backward ? v + 1 < virtualStages_ : v > 0;
  MT_TRY(receive(program, v, mb, backward, received));
  // Waiting for the neighbour is the bubble; the pass starts once its input is here.
  out.begin = Clock::now();
  const std::pair<int64_t, int64_t> key{action.chunk(), mb};
  const uint64_t stashBytes = executor_.stashBytes(program);
  int slot = -1;
  if (backward) {
    auto held = stashSlots_.find(key);
    if (held != stashSlots_.end())
      slot = held->second;
    else if (stashBytes > 0)
      return Status::failure(cat("stage ", stage_, ": the backward of micro-batch ", mb,
                                 " (chunk ", action.chunk(),
                                 ") has no stash: its forward has not run"));
  } else if (stashBytes > 0) {
    if (freeSlots_.empty())
      return Status::failure(cat("the schedule keeps more micro-batches in flight on stage ",
                                 stage_, " than the plan's ", executor_.stashSlots(),
                                 " stash slots"));
    slot = *freeSlots_.begin();
  }
  double loss = 0;
  MT_TRY(executor_.runPiece(program, tokens, targets, context, receives ? &received : nullptr,
                            slot, sent, loss));
  if (backward) {
    stashHeld_ -= stashBytes;
    if (slot >= 0)
      freeSlots_.insert(slot);
    stashSlots_.erase(key);
  } else {
    if (slot >= 0) {
      freeSlots_.erase(slot);
      stashSlots_[key] = slot;
    }
    stashHeld_ += stashBytes;
    stashPeak_ = std::max(stashPeak_, stashHeld_);
  }
  MT_TRY(sendOn(v, mb, backward, sent));
  out.hasLoss = !backward && v + 1 == virtualStages_; // the last virtual stage's forward
  out.loss = loss;
  out.end = Clock::now();
  if (stepStart_ == Clock::time_point())
    stepStart_ = out.begin;
  stepEnd_ = out.end;
  stepBusy_ += std::chrono::duration<double>(out.end - out.begin).count();
  return Status::success();
}

void PipelinePasses::endStep() {
  if (stages_ > 1 && stepBusy_ > 0) {
    bubbleSum_ +=
        (std::chrono::duration<double>(stepEnd_ - stepStart_).count() - stepBusy_) / stepBusy_;
    ++bubbleSteps_;
  }
  stepStart_ = stepEnd_ = Clock::time_point();
  stepBusy_ = 0;
}

} // namespace mt
