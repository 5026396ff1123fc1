// What the executor needs from a device: memory, one call per plan instruction, and
// the optimizer's arithmetic. The CPU backend is the numerical reference; the CUDA
// backend implements the same interface.
#ifndef MT_RUNTIME_BACKENDS_BACKEND_H
#define MT_RUNTIME_BACKENDS_BACKEND_H

#include "core/SharedMath.h"
#include "core/Status.h"
#include "core/Tensor.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mt {

/// Where in training an instruction runs: the counters of every random number, and
/// this rank's place in the tensor-parallel group (which vocabulary rows or sequence
/// block it holds) and in the context-parallel group (which share of the sequence).
struct StepContext {
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t microBatch = 0;
  int tpRank = 0, tpSize = 1;
  int cpRank = 0, cpSize = 1;
  /// A step of ring attention (RingAttention, RingAttentionGrad): the context rank whose
  /// share of keys and values the step holds, and whether it is the first.
  int ringOwner = 0;
  bool ringFirst = true;
  /// The factor of the loss seed (a Fill marked `loss_seed`): fp16's dynamic loss
  /// scale, else 1.
  double lossScale = 1;
  /// False in evaluation: every dropout is the identity (dropoutRate), and a program
  /// runs forward only, up to its loss.
  bool training = true;
  /// The instruction run: its program and its index there (Executor sets them; a backend
  /// may keep what an instruction made for the one after it in the same program).
  uint32_t program = 0, instruction = 0;
};

/// The rate at which a dropout instruction (or attention's probability dropout) drops:
/// its own while training, 0 in evaluation.
inline double dropoutRate(const plan::Instruction &inst, const StepContext &ctx) {
  return ctx.training ? inst.rate() : 0.0;
}

/// The positions in the whole sequence of the `rows` rows of dimension 1 that an
/// instruction's tensor holds: this tensor-parallel rank's block of them with
/// `sequence_parallel`, of this context-parallel rank's share with `context_parallel`.
inline SequenceMap sequenceMap(const plan::Instruction &inst, int64_t rows,
                               const StepContext &ctx) {
  const bool sp = inst.sequence_parallel(), cp = inst.context_parallel() > 0;
  return SequenceMap(rows, sp ? ctx.tpRank : 0, sp ? ctx.tpSize : 1, cp ? ctx.cpRank : 0,
                     cp ? ctx.cpSize : 1);
}

/// Where a dropout's (block of a) tensor lies in the whole one, so that its mask is
/// drawn per global element: its block of dimension 1 (the sequence, or the heads of
/// attention probabilities; under context parallelism, its share of the sequence), of
/// the last dimension (feature parallel), or all of it.
inline ShardMap dropoutShard(const plan::Instruction &inst, const TensorView &x,
                             const StepContext &ctx) {
  const bool sp = inst.sequence_parallel(), cp = inst.context_parallel() > 0;
  return sp || cp ? ShardMap(x, 1, sp ? ctx.tpRank : 0, sp ? ctx.tpSize : 1, cp ? ctx.cpRank : 0,
                             cp ? ctx.cpSize : 1)
         : inst.feature_parallel() ? ShardMap(x, x.rank - 1, ctx.tpRank, ctx.tpSize)
                                   : ShardMap();
}

/// Attention-probability dropout draws the mask of the global [B, heads, S, S]
/// probabilities: a head-parallel rank holds heads [tpRank·heads, (tpRank + 1)·heads).
struct ProbsMaskIndex {
  int64_t globalHeads = 0, headOffset = 0;

  ProbsMaskIndex() = default;
  ProbsMaskIndex(int64_t heads, bool headParallel, const StepContext &ctx)
      : globalHeads(headParallel ? heads * ctx.tpSize : heads),
        headOffset(headParallel ? ctx.tpRank * heads : 0) {}
  /// The global index of probability (i, j) of local head hi of batch bi.
  MT_HOST_DEVICE uint64_t operator()(int64_t bi, int64_t hi, int64_t i, int64_t j,
                                     int64_t s) const {
    return static_cast<uint64_t>(((bi * globalHeads + headOffset + hi) * s + i) * s + j);
  }
};

/// Activation `F` (core/SharedMath.h) as `inst` runs it: one with attributes builds itself
/// from the instruction that carries them, so that a new attribute reaches both backends
/// through the activation's own definition.
template <typename F> F activationOf(const plan::Instruction &inst) {
  if constexpr (std::is_constructible_v<F, const plan::Instruction &>)
    return F(inst);
  else
    return F{};
}

