// Walks a plan's program on one rank: binds every buffer (activations and inputs at
// their static offsets in one arena, parameters and gradients in two flat stores) and
// hands each instruction to the backend, or to the communicator for collectives.
#ifndef MT_RUNTIME_EXEC_EXECUTOR_H
#define MT_RUNTIME_EXEC_EXECUTOR_H

#include "backends/Backend.h"
#include "comm/Comm.h"
#include "exec/Profile.h"
#include "plan/PlanReader.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace mt {

struct ExecutorOptions {
  /// Gives every activation its own allocation instead of its planned arena offset;
  /// a run in this mode checks that the memory plan's reuse changes nothing.
  bool separateBuffers = false;
  /// Records each stretch of a program between its collectives (and the instructions the
  /// backend may not record) after its first run, on a backend that records (CUDA: a
  /// graph), and replays the recording from then on: one launch for the stretch, and for
  /// a program with neither, one for the program. Runs under a profile run instruction by
  /// instruction.
  bool recordPrograms = true;
};

/// Runs of elements of the flat stores, in order, and a store that keeps just them, one
/// after another: what a rank's optimizer updates (all, or its shares).
struct FlatShare {
  struct Run {
    int64_t begin, end;
  };
  std::vector<Run> runs;
  int64_t numel() const;
  /// Where flat element `at`, which a run holds, lies in such a store.
  int64_t local(int64_t at) const;
  /// f(begin, end) for each part of flat elements [begin, end) that a run holds.
  template <typename F> void forEachIn(int64_t begin, int64_t end, F f) const {
    for (const Run &r : runs)
      if (std::max(begin, r.begin) < std::min(end, r.end))
        f(std::max(begin, r.begin), std::min(end, r.end));
  }
};

/// Where a pipeline stage keeps its parameters: the flat weight and gradient stores hold
/// them in plan order, each a contiguous slice of `numel` elements (this rank's
/// tensor-parallel shard); under expert parallelism the experts' weights after the rest,
/// from `experts` on. The rest is padded to a multiple of dataParts(), the experts to a
/// multiple of the expert-data-parallel ranks (dataParts() / ep), to `total`. A pure
/// function of the plan: a checkpoint computes any rank's layout with it.
struct FlatLayout {
  struct Slot {
    int32_t index;            // in the plan's parameter table
    int64_t offset, numel;    // in elements of the flat stores
    std::vector<int> holders; // the pipeline stages that hold it (tied: several), sorted
  };
  std::vector<Slot> slots;
  int64_t experts = 0, total = 0;
  int parts = 1, ep = 1; // Group::Data's size, and Group::Expert's
  /// What the distributed optimizer gives data rank `dataRank` (Group::Data): its share
  /// of the rest over the data-parallel ranks, and of the experts over the ranks holding
  /// the same experts (Group::ExpertData, whose rank is dataRank / ep).
  FlatShare shareOf(int dataRank) const;
  FlatShare whole() const { return {{{0, total}}}; }
};
FlatLayout flatLayout(const plan::Plan &plan, int stage);

/// The bytes ring attention keeps in flight for `prog` (Executor::runRing): two shares of
/// keys and values forward, and two of their gradients as well backward; mtc accounts
/// the same (compiler/Accounting.cpp).
uint64_t ringBytes(const plan::Program &prog);

/// The ranks that reduce gradients and share the distributed optimizer's state
/// (Group::Data): the data-parallel ranks times the context-parallel ones, which
/// compute partial gradients of the same micro-batches.
inline int dataParts(const plan::Plan &plan) { return plan.grid()->dp() * plan.grid()->cp(); }

class Executor {
public:
  /// One parameter's slice of the flat weight and gradient stores (f32 master weights
  /// under mixed precision).
  struct Parameter {
    const plan::Param *spec;
    int32_t index; // in the plan's parameter table
    std::string name;
    TensorView weight, grad;
    int64_t offset, numel; // in elements of the flat stores
    size_t bytes;
    std::vector<int> holders; // the pipeline stages that hold it (tied: several)
  };

  static Status create(const LoadedPlan &plan, Backend &backend, Comm &comm,
                       ExecutorOptions options, std::unique_ptr<Executor> &out);
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  const plan::Plan &plan() const { return plan_; }
  Backend &backend() { return backend_; }
  Comm &comm() { return comm_; }
  /// The parameters this rank's pipeline stage holds, in the flat stores' order (plan
  /// order; under expert parallelism the experts' after the rest).
  std::vector<Parameter> &parameters() { return parameters_; }
  /// Every gradient as one vector (FlatLayout's, the padding zero), and the master
  /// weights over the same elements — all of them, or, under mixed precision with the
  /// distributed optimizer, only this data-parallel rank's share (masterShare()), as
  /// Megatron's distributed optimizer keeps them. Then Parameter::weight has no data.
  const TensorView &flatWeights() const { return flatWeights_; }
  const TensorView &flatGrads() const { return flatGrads_; }
  const FlatLayout &flatLayout() const { return layout_; }
  const FlatShare &masterShare() const { return masterShare_; }
  bool masterSharded() const { return flatWeights_.numel() != flatGrads_.numel(); }
  /// The 16-bit copy of all weights the programs read (no data without one).
  const TensorView &flatCompute() const { return flatCompute_; }
  /// The master weights of elements [begin, end) of the flat store, which this rank
  /// must hold.
  TensorView masterSlice(int64_t begin, int64_t end) const;

  /// Tokens per micro-batch (micro-batch size × sequence length).
  int64_t tokensPerMicroBatch() const;

  Status initParameters(uint64_t seed);
  /// Under bf16 and f16, the programs read a 16-bit copy of the f32 master weights:
  /// this rounds the master weights into it. Whatever changes the weights calls it (init,
  /// the optimizer where its update does not write the copy, a checkpoint load); without a
  /// copy, or with sharded master weights (whose optimizer gathers the copy itself), it
  /// does nothing.
  Status refreshComputeWeights();
  Status zeroGradients();
  /// One micro-batch forward and backward; gradients accumulate into the parameters'
  /// gradient buffers. `tokens` and `targets` hold tokensPerMicroBatch() ids each. In
  /// evaluation (`context.training` false) the program runs forward only, up to the
  /// instruction that completes its loss, every dropout the identity; nothing it writes
  /// outlives the call, and it is neither timed nor recorded.
  Status forwardBackward(const int32_t *tokens, const int32_t *targets, StepContext context,
                         double &loss);
  /// forwardBackward in evaluation: the loss of one micro-batch, forward only, without
  /// dropout.
  Status evaluate(const int32_t *tokens, const int32_t *targets, StepContext context,
                  double &loss) {
    context.training = false;
    return forwardBackward(tokens, targets, context, loss);
  }

  /// Under pipeline parallelism: one program of this stage (a virtual stage's forward or
  /// backward) for one micro-batch. `received` is the neighbour's tensor (if the program
  /// receives one); a forward keeps what its backward needs in stash slot `slot` (of
  /// stashSlots()), and that backward reads it from the same slot; `sent` gets the tensor
  /// for the neighbour, `loss` the loss (last forward only). A forward in evaluation
  /// stashes nothing (`slot` unused).
  Status runPiece(uint32_t program, const int32_t *tokens, const int32_t *targets,
                  StepContext context, const std::vector<char> *received, int slot,
                  std::vector<char> &sent, double &loss);
  /// The stash slots on the device: as many micro-batches' stashes as the plan's
  /// schedule keeps in flight on this stage (0 without a pipeline, or when the stage
  /// stashes nothing).
  int stashSlots() const { return stashSlots_; }
  /// Bytes program `program` of this stage stashes (a forward) or reads from its stash
  /// (a backward).
  uint64_t stashBytes(uint32_t program) const;

  /// Bytes a program receives from its neighbour (0 if none).
  size_t receiveBytes(uint32_t program) const;

  /// When the last forwardBackward's backward began: its first instruction after the
  /// forward (the loss seed); for a recorded stretch that holds it, when the stretch was
  /// replayed. For timelines.
  std::chrono::steady_clock::time_point lastBackwardStart() const { return backwardStart_; }

  /// What of this stage runs as recordings now (ExecutorOptions::recordPrograms): the
  /// programs with any, and the recorded stretches of all of them, each replayed as one.
  struct Recordings {
    int programs = 0, stretches = 0;
  };
  Recordings recordings() const;

  /// Times every instruction the executor runs into `profile` from now on (null: none).
  /// Each program then waits for its marks, so the host no longer runs ahead of the
  /// device across programs.
  void setProfile(Profile *profile) { profile_ = profile; }
  Profile *profile() const { return profile_; }