/// A Rotary instruction's rotation (core/SharedMath.h).
inline Rope ropeOf(const plan::Instruction &inst) {
  Rope rope;
  rope.theta = inst.theta();
  rope.scalingFactor = inst.scaling_factor();
  rope.lowFreqFactor = inst.low_freq_factor();
  rope.highFreqFactor = inst.high_freq_factor();
  rope.originalPositions = static_cast<double>(inst.original_positions());
  rope.sign = inst.inverse() ? -1 : 1;
  return rope;
}
/// The layout of the fused QKV of `width` that an attention or rotary instruction reads,
/// with `heads` query heads (its own, or dimension 1 of the probabilities it reads) and
/// kv_heads key/value heads, one per head without it.
inline QkvLayout qkvLayoutOf(const plan::Instruction &inst, int64_t heads, int64_t width) {
  QkvLayout layout;
  layout.heads = heads;
  layout.kv = inst.kv_heads() > 0 ? inst.kv_heads() : heads;
  layout.d = width / (heads + 2 * layout.kv);
  return layout;
}

/// The mask of an attention instruction's scores.
inline AttentionMask attentionMaskOf(const plan::Instruction &inst) {
  return {inst.causal(), inst.window()};
}

/// One parameter's part of an AdamW step: its master weights, gradient and moments, of
/// one length, and its weight decay (none for vectors, as Megatron). `compute`, where it
/// has data, is the weights' 16-bit copy the programs read, of the same length: written
/// from the updated weights as convert() rounds them (on a GPU, by the update's own pass).
struct AdamWTensors {
  TensorView weight, grad, expAvg, expAvgSq;
  double weightDecay = 0;
  TensorView compute;
};

/// Marks in the order of a backend's work, and the seconds between them: what a profile
/// of the device's time is made of.
class Stopwatch {
public:
  virtual ~Stopwatch() = default;
  /// A mark after all the work asked of the backend so far.
  virtual Status mark() = 0;
  /// Waits for the last mark; `seconds` gets the time between each mark and the next,
  /// in order, and the marks are forgotten.
  virtual Status laps(std::vector<double> &seconds) = 0;
  /// Drops the marks without waiting (after a failure, whose laps mean nothing).
  virtual void forget() = 0;
};

/// The host's clock: the stopwatch of a backend whose work is done when its call returns.
class HostStopwatch final : public Stopwatch {
public:
  Status mark() override {
    marks_.push_back(std::chrono::steady_clock::now());
    return Status::success();
  }
  Status laps(std::vector<double> &seconds) override {
    seconds.clear();
    for (size_t i = 1; i < marks_.size(); ++i)
      seconds.push_back(std::chrono::duration<double>(marks_[i] - marks_[i - 1]).count());
    marks_.clear();
    return Status::success();
  }
  void forget() override { marks_.clear(); }

private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

/// A backend's work recorded once and run again as one launch (on CUDA, a graph): the
/// executor records a stretch of a program (the whole program where nothing breaks it)
/// after running it once, and replays the recording from then on.
class Recording {
public:
  virtual ~Recording() = default;
  /// Runs the recorded work again, its random draws and loss seed from `context`. Runs
  /// nothing and sets `stale` where the recording no longer fits what runs around it
  /// (memory it uses has moved since it was made; on CUDA also the id checks before it
  /// differ in number): then record the work again.
  virtual Status replay(const StepContext &context, bool &stale) = 0;
};

/// Every method reports failure (out of memory, a CUDA error, a type it lacks) as a
/// Status naming the cause. release() cannot fail: it runs in destructors.
class Backend {
public:
  virtual ~Backend() = default;
  virtual const char *name() const = 0;

  /// `bytes` of device memory into `out`.
  virtual Status allocate(size_t bytes, void *&out) = 0;
  virtual void release(void *data) noexcept = 0;
  virtual Status copyToDevice(void *device, const void *host, size_t bytes) = 0;
  virtual Status copyToHost(void *host, const void *device, size_t bytes) = 0;
  /// `bytes` of device memory set to `value`, in the order of the backend's work.
  virtual Status setBytes(void *device, uint8_t value, size_t bytes) = 0;
  Status setZero(void *device, size_t bytes) { return setBytes(device, 0, bytes); }
  /// In `extent`, how many of `bytes` of device memory come before the run of `value`s
  /// that ends them (all of them where the last byte is not `value`, 0 where every byte
  /// is): how far work reached into memory that held only `value`. Read on the device:
  /// the memory may be larger than the host's.
  virtual Status extentNot(const void *device, uint8_t value, size_t bytes,
                           uint64_t &extent) = 0;
  /// `bytes` from `src` to `dst`, both device memory, in the order of the backend's work.
  virtual Status copyOnDevice(void *dst, const void *src, size_t bytes) = 0;
  /// dst = src element by element, between any float types (rounding to nearest even).
  virtual Status convert(const TensorView &dst, const TensorView &src) = 0;

  /// Whether this backend runs `inst` at all (checked as a plan is bound, before any
  /// step): a failure names what it does not run.
  virtual Status supports(const plan::Instruction &inst) const {
    (void)inst;
    return Status::success();
  }

  /// Runs one instruction. An output that is a parameter's gradient (ParamGrad's, and
  /// an accumulating instruction's from its opcode's gradient output on) is added into.
  virtual Status run(const plan::Instruction &inst, const TensorView *inputs,
                     const TensorView *outputs, const StepContext &context) = 0;