  /// Measures the arena: fill it (and the guard region after it) with a sentinel byte
  /// before running, and afterwards find the end of the last byte that no longer holds
  /// it. A written byte can equal the sentinel by chance, so a measurement that must be
  /// exact takes the larger of two runs with different sentinels. A result past
  /// plannedArenaBytes() means an instruction wrote outside the arena.
  static constexpr uint8_t kSentinel = 0xA5;
  static constexpr size_t kGuardBytes = 4096;
  Status fillArena(uint8_t sentinel);
  Status arenaBytesWritten(uint8_t sentinel, uint64_t &written);
  uint64_t plannedArenaBytes() const { return arenaBytes_; }

private:
  Executor(const plan::Plan &plan, Backend &backend, Comm &comm);
  Status bind(ExecutorOptions options);
  /// `bytes` of device memory, held until the executor goes.
  Status allocate(size_t bytes, void *&data);
  Status setInput(const TensorView &view, const int32_t *ids);
  Status run(uint32_t program, const int32_t *tokens, const int32_t *targets,
             StepContext context);
  /// Runs the program's instructions [begin, end) one by one (`timed`: the profile's
  /// entries).
  Status runInstructions(uint32_t program, const StepContext &context,
                         std::vector<Profile::Entry *> *timed, uint32_t begin = 0,
                         uint32_t end = ~0u);
  /// Runs a program of training: its stretches as recordings (runStretch), and the
  /// instructions between them one by one.
  Status runStretches(uint32_t program, const StepContext &context);
  struct Stretch;
  /// Replays the stretch's recording, recording it first where it has run before; runs
  /// its instructions one by one where it has none.
  Status runStretch(uint32_t program, Stretch &stretch, const StepContext &context);
  /// A failure of instruction `index` of `program`, named.
  Status failedAt(uint32_t program, uint32_t index, const Status &cause) const;
  Status runCollective(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
                       const StepContext &context);
  /// Backend::run, for the instruction running now (callers_).
  Status runKernel(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
                   const StepContext &context);
  /// Ring attention's shares in flight for stage `stage`'s programs (ringBytes()).
  Status bindRing(int stage);
  /// Ring attention (RingAttention, RingAttentionGrad): the context-parallel group's
  /// shares of keys and values (and their gradients) go round the ring a step at a time,
  /// and the backend computes each step's part (StepContext::ringOwner).
  Status runRing(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
                 const StepContext &context);
  /// An expert exchange (MoeExchange, MoeExchangeBack): rows to the ranks of their
  /// experts through the expert group's all-to-all, reordered through the staging
  /// buffer (ring_) between source-major and expert-major.
  Status runExchange(const plan::Instruction &inst, const TensorView *in, const TensorView *out);
  /// The profile's entry of instruction `index` of `program`, whose first operand is `in`
  /// and first output `out`.
  Profile::Entry &profileEntry(uint32_t program, uint32_t index, const plan::Instruction &inst,
                               const TensorView &in, const TensorView &out);

  const plan::Plan &plan_;
  Backend &backend_;
  Comm &comm_;
  std::vector<DeviceMemory> allocations_;
  std::vector<std::vector<TensorView>> views_; // per program (this stage's), per buffer
  /// The instruction of each backend run since the program began (Backend::checkRuns
  /// names a run by its place among them): a ring's steps are its instruction's.
  std::vector<uint32_t> callers_;
  uint32_t running_ = 0; // the instruction running now
  /// A run of a program's instructions [begin, end) that one recording may hold: the
  /// backend runs each (no collective comes between them) and may record each
  /// (Backend::recordable). Its recording, if it has one; its runs so far; and how many
  /// times recording it failed.
  struct Stretch {
    uint32_t begin = 0, end = 0;
    std::unique_ptr<Recording> recording;
    int runs = 0, failures = 0;
  };
  /// Per program: its stretches, in order (none where nothing is recorded).
  std::vector<std::vector<Stretch>> stretches_;
  std::vector<uint32_t> backwardAt_;           // per program: where its backward begins
  std::vector<int> localParam_;                // plan parameter -> parameters_ index
  uint64_t arenaBytes_ = 0;
  std::vector<Parameter> parameters_;
  TensorView flatWeights_, flatGrads_;
  TensorView flatCompute_; // the 16-bit compute copy of the weights, if any
  FlatLayout layout_;
  FlatShare masterShare_;
  void *arena_ = nullptr;
  /// Ring attention's shares in flight: two of keys and values, and of their gradients;
  /// or an expert exchange's staging (ringBytes(), as mtc accounts them).
  void *ring_ = nullptr;
  std::vector<uint8_t> addInstruction_; // a plan instruction Add, for ring attention
  std::chrono::steady_clock::time_point backwardStart_;
  Profile *profile_ = nullptr;
  void *stashes_ = nullptr; // stashSlots_ slots of stashSlotBytes_
  int stashSlots_ = 0;
  uint64_t stashSlotBytes_ = 0;
};

} // namespace mt

#endif