  /// Records the backend work `work` asks for (its run() calls) without running it;
  /// null where the backend cannot record it, with the reason in `why` (the backend
  /// runs nothing then: run the work itself). Only a backend that records() does.
  virtual bool records() const { return false; }
  /// Whether a recording may hold `inst` (one that waits for the device may not).
  virtual bool recordable(const plan::Instruction &inst) const {
    (void)inst;
    return true;
  }
  virtual std::unique_ptr<Recording> record(const std::function<Status()> &work,
                                            std::string &why) {
    (void)work;
    why = cat(name(), " backend runs each call as it comes");
    return nullptr;
  }

  /// What the kernels found wrong with the data they read (an id outside the rows it
  /// indexes): a queued backend (CUDA) reads it once a program has run, not after each
  /// instruction, which would wait for the device; its run() then succeeds. Reports the
  /// first such failure among the run() calls since the last checkRuns (a replay counts
  /// as the calls it recorded), with `call` its place among them from 0, and starts
  /// counting again. A backend that checks as it runs always succeeds.
  virtual Status checkRuns(size_t &call) {
    call = 0;
    return Status::success();
  }

  /// Writes the initial values of this rank's shard of `param` (block `tpRank` of
  /// `tpSize` along its shard dimension), as a function of (seed, name, global
  /// element index) only.
  virtual Status initParameter(const TensorView &weight, const plan::Param &param,
                               uint64_t seed, int tpRank, int tpSize) = 0;

  /// sum = Σ over `xs`, in order, of each one's Σ x² (accumulated in double): one call
  /// for all the gradients of a global norm, so a queued backend waits once, not per
  /// tensor.
  virtual Status sumOfSquares(const std::vector<TensorView> &xs, double &sum) = 0;
  /// One AdamW step of every parameter in `tensors` (each with its own weight decay, in
  /// place of step's, and its 16-bit copy written where given): one call for all of
  /// them, so a queued backend launches once.
  virtual Status adamw(const std::vector<AdamWTensors> &tensors, const AdamWStep &step) = 0;

  /// Bytes of this backend's memory that DeviceMemory holds now (the plan's arena and
  /// stores, the optimizer's moments), and the most it held at once.
  uint64_t heldBytes() const { return held_; }
  uint64_t heldPeakBytes() const { return heldPeak_; }
  /// Bytes the backend holds for its own work now: its kernels' temporaries and the
  /// workspaces it gives the libraries (not what the libraries allocate themselves).
  virtual uint64_t workspaceBytes() const { return 0; }
  /// The whole device's memory in use and its size; false where the backend cannot say.
  virtual bool deviceMemory(uint64_t &used, uint64_t &total) const {
    (void)used, (void)total;
    return false;
  }

  /// Waits until the work queued so far has run (a backend whose work is queued: CUDA).
  virtual Status finish() { return Status::success(); }

  /// A stopwatch over this backend's work (by default the host's clock).
  virtual std::unique_ptr<Stopwatch> stopwatch() { return std::make_unique<HostStopwatch>(); }

  /// Called every few milliseconds while the host waits for the device's queue (a copy
  /// to the host waits for every kernel before it), with what it waits for and the
  /// seconds so far: the communicator's watchdog (Comm::watch), which may end the job.
  using WaitWatch = std::function<void(const std::string &what, double waited)>;
  /// A backend whose work is queued (CUDA) watches its waits; the others have none.
  virtual void setWaitWatch(WaitWatch watch) { (void)watch; }

private:
  friend class DeviceMemory;
  uint64_t held_ = 0, heldPeak_ = 0;
};

/// Memory from a backend, released when this goes out of scope.
class DeviceMemory {
public:
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory &&other) noexcept
      : backend_(other.backend_), data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceMemory &operator=(DeviceMemory &&other) noexcept {
    if (this != &other) {
      reset();
      backend_ = other.backend_;
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~DeviceMemory() { reset(); }
  /// Replaces what this holds with `bytes` of `backend`'s memory; on failure, holds
  /// nothing.
  Status allocate(Backend &backend, size_t bytes) {
    reset();
    void *data = nullptr;
    MT_TRY(backend.allocate(bytes, data));
    backend_ = &backend;
    data_ = data;
    bytes_ = bytes;
    backend.held_ += bytes;
    backend.heldPeak_ = std::max(backend.heldPeak_, backend.held_);
    return Status::success();
  }
  void reset() noexcept {
    if (data_) {
      backend_->held_ -= std::exchange(bytes_, 0);
      backend_->release(std::exchange(data_, nullptr));
    }
  }
  void *data() const { return data_; }

private:
  Backend *backend_ = nullptr;
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

std::unique_ptr<Backend> makeCpuBackend();

/// GPUs this process sees (0 without a driver, a device, or a CUDA build).
int cudaDevices();
/// The CUDA backend on `device`; fails with the reason (no device, a build without
/// CUDA).
Status makeCudaBackend(int device, std::unique_ptr<Backend> &out);

} // namespace mt

#endif
