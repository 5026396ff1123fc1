// The CUDA backend: every opcode for f32, bf16 and f16 plans, with f32 arithmetic and
// accumulation; GEMMs through cuBLASLt (the bias fused as an epilogue); fused attention
// through cuDNN's flash attention where it applies (CudnnAttention.h) and elsewhere
// through kernels that never materialise the s×s scores either (one warp per query row,
// online softmax; the backward recomputes the probabilities); dropout masks from the same Philox
// counters as the CPU backend, so both draw the same masks. The CPU backend is the reference these
// kernels are tested against.
//
// This file holds the Backend: memory, copies, and the dispatch of each opcode to the
// launchers of the kernel families (Norms.cuh, Activations.cuh, Dropout.cuh,
// Embedding.cuh, Attention.cuh, Loss.cuh, Optimizer.cuh, Gemm.cuh), all on one stream;
// and the recording of a stretch of a program's launches as a CUDA graph (record()),
// which reads each step's counters and reports its ids' checks from device memory.
#include "backends/Backend.h"
#include "backends/cuda/Activations.cuh"
#include "backends/cuda/Attention.cuh"
#include "backends/cuda/Common.cuh"
#include "backends/cuda/CudnnAttention.h"
#include "backends/cuda/DeviceBuffer.h"
#include "backends/cuda/Dropout.cuh"
#include "backends/cuda/Embedding.cuh"
#include "backends/cuda/Gemm.cuh"
#include "backends/cuda/Init.cuh"
#include "backends/cuda/Loss.cuh"
#include "backends/cuda/Moe.cuh"
#include "backends/cuda/Norms.cuh"
#include "backends/cuda/Optimizer.cuh"
#include "backends/cuda/SideStream.h"
#include "core/DType.h"
#include "core/Poll.h"
#include "core/SharedMath.h"
#include "plan/Opcodes.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mt {
namespace {

/// MT_CUDA_SYNC=1: wait for every kernel, so a fault is reported at the instruction
/// that caused it rather than at a later copy (slow; for debugging).
bool synchronousLaunches() {
  const char *sync = std::getenv("MT_CUDA_SYNC");
  return sync && std::strcmp(sync, "0") != 0;
}

/// MT_CUDA_ATTENTION=exact: fused attention through our kernels only (to test them, or
/// to rule cuDNN out); MT_CUDA_ATTENTION=cudnn: through cuDNN or an error, never our
/// kernels (to test cuDNN's path). By default cuDNN where it applies, our kernels
/// elsewhere.
enum class AttentionPath { Any, ExactOnly, CudnnOnly };
AttentionPath attentionPath() {
  return static_cast<AttentionPath>(environmentChoice("MT_CUDA_ATTENTION", "exact", "cudnn"));
}

class CudaBackend final : public Backend {
public:
  explicit CudaBackend(int device) {
    check(cudaSetDevice(device), "selecting the device");
    check(cudaStreamCreate(&owned_.stream), "creating the stream");
    stream_ = owned_.stream;
    check(cublasLtCreate(&lt_), "creating the cuBLASLt handle");
    ltGemms_ = makeLtGemms(device);
    check(cublasCreate(&blas_), "creating the cuBLAS handle");
    check(cublasSetStream(blas_, stream_), "setting the cuBLAS stream");
    // 16-bit products are summed in f32 to the end and rounded once, as on the CPU.
    check(cublasSetMathMode(blas_, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
          "setting cuBLAS's math mode");
    check(cudaMalloc(&main_.workspace, kWorkspaceBytes), "allocating the GEMM workspace");
    // cuBLAS's fallback GEMMs share it (on the same stream, one call at a time) rather
    // than allocating their own, which a recorded program cannot.
    check(cublasSetWorkspace(blas_, main_.workspace, kWorkspaceBytes),
          "setting cuBLAS's workspace");
    check(cudaMalloc(&flags_, sizeof(unsigned long long) * kChecks), "allocating the flags");
    check(cudaMalloc(&counters_, sizeof(StepCounters)), "allocating the step's counters");
    check(cudaEventCreateWithFlags(&drained_, cudaEventDisableTiming), "creating an event");
    if (sideWanted_ && !synchronous_) {
      check(cudaStreamCreate(&ownedSide_.stream), "creating the side stream");
      side_ = ownedSide_.stream;
      check(cudaMalloc(&sideBuffers_.workspace, kWorkspaceBytes),
            "allocating the side stream's GEMM workspace");
      check(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming), "creating an event");
      check(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming), "creating an event");
    }
  }
  ~CudaBackend() override {
    if (forked_)
      cudaEventDestroy(forked_);
    if (joined_)
      cudaEventDestroy(joined_);
    cudaEventDestroy(drained_);
    cudaFree(counters_);
    cudaFree(flags_);
    cudaFree(main_.workspace);
    cudaFree(sideBuffers_.workspace);
    cublasDestroy(blas_);
    ltGemms_.reset();
    cublasLtDestroy(lt_);
  }
  // (The buffers free themselves.)
  const char *name() const override { return "cuda"; }

  Status allocate(size_t bytes, void *&out) override {
    out = nullptr;
    void *data = nullptr;
    cudaError_t code = handled(cudaMalloc(&data, std::max<size_t>(bytes, 256)));
    if (code == cudaErrorMemoryAllocation)
      return Status::failure(cat("cuda backend: out of memory allocating ", bytes, " bytes"));
    MT_TRY(guarded([&] { check(code, "allocating device memory"); }));
    out = data;
    return Status::success();
  }
  void release(void *data) noexcept override {
    try {
      drain("before freeing device memory"); // cudaFree waits for the device
    } catch (const std::exception &) {
      // The free reports nothing either: a failed device fails the next call.
    }
    (void)handled(cudaFree(data));
  }
  Status copyToDevice(void *device, const void *host, size_t bytes) override {
    return guarded([&] { copyNow(device, host, bytes, cudaMemcpyHostToDevice, "to the device"); });
  }
  Status copyToHost(void *host, const void *device, size_t bytes) override {
    return guarded([&] { copyNow(host, device, bytes, cudaMemcpyDeviceToHost, "to the host"); });
  }
  Status setBytes(void *device, uint8_t value, size_t bytes) override {
    MT_TRY(sideJoined());
    return guarded(
        [&] { check(cudaMemsetAsync(device, value, bytes, stream_), "setting device memory"); });
  }
  Status extentNot(const void *device, uint8_t value, size_t bytes, uint64_t &extent) override {
    MT_TRY(sideJoined());
    return guarded([&] {
      auto *last = static_cast<unsigned long long *>(scratch(sizeof(unsigned long long)));
      check(cudaMemsetAsync(last, 0, sizeof *last, stream_), "zeroing a counter");
      launchExtentNot(static_cast<const uint8_t *>(device), bytes, value, last, stream_);
      launched("the extent of written memory");
      unsigned long long host = 0;
      copyNow(&host, last, sizeof host, cudaMemcpyDeviceToHost, "an extent to the host");
      extent = host;
    });
  }
  /// A context-parallel group's shares [cp·B, S/cp, F] in sequence order [B, S, F], or
  /// back (`inverse`): two chunks of each share, each one copy.
  void contextOrder(const TensorView &in, int64_t cp, bool inverse, const TensorView &out) {
    const TensorView &whole = inverse ? in : out;
    const size_t row = dtypeBytes(whole.dtype) * whole.dim(2);
    forEachContextChunk(whole.dim(0), whole.dim(1), cp, [&](int64_t share, int64_t at, int64_t n) {
      char *dst = static_cast<char *>(out.data) + row * (inverse ? share : at);
      const char *src = static_cast<const char *>(in.data) + row * (inverse ? at : share);
      check(cudaMemcpyAsync(dst, src, row * n, cudaMemcpyDeviceToDevice, stream_),
            "ordering context-parallel shares");
    });
  }

  Status supports(const plan::Instruction &inst) const override {
    if (isMixtureOfExperts(inst.opcode()) && inst.topk() > kMaxTopk)
      return Status::failure(cat("cuda backend: top-", inst.topk(), " routing (",
                                 EnumNameOpcode(inst.opcode()), "): at most ", kMaxTopk,
                                 " experts a token"));
    return Status::success();
  }

  Status copyOnDevice(void *dst, const void *src, size_t bytes) override {
    MT_TRY(sideJoined());
    return guarded([&] {
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
            "copying on the device");
    });
  }

  Status convert(const TensorView &dst, const TensorView &src) override {
    MT_TRY(sideJoined());
    return guarded([&] { convertOn(dst.data, dst.dtype, src.data, src.dtype, src.numel()); });
  }

  Status run(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
             const StepContext &ctx) override {
    ++runs_;
    ++calls_;
    running_ = {ctx.program, ctx.instruction};
    // The storage type of the instruction's activations: its first non-index,
    // non-accumulator operand; plans of f32, bf16 and f16 run here.
    DType t = DType::F32;
    const size_t numIn = inst.inputs()->size();
    for (size_t i = 0; i < numIn; ++i)
      if (in[i].dtype == DType::BF16 || in[i].dtype == DType::F16 || in[i].dtype == DType::F64)
        t = in[i].dtype;
    if (inst.outputs()->size() > 0 && (out[0].dtype == DType::BF16 || out[0].dtype == DType::F16))
      t = out[0].dtype;
    if (t == DType::F64)
      return Status::failure(cat("cuda backend: ", plan::EnumNameOpcode(inst.opcode()), " in ",
                                 plan::EnumNameDType(t), " is not supported (f32, bf16, f16)"));
    // Nothing to write: no kernel (a grid of zero blocks is a launch error). Plans have
    // no zero-sized dimension (the reader refuses them); per-row kernels whose outputs
    // are not empty check their row count where it can be zero.
    bool empty = inst.outputs()->size() > 0;
    for (size_t i = 0; i < inst.outputs()->size(); ++i)
      empty = empty && out[i].numel() == 0;
    if (empty)
      return Status::success();
    if (swapFailed_)
      return Status::failure("cuda backend: cuBLAS's handle could not follow a switch between "
                             "the main and the side stream");
    return guarded([&] {
      auto issue = [&] {
        return withStorage(t,
                           [&](auto tag) { return dispatch<decltype(tag)>(inst, in, out, ctx); });
      };
      const bool side = toSide(inst, in);
      if (side || hazards_.pending())
        rangesOf(inst, in, out, reads_, writes_);
      if (!side) {
        if (hazards_.pending() && hazards_.mustWait(reads_, writes_))
          joinSide();
        return issue();
      }
      // The step's counters, which main-stream kernels read, written (where they changed)
      // on the main stream before the fork.
      counters(ctx);
      hazards_.issued(reads_, writes_);
      OnSide scope(*this);
      return issue();
    });
  }

  Status finish() override {
    return guarded([&] {
      drain("finishing its work");
      // Also NCCL's collectives, on the legacy default stream.
      check(cudaDeviceSynchronize(), "waiting for the device");
    });
  }

  Status checkRuns(size_t &call) override {
    call = 0;
    runs_ = 0;
    const std::vector<IdsCheck> checks = std::exchange(checks_, {});
    if (checks.empty())
      return Status::success();
    std::vector<unsigned long long> first(checks.size());
    MT_TRY(guarded([&] {
      copyNow(first.data(), flags_, sizeof first[0] * first.size(), cudaMemcpyDeviceToHost,
              "the ids' checks to the host");
    }));
    for (size_t i = 0; i < checks.size(); ++i)
      if (first[i] != ~0ull) {
        call = checks[i].call;
        return Status::failure(cat(checks[i].what, " at position ", first[i], " is outside the ",
                                   checks[i].limit, " classes or rows it indexes"));
      }
    return Status::success();
  }

  bool records() const override { return !synchronous_ && !graphsOff_; }
  /// The experts' GEMMs read their row counts from the device.
  bool recordable(const plan::Instruction &inst) const override {
    return inst.opcode() != Opcode::GroupedLinear &&
           inst.opcode() != Opcode::GroupedLinearGradInput &&
           inst.opcode() != Opcode::GroupedLinearGradWeight;
  }
  std::unique_ptr<Recording> record(const std::function<Status()> &work,
                                    std::string &why) override {
    why.clear();
    if (!records()) {
      why = synchronous_ ? "MT_CUDA_SYNC waits for every kernel" : "MT_CUDA_GRAPHS=off";
      return nullptr;
    }
    // The recording's work on side_ forks from it and joins it before it ends; what side_
    // holds from before is waited for first (a capture cannot wait for it).
    if (Status joined = guarded([&] { joinSide(); }); !joined.ok()) {
      why = joined.message();
      return nullptr;
    }
    // The recording's checks take the flags after those of the program's runs before it
    // (a recording of a stretch of it: Executor::runStretch), and count their runs from
    // its first; a replay adds them to those of the runs before it.
    const cudaError_t began =
        handled(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    if (began != cudaSuccess) {
      why = cat("beginning a capture: ", cudaGetErrorString(began));
      return nullptr;
    }
    const size_t base = checks_.size(), runsBefore = std::exchange(runs_, 0);
    // A recording makes its own copies: it holds none from before it, nor leaves any.
    staged_ = {};
    capturing_ = true;
    Status done = guarded(work);
    if (const Status joined = guarded([&] { joinSide(); }); done.ok() && !joined.ok())
      done = joined;
    capturing_ = false;
    staged_ = {};
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = handled(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    if (!done.ok())
      why = done.message();
    else if (ended != cudaSuccess)
      why = cat("ending the capture: ", cudaGetErrorString(ended));
    else if (const cudaError_t made = handled(cudaGraphInstantiate(&exec, graph, 0));
             made != cudaSuccess)
      why = cat("instantiating the graph: ", cudaGetErrorString(made));
    if (graph)
      (void)handled(cudaGraphDestroy(graph));
    std::vector<IdsCheck> checks(checks_.begin() + static_cast<std::ptrdiff_t>(base),
                                 checks_.end());
    checks_.resize(base);
    const size_t runs = std::exchange(runs_, runsBefore);
    if (!why.empty()) {
      (void)cudaGetLastError(); // what failed in the capture is reported here, not later
      return nullptr;
    }
    return std::make_unique<Graph>(*this, exec, base, std::move(checks), runs);
  }

  Status initParameter(const TensorView &w, const plan::Param &param, uint64_t seed, int tpRank,
                       int tpSize) override {
    MT_TRY(sideJoined());
    // The CPU backend's rule on the device (the same bits: a GPU test compares them). A
    // master type other than f32 is made on the host and copied.
    if (w.dtype == DType::F32)
      return guarded([&] {
        float *out = static_cast<float *>(w.data);
        switch (param.init()) {
        case plan::Init::Zeros:
          launchFill(out, w.numel(), 0.0f, stream_);
          break;
        case plan::Init::Ones:
          launchFill(out, w.numel(), 1.0f, stream_);
          break;
        case plan::Init::Normal:
          launchNormalInit(out, w.numel(), seed, rng::nameHash(param.name()->string_view()),
                           param.std(), ShardMap(w, param.shard_dim(), tpRank, tpSize), stream_);
          break;
        }
        launched("parameter initialisation");
      });
    std::vector<char> host;
    MT_TRY(guarded([&] { host.resize(dtypeBytes(w.dtype) * w.numel()); }));
    TensorView h = w;
    h.data = host.data();
    MT_TRY(cpu_->initParameter(h, param, seed, tpRank, tpSize));
    return copyToDevice(w.data, host.data(), host.size());
  }

  Status sumOfSquares(const std::vector<TensorView> &xs, double &sum) override {
    MT_TRY(sideJoined());
    // Every tensor's chunks in one launch, one partial sum each, then one wait and one
    // copy: the host adds each tensor's partials in chunk order, then the tensors in
    // order.
    std::vector<SquaresChunk> chunks;
    std::vector<size_t> ends; // one past each tensor's last chunk
    for (const TensorView &x : xs) {
      if (x.dtype != DType::F32)
        return Status::failure("cuda backend: gradient norms are taken over f32 gradients");
      appendChunks(chunks, x.numel(), [&](int64_t at, int64_t n) {
        return SquaresChunk{x.as<float>() + at, n};
      });
      ends.push_back(chunks.size());
    }
    sum = 0;
    if (chunks.empty())
      return Status::success();
    std::vector<double> host(chunks.size());
    MT_TRY(guarded([&] {
      const SquaresChunk *table = onDevice(squaresTable_, squaresHost_, chunks);
      double *partial = static_cast<double *>(scratch(sizeof(double) * chunks.size()));
      launchSumOfSquares(table, chunks.size(), partial, stream_);
      launched("sum of squares");
      copyNow(host.data(), partial, sizeof(double) * host.size(), cudaMemcpyDeviceToHost,
              "the partial sums of squares to the host");
    }));
    for (size_t i = 0, c = 0; i < ends.size(); ++i) {
      double tensor = 0;
      for (; c < ends[i]; ++c)
        tensor += host[c];
      sum += tensor;
    }
    return Status::success();
  }

  Status adamw(const std::vector<AdamWTensors> &tensors, const AdamWStep &step) override {
    MT_TRY(sideJoined());
    std::vector<AdamWChunk> chunks;
    DType copies = DType::F32; // the 16-bit copies' type; f32: none given
    for (const AdamWTensors &t : tensors) {
      for (const TensorView *x : {&t.weight, &t.grad, &t.expAvg, &t.expAvgSq})
        if (x->dtype != DType::F32 || x->numel() != t.weight.numel())
          return Status::failure("cuda backend: AdamW updates f32 master weights from f32 "
                                 "gradients and moments of their size");
      if (t.compute.data) {
        if ((t.compute.dtype != DType::BF16 && t.compute.dtype != DType::F16) ||
            (copies != DType::F32 && t.compute.dtype != copies) ||
            t.compute.numel() != t.weight.numel())
          return Status::failure("cuda backend: AdamW's weight copies are of one 16-bit type "
                                 "and their weights' size");
        copies = t.compute.dtype;
      }
      const size_t copyBytes = dtypeBytes(t.compute.dtype);
      appendChunks(chunks, t.weight.numel(), [&](int64_t at, int64_t n) {
        return AdamWChunk{t.weight.as<float>() + at,
                          t.grad.as<float>() + at,
                          t.expAvg.as<float>() + at,
                          t.expAvgSq.as<float>() + at,
                          t.compute.data ? static_cast<char *>(t.compute.data) + copyBytes * at
                                         : nullptr,
                          n,
                          t.weightDecay};
      });
    }
    if (chunks.empty())
      return Status::success();
    return guarded([&] {
      launchAdamw(onDevice(adamwTable_, adamwHost_, chunks), chunks.size(), step, copies, stream_);
      launched("AdamW");
    });
  }

  void setWaitWatch(WaitWatch watch) override { watch_ = std::move(watch); }

  uint64_t workspaceBytes() const override {
    return main_.bytes() + sideBuffers_.bytes() + sizeof *flags_ * kChecks + sizeof *counters_ +
           cudnnWorkspace_.capacity() + keep_.capacity() + adamwTable_.capacity() +
           squaresTable_.capacity();
  }
  bool deviceMemory(uint64_t &used, uint64_t &total) const override {
    size_t free = 0, size = 0;
    if (handled(cudaMemGetInfo(&free, &size)) != cudaSuccess)
      return false;
    used = size - free;
    total = size;
    return true;
  }

  std::unique_ptr<Stopwatch> stopwatch() override {
    (void)sideJoined(); // a failed join fails the next call that waits
    profiling_ = true;  // every instruction on stream_, timed between its marks
    return std::make_unique<EventStopwatch>(*this);
  }


private:
  static constexpr size_t kWorkspaceBytes = 32u << 20;

  /// cuBLASLt's plans, with MT_CUDA_GEMM_CHOICES's file of algorithms where it is set
  /// (Gemm.cuh's LtGemms), its keys beginning with `device`'s name, multiprocessors and
  /// cuBLASLt's version.
  std::unique_ptr<LtGemms> makeLtGemms(int device) {
    const char *path = std::getenv("MT_CUDA_GEMM_CHOICES");
    if (!path || !*path)
      return std::make_unique<LtGemms>(lt_, nullptr, std::string());
    if (Status read = GemmChoices::load(path, gemmChoices_); !read.ok())
      throw std::runtime_error(cat("cuda backend: MT_CUDA_GEMM_CHOICES: ", read.message()));
    cudaDeviceProp prop;
    check(cudaGetDeviceProperties(&prop, device), "reading the device's properties");
    std::string name = prop.name;
    for (char &c : name)
      if (c == ' ' || c == '\t')
        c = '_';
    return std::make_unique<LtGemms>(
        lt_, &gemmChoices_,
        cat(name, "/", prop.multiProcessorCount, "sm/cublasLt", cublasLtGetVersion()));
  }
  /// A check of the ids an instruction reads, since checkRuns last read them: each has
  /// its own flag of flags_ (of kChecks), in order.
  struct IdsCheck {
    size_t call; // the run() call among those since, from 0
    const char *what;
    int64_t limit;
  };
  static constexpr size_t kChecks = 64;

  /// Marks as events in the backend's stream; the laps are the times between them.
  class EventStopwatch final : public Stopwatch {
  public:
    explicit EventStopwatch(CudaBackend &backend) : backend_(backend) {}
    ~EventStopwatch() override {
      for (cudaEvent_t event : events_)
        cudaEventDestroy(event);
    }
    Status mark() override {
      return guarded([&] {
        if (used_ == events_.size()) {
          cudaEvent_t event;
          check(cudaEventCreate(&event), "creating a stopwatch's event");
          events_.push_back(event);
        }
        check(cudaEventRecord(events_[used_], backend_.stream_), "recording a mark");
        ++used_;
      });
    }
    void forget() override { used_ = 0; }
    Status laps(std::vector<double> &seconds) override {
      seconds.clear();
      const size_t used = std::exchange(used_, 0);
      if (used == 0)
        return Status::success();
      return guarded([&] {
        backend_.drain("for the stopwatch's marks");
        check(cudaEventSynchronize(events_[used - 1]), "waiting for the last mark");
        for (size_t i = 1; i < used; ++i) {
          float ms = 0;
          check(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]), "timing a lap");
          seconds.push_back(ms / 1e3);
        }
      });
    }

  private:
    CudaBackend &backend_;
    std::vector<cudaEvent_t> events_; // reused from one set of laps to the next
    size_t used_ = 0;
  };

  /// Waits for every kernel queued so far, calling the watch every few milliseconds:
  /// before each call that blocks the host on the queue (a copy from or to pageable host
  /// memory, a free), so that a collective that never ends meets the watchdog rather
  /// than blocking the host for good.
  void drain(const char *what) {
    joinSide();
    if (!watch_)
      return;
    check(cudaEventRecord(drained_, stream_), "recording an event");
    cudaError_t code = cudaSuccess;
    pollUntil([&] { return (code = queryEvent(drained_)) != cudaErrorNotReady; },
              [&](double waited) { watch_(cat("the device's queue ", what), waited); });
    check(code, what);
  }

  /// joinSide() at an entry point other than run(): its work meets what side_ holds.
  Status sideJoined() {
    return guarded([&] { joinSide(); });
  }
  /// stream_ waits for everything issued to side_ (nothing while an instruction is being
  /// issued to it).
  void joinSide() {
    if (onSide_ || !hazards_.pending())
      return;
    check(cudaEventRecord(joined_, side_), "joining the side stream");
    check(cudaStreamWaitEvent(stream_, joined_), "joining the side stream");
    hazards_.joined();
  }
  /// Whether `inst` goes to side_: a weight gradient, where the side stream is on and not
  /// profiling, whose operands need no staging (staged_ is the main stream's): their rows
  /// and first elements 16-byte aligned.
  bool toSide(const plan::Instruction &inst, const TensorView *in) const {
    // Not with cuBLAS's GEMMs (its bits promised on one stream) nor while choosing GEMM
    // algorithms by timing (the other stream's kernels would skew the times).
    if (!side_ || profiling_ || gemmPath_ == GemmPath::CublasOnly || choosing_ ||
        (inst.opcode() != Opcode::LinearGradWeight &&
         inst.opcode() != Opcode::LinearGradWeightBias))
      return false;
    for (int i : {0, 1})
      if (in[i].cols() * static_cast<int64_t>(dtypeBytes(in[i].dtype)) % 16 != 0 ||
          reinterpret_cast<uintptr_t>(in[i].data) % 16 != 0)
        return false;
    return true;
  }
  /// An instruction issued to side_, forked from stream_ where everything before it is
  /// queued: for its lifetime, stream_ is side_ and buffers_ the side stream's.
  class OnSide {
  public:
    explicit OnSide(CudaBackend &b) : b_(b) {
      check(cudaEventRecord(b.forked_, b.stream_), "forking the side stream");
      check(cudaStreamWaitEvent(b.side_, b.forked_), "forking the side stream");
      swap();
    }
    ~OnSide() { swap(); }
    OnSide(const OnSide &) = delete;
    OnSide &operator=(const OnSide &) = delete;

  private:
    void swap() {
      std::swap(b_.stream_, b_.side_);
      b_.buffers_ = b_.onSide_ ? &b_.main_ : &b_.sideBuffers_;
      b_.onSide_ = !b_.onSide_;
      b_.staged_ = {};
      // The cuBLAS fallback's stream and workspace follow (cuBLASLt is given both); a
      // failure fails the run() calls after it (a destructor cannot throw).
      if (cublasSetStream(b_.blas_, b_.stream_) != CUBLAS_STATUS_SUCCESS ||
          cublasSetWorkspace(b_.blas_, b_.buffers_->workspace, kWorkspaceBytes) !=
              CUBLAS_STATUS_SUCCESS)
        b_.swapFailed_ = true;
    }
    CudaBackend &b_;
  };
  /// What `inst` reads (its inputs) and writes (its outputs, which an accumulating one
  /// reads too): the byte ranges of the side stream's hazards.
  static void rangesOf(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
                       std::vector<ByteRange> &reads, std::vector<ByteRange> &writes) {
    reads.clear();
    writes.clear();
    for (size_t i = 0; i < inst.inputs()->size(); ++i)
      reads.push_back(ByteRange::of(in[i].data, in[i].bytes()));
    for (size_t i = 0; i < inst.outputs()->size(); ++i)
      writes.push_back(ByteRange::of(out[i].data, out[i].bytes()));
  }

  /// At least `bytes` of `buffer`, or an exception naming `what`; with `orNull`, null
  /// where the device has not that much memory free.
  void *grow(DeviceBuffer &buffer, size_t bytes, const char *what, bool orNull = false) {
    if (bytes > buffer.capacity()) {
      // A graph holds the buffer's address: none may move while one is recorded, and
      // the graphs recorded before it moves are stale (Graph::replay).
      if (capturing_)
        throw std::runtime_error(cat(what, ": it would grow while a program is recorded"));
      drain("before freeing a buffer to grow it"); // cudaFree waits for the device
      if (buffer.capacity() > 0)
        ++generation_; // it moves
    }
    void *data = nullptr;
    const cudaError_t code = handled(buffer.get(bytes, data));
    if (code == cudaErrorMemoryAllocation && orNull)
      return nullptr;
    check(code, what);
    return data;
  }
  /// grow(buffer, bytes), or null where the device had no room for it or for fewer
  /// bytes before (`refused`, 0 or the smallest refused: not tried again, each try
  /// waiting for the device to free the buffer).
  void *growUnlessRefused(DeviceBuffer &buffer, size_t bytes, size_t &refused, const char *what) {
    if (refused != 0 && bytes >= refused)
      return nullptr;
    void *data = grow(buffer, bytes, what, true);
    if (!data)
      refused = bytes;
    return data;
  }
  /// One instruction's temporaries.
  void *scratch(size_t bytes) {
    return grow(buffers_->scratch, bytes, "allocating scratch memory");
  }
  /// A table of chunks on the device, copied only when it differs from the last one
  /// (`held`): the optimizer's tensors are the same every step, so after the first the
  /// launch needs no copy and no wait.
  template <typename Chunk>
  const Chunk *onDevice(DeviceBuffer &table, std::vector<Chunk> &held,
                        const std::vector<Chunk> &chunks) {
    const size_t bytes = sizeof(Chunk) * chunks.size();
    if (bytes > table.capacity())
      held.clear(); // the buffer is freed and allocated again, whether or not that works
    void *data = grow(table, bytes, "allocating a table of chunks");
    if (held.size() != chunks.size() || std::memcmp(held.data(), chunks.data(), bytes) != 0) {
      held.clear(); // a failed copy leaves no table taken for this one
      // A launch may still read the last one: copyNow waits for it.
      copyNow(data, chunks.data(), bytes, cudaMemcpyHostToDevice,
              "a table of chunks to the device");
      held = chunks;
    }
    return static_cast<const Chunk *>(data);
  }
  /// `bytes` rounded up to the 256 bytes that keep what follows them aligned.
  static size_t roundUp(size_t bytes) { return (bytes + 255) / 256 * 256; }
  /// The `U`s `offset` bytes after `base` (one scratch allocation holding two things).
  template <typename U> static U *after(void *base, size_t offset) {
    return reinterpret_cast<U *>(static_cast<char *>(base) + offset);
  }

  /// Runs `body` (returning nothing or a Status), whose checked calls throw; the
  /// interface's methods return the failure as a Status instead.
  template <typename Body> static Status guarded(Body &&body) {
    try {
      if constexpr (std::is_void_v<decltype(body())>) {
        body();
        return Status::success();
      } else {
        return body();
      }
    } catch (const std::exception &e) {
      return Status::failure(e.what());
    }
  }

  /// Checks the launch just made; in synchronous mode, also waits for it to finish.
  void launched(const char *what, CallSite at = MT_CALL_SITE) {
    check(cudaGetLastError(), what, at);
    if (synchronous_) {
      drain(what);
      check(cudaDeviceSynchronize(), what, at);
    }
  }

  /// dst (type `to`) = src (type `from`), n elements: a copy where the types agree.
  void convertOn(void *dst, DType to, const void *src, DType from, int64_t n) {
    if (to == from) {
      check(cudaMemcpyAsync(dst, src, dtypeBytes(to) * n, cudaMemcpyDeviceToDevice, stream_),
            "copying");
      return;
    }
    if (to != DType::F32 && to != DType::BF16 && to != DType::F16)
      throw std::runtime_error("cuda backend: no conversion to this type");
    withStorage(to, [&](auto outTag) {
      using O = decltype(outTag);
      withStorage(from, [&](auto inTag) {
        using I = decltype(inTag);
        launchConvert(static_cast<O *>(dst), static_cast<const I *>(src), n, stream_);
      });
    });
    launched("conversion");
  }

  /// Copies between the host and the device once the work queued before has run
  /// (waiting with the watchdog looking on), and returns when the copy is done.
  void copyNow(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *what) {
    drain(cat("before copying ", what).c_str());
    check(cudaMemcpyAsync(dst, src, bytes, kind, stream_), cat("copying ", what).c_str());
    check(cudaStreamSynchronize(stream_), cat("copying ", what).c_str());
  }

  /// The flag of a check of the ids the current instruction reads, reset to ~0: its
  /// kernel leaves the first position outside `limit` there, and checkRuns reads the
  /// flags after the program, so that no instruction waits for the device.
  unsigned long long *idsCheck(const char *what, int64_t limit) {
    if (checks_.size() == kChecks)
      throw std::runtime_error(cat("cuda backend: more than ", kChecks,
                                   " checks of ids before they were read"));
    unsigned long long *flag = flags_ + checks_.size();
    check(cudaMemsetAsync(flag, 0xff, sizeof *flag, stream_), "resetting a check's flag");
    checks_.push_back({runs_ - 1, what, limit});
    return flag;
  }

  /// The step's counters in device memory, which the kernels read: written (in the
  /// queue's order) when they change, but not into a recording, which reads those of
  /// each replay.
  const StepCounters *counters(const StepContext &ctx) {
    const StepCounters value{ctx.seed, ctx.step, ctx.microBatch, ctx.lossScale};
    const bool same = countersHeld_ && countersHeld_->seed == value.seed &&
                      countersHeld_->step == value.step &&
                      countersHeld_->microBatch == value.microBatch &&
                      countersHeld_->lossScale == value.lossScale;
    if (!capturing_ && !same) {
      countersHeld_.reset(); // unknown if the launch fails
      storeCountersKernel<<<1, 1, 0, stream_>>>(counters_, value);
      launched("storing the step's counters");
      countersHeld_ = value;
    }
    return counters_;
  }

  /// An instruction's place in its program (StepContext's program and instruction).
  struct Place {
    uint32_t program = 0, instruction = 0;
    bool follows(const Place &before) const {
      return program == before.program && instruction == before.instruction + 1;
    }
  };
  /// What the main stream's staging holds: B's copy (stagedB's arguments), made (or
  /// read) by run() call `call`, of the instruction at `at`; nothing where `source` is
  /// null.
  struct Staged {
    const void *source = nullptr;
    int64_t rows = 0, columns = 0, ld = 0;
    DType dtype = DType::F32;
    uint64_t call = 0;
    Place at;
  };

  /// A program's launches (or a stretch of them) as a CUDA graph, replayed with each
  /// step's counters; its ids' checks are read after the program as those of runs are.
  /// Its checks' flags follow the `base` checks of the program's runs before it.
  class Graph final : public Recording {
  public:
    Graph(CudaBackend &backend, cudaGraphExec_t exec, size_t base, std::vector<IdsCheck> checks,
          size_t runs)
        : backend_(backend), exec_(exec), generation_(backend.generation_), base_(base),
          checks_(std::move(checks)), runs_(runs) {}
    ~Graph() override {
      if (exec_)
        (void)handled(cudaGraphExecDestroy(exec_));
    }
    Status replay(const StepContext &context, bool &stale) override {
      MT_TRY(backend_.sideJoined());
      backend_.staged_ = {}; // what it copies is its own
      // Flags another stretch's checks hold now would be overwritten: made again.
      stale = backend_.generation_ != generation_ || backend_.checks_.size() != base_;
      if (stale)
        return Status::success();
      return guarded([&] {
        backend_.counters(context);
        check(cudaGraphLaunch(exec_, backend_.stream_), "launching a recorded program");
        backend_.launched("a recorded program");
        for (IdsCheck c : checks_) {
          c.call += backend_.runs_;
          backend_.checks_.push_back(c);
        }
        backend_.runs_ += runs_;
      });
    }

  private:
    CudaBackend &backend_;
    cudaGraphExec_t exec_;
    uint64_t generation_; // the backend's when recorded
    size_t base_;
    std::vector<IdsCheck> checks_;
    size_t runs_;
  };

  /// cuBLASLt runs at a fraction of its speed on a matrix whose columns (column-major)
  /// are not a whole number of 16 bytes, as an odd vocabulary's logits are (its LM head's
  /// GEMMs at 150–210 TFLOP/s in place of 700–800 on an H100): such a B is read, and such
  /// a C written, through the stream's staging, its columns padded (core/SharedMath.h) by
  /// copyColumnsKernel.
  static int64_t paddedColumn(int64_t ld, DType dtype) {
    return mt::paddedColumn(ld, static_cast<int64_t>(dtypeBytes(dtype)));
  }
  /// `columns` columns of `rows` elements, `srcLd` apart at `src`, to `dstLd` apart.
  void copyColumns(void *dst, int64_t dstLd, const void *src, int64_t srcLd, int64_t rows,
                   int64_t columns, DType dtype) {
    if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16)
      throw std::runtime_error("cuda backend: misaligned columns are copied in f32, bf16 or f16");
    const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>(columns, 1, 1 << 16));
    withStorage(dtype, [&](auto tag) {
      using T = decltype(tag);
      copyColumnsKernel<<<blocks, kThreads, 0, stream_>>>(
          static_cast<T *>(dst), dstLd, static_cast<const T *>(src), srcLd, rows, columns);
    });
    launched("copying misaligned columns to or from their staging");
  }
  /// B (`columns` of `rows` elements, `ld` apart) where cuBLASLt reads it: B itself where
  /// its columns are aligned, else its copy in the staging, with `ld` padded. The copy is not
  /// made again where this run() call made it, or the one before, the instruction before
  /// this one in its program (a weight gradient after its input gradient: both read dy;
  /// nothing runs between two instructions of a program but the backend's own calls).
  const void *stagedB(const void *b, int64_t rows, int64_t columns, int64_t &ld, DType dtype) {
    int64_t padded = ld;
    void *copy = staging(columns, padded, dtype);
    if (!copy)
      return b;
    const Staged wanted{b, rows, columns, ld, dtype, calls_, running_};
    const bool held =
        staged_.source == b && staged_.rows == rows && staged_.columns == columns &&
        staged_.ld == ld && staged_.dtype == dtype &&
        (staged_.call == calls_ || (staged_.call + 1 == calls_ && running_.follows(staged_.at)));
    if (!held)
      copyColumns(copy, padded, b, ld, rows, columns, dtype);
    staged_ = wanted;
    ld = padded;
    return copy;
  }
  /// Where cuBLASLt writes C (`columns` of `ld` elements): C itself where its columns are
  /// aligned, else the staging, with `ld` padded (the caller copies it to C).
  void *stagingFor(void *c, int64_t columns, int64_t &ld, DType dtype) {
    void *data = staging(columns, ld, dtype);
    if (!data)
      return c;
    staged_ = {};
    return data;
  }
  /// The staging for `columns` of `ld` elements with `ld` padded; null, `ld` kept, where the
  /// columns are aligned already or the buffer does not fit.
  void *staging(int64_t columns, int64_t &ld, DType dtype) {
    const int64_t padded = paddedColumn(ld, dtype);
    if (padded == ld)
      return nullptr;
    void *data = stagingBuffer(dtypeBytes(dtype) * columns * padded);
    if (data)
      ld = padded;
    return data;
  }
  /// The staging, of at least `bytes`; null where the device has not that much free (said
  /// once): the GEMM then reads or writes its misaligned matrix as it is, slower.
  void *stagingBuffer(size_t bytes) {
    void *data = grow(buffers_->staging, bytes, "allocating the staging", true);
    if (!data) {
      staged_ = {}; // what it held is gone
      if (!warnedStaging_)
        std::fprintf(stderr,
                     "cuda backend: no %zu bytes free for a copy of misaligned rows; GEMMs "
                     "read and write such rows as they are, slower\n",
                     bytes);
      warnedStaging_ = true;
    }
    return data;
  }

  /// C = op(A)·op(B) with `epilogue` (Gemm.cuh), column-major, C contiguous (ldc = m):
  /// f32 compute, A, B, C, the bias (length m) and the auxiliary matrix in `dtype`.
  /// Through cuBLASLt, the epilogue fused; where cuBLASLt has no algorithm or fails,
  /// through cuBLAS's general GEMM, the biased product rounded to `dtype` once, as the
  /// CPU backend rounds it. GELU or its gradient then runs as our kernel on the stored
  /// product, as the CPU backend runs the fused pair, unless cuBLASLt's epilogue ran it:
  /// in 16 bits only, from the unrounded product (within the 16-bit tolerance of the
  /// pair, not bit for bit), since its GELU need not be as exact as f32 results are held
  /// to.
  void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const void *a,
            int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc, DType dtype,
            Epilogue epilogue = {}) {
    const void *&bias = epilogue.bias;
    // cuBLASLt's bias epilogue wants a 16-byte aligned vector; a parameter at an odd
    // offset of the flat store is copied to an aligned buffer first.
    if (bias && reinterpret_cast<uintptr_t>(bias) % 16 != 0) {
      void *aligned = grow(buffers_->biasCopy, dtypeBytes(dtype) * m, "allocating the bias copy");
      check(cudaMemcpyAsync(aligned, bias, dtypeBytes(dtype) * m, cudaMemcpyDeviceToDevice,
                            stream_),
            "copying the bias");
      bias = aligned;
    }
    const Activation activation = epilogue.activation;
    // The (biased) product: GELU's input, kept in the auxiliary matrix, or C.
    void *stored = activation == Activation::Gelu ? epilogue.aux : c;
    if (gemmPath_ != GemmPath::CublasOnly) {
      // B, or else a plain C, through the staging buffer where its columns are misaligned.
      int64_t ldB = ldb, ldStored = ldc;
      const void *bRead = stagedB(b, transB ? n : k, transB ? k : n, ldB, dtype);
      void *target = bRead == b && activation == Activation::None && !epilogue.accumulate
                         ? stagingFor(c, n, ldStored, dtype)
                         : stored;
      // The activation in cuBLASLt's epilogue in 16 bits; otherwise, or where cuBLASLt
      // has no algorithm for that epilogue, its plain GEMM and then our kernel.
      if (activation != Activation::None && dtype != DType::F32 &&
          ltGemms_->run(buffers_->workspace, kWorkspaceBytes, transA, transB, m, n, k, a, lda,
                        bRead, ldB, c, ldc, dtype, epilogue, stream_))
        return;
      if (ltGemms_->run(buffers_->workspace, kWorkspaceBytes, transA, transB, m, n, k, a, lda,
                        bRead, ldB, target, ldStored, dtype,
                        Epilogue{bias, Activation::None, nullptr, epilogue.accumulate}, stream_)) {
        if (target != stored)
          copyColumns(c, ldc, target, ldStored, m, n, dtype);
        applyActivation(epilogue, stored, c, m * n, dtype);
        return;
      }
    }
    if (gemmPath_ == GemmPath::CublasLtOnly)
      throw std::runtime_error("cuda backend: cuBLASLt has no algorithm for this GEMM, and "
                               "MT_CUDA_GEMM=cublaslt forbids the cuBLAS fallback");
    // With a bias: the product in f32, then bias added and rounded once.
    void *product =
        bias ? grow(buffers_->gemmOut, sizeof(float) * m * n, "allocating the GEMM output")
             : stored;
    gemmEx(blas_, transA, transB, m, n, k, a, lda, b, ldb, product,
           bias || epilogue.accumulate ? CUDA_R_32F : cudaTypeOf(dtype), bias ? m : ldc, dtype,
           epilogue.accumulate);
    if (bias) {
      withStorage(dtype, [&](auto tag) {
        using T = decltype(tag);
        launchBiasAdd(static_cast<const float *>(product), static_cast<const T *>(bias),
                      static_cast<T *>(stored), m * n, m, stream_);
      });
      launched("bias");
    }
    applyActivation(epilogue, stored, c, m * n, dtype);
  }
  /// GELU of the stored product into C, or C times GELU's derivative at the
  /// pre-activation `epilogue.aux`, in place; nothing without an activation.
  void applyActivation(const Epilogue &epilogue, const void *stored, void *c, int64_t count,
                       DType dtype) {
    if (epilogue.activation == Activation::None)
      return;
    withStorage(dtype, [&](auto tag) {
      using T = decltype(tag);
      if (epilogue.activation == Activation::Gelu)
        launchActivation(Gelu{}, static_cast<const T *>(stored), static_cast<T *>(c), count,
                         stream_);
      else
        launchActivationGrad(Gelu{}, static_cast<const T *>(c),
                             static_cast<const T *>(epilogue.aux), static_cast<T *>(c), count,
                             stream_);
    });
    launched(epilogue.activation == Activation::Gelu ? "GELU" : "GELU's gradient");
  }

  /// Runs attention `a` through cuDNN where it applies — `call(problem, why)` launches it,
  /// or returns false saying why cuDNN has no engine — and returns whether it ran. Where
  /// cuDNN cannot run it: false (our kernels run it, on CUDA cores: on an H200, LLaMA 3
  /// 8B's attention took 289 ms a step through them, 1.9 ms through cuDNN), with a warning
  /// the first time cuDNN declines a problem it should take; under
  /// MT_CUDA_ATTENTION=cudnn, an error. Dropped probabilities go with our keep mask
  /// (attentionKeepMaskKernel), written for each call.
  template <typename Call> bool throughCudnn(const AttentionShape &a, DType type, Call &&call) {
    if (attentionPath_ == AttentionPath::ExactOnly)
      return false;
    std::string why;
    if (type != DType::BF16 && type != DType::F16)
      why = "cuDNN's flash attention takes bf16 or f16, not f32";
    else if (a.queries.chunk != 0)
      why = "its queries are a context-parallel share of the sequence";
    SdpaProblem problem{a.layout, a.b, a.s, type, a.mask.causal, a.mask.window, a.scale, a.rate};
    const void *written = nullptr; // the mask, once a call has asked for it
    if (a.rate > 0)
      problem.keep = [&](std::string &whyNot) {
        return written ? written : (written = keepMask(a, type, whyNot));
      };
    const bool eligible = why.empty();
    if (eligible && call(problem, why))
      return true;
    std::string shape = cat(a.b, " x ", a.s, " tokens, ", a.heads, " heads of ", a.d, " (",
                            a.layout.kv, " key/value)");
    if (attentionPath_ == AttentionPath::CudnnOnly)
      throw std::runtime_error(cat("cuda backend: MT_CUDA_ATTENTION=cudnn, but attention over ",
                                   shape, " cannot go through cuDNN: ", why));
    if (eligible && !warnedCudnn_) {
      std::fprintf(stderr, "cuda backend: attention over %s through our kernels: %s\n",
                   shape.c_str(), why.c_str());
      warnedCudnn_ = true;
    }
    return false;
  }
  /// a's keep mask, written to keep_ (cuDNN asks for it once it has graphs and a
  /// workspace for the call: none is written for a problem it declines, as on Blackwell,
  /// whose deterministic backward drops no probabilities); null, with `why`, where the
  /// device has no room for it.
  const void *keepMask(const AttentionShape &a, DType type, std::string &why) {
    const int64_t pitch = SdpaProblem::keepPitch(a.s);
    const size_t bytes = dtypeBytes(type) * a.b * a.heads * a.s * pitch;
    void *keep = growUnlessRefused(keep_, bytes, keepRefused_, "allocating attention's keep mask");
    if (!keep) {
      why = cat("its keep mask of ", bytes, " bytes does not fit");
      return nullptr;
    }
    withStorage(type, [&](auto tag) {
      launchAttentionKeepMask(static_cast<decltype(tag) *>(keep), pitch, a, stream_);
    });
    launched("attention's keep mask");
    return keep;
  }
  /// Attention cuDNN never runs (a ring step's): under MT_CUDA_ATTENTION=cudnn, an error.
  void withoutCudnn(const AttentionShape &a, DType type) {
    throughCudnn(a, type, [](const SdpaProblem &, std::string &) { return false; });
  }
  CudnnAttention::Workspace cudnnWorkspace() {
    return [this](size_t bytes) {
      return growUnlessRefused(cudnnWorkspace_, bytes, workspaceRefused_,
                               "allocating cuDNN's workspace");
    };
  }

  /// One instruction's operands and place, as the launchers take them.
  template <typename T> struct Call {
    const plan::Instruction &inst;
    const TensorView *in, *out;
    const StepContext &ctx;
    const StepCounters *step; // in device memory
    /// The storage type T stands for.
    static constexpr DType type() {
      return std::is_same_v<T, float>           ? DType::F32
             : std::is_same_v<T, __nv_bfloat16> ? DType::BF16
                                                : DType::F16;
    }
    static T *p(const TensorView &v) { return v.as<T>(); }
    static float *f(const TensorView &v) { return v.as<float>(); }
    static bool wide(const TensorView &ids) { return ids.dtype == DType::I64; }
    /// The first output's elements (0 without outputs).
    int64_t n() const { return inst.outputs()->size() ? out[0].numel() : 0; }
    /// The ranks the vocabulary spans.
    int64_t parts() const { return inst.vocab_parallel() ? ctx.tpSize : 1; }
    /// The first vocabulary row (along `dim`) of this rank's shard.
    int64_t vocabFirst(const TensorView &sharded, int dim) const {
      return inst.vocab_parallel() ? ctx.tpRank * sharded.dim(dim) : 0;
    }
    /// The positions of this rank's rows of the sequence.
    SequenceMap positions(const TensorView &x) const { return sequenceMap(inst, x.dim(1), ctx); }
    /// A norm gradient's fourth operand: the residual stream's gradient, added to dx.
    const T *residualGrad() const { return inst.inputs()->size() == 4 ? p(in[3]) : nullptr; }
  };

  /// The embeddings and their gradients.
  template <typename T> void runEmbeddings(const Call<T> &c) {
    const plan::Instruction &inst = c.inst;
    const TensorView *in = c.in, *out = c.out;
    switch (inst.opcode()) {
    case Opcode::Embedding: {
      const int64_t vocabulary = in[0].dim(0) * c.parts();
      launchEmbedding(c.p(in[0]), in[1].data, c.wide(in[1]), c.p(out[0]), in[1].numel(),
                      in[0].dim(0), in[0].dim(1), c.vocabFirst(in[0], 0), vocabulary,
                      idsCheck("a token id", vocabulary), stream_);
      break;
    }
    case Opcode::EmbeddingGrad: {
      const int64_t rows = out[0].dim(0), h = out[0].dim(1), tokens = in[1].numel();
      check(cudaMemsetAsync(out[0].data, 0, dtypeBytes(c.type()) * rows * h, stream_), "zeroing");
      if (tokens == 0)
        break;
      const int endBit = embeddingKeyBits(rows);
      // Scratch: keys and token order, sorted copies of both, then CUB's temporaries.
      const size_t sortBytes = embeddingSortBytes(tokens, endBit, stream_);
      const size_t words = 4 * static_cast<size_t>(tokens);
      uint32_t *keys = static_cast<uint32_t *>(scratch(sizeof(uint32_t) * words + sortBytes));
      uint32_t *order = keys + tokens, *sortedKeys = order + tokens,
               *sortedOrder = sortedKeys + tokens;
      void *sortScratch = keys + words;
      launchEmbeddingGradKeys(in[1].data, c.wide(in[1]), tokens, rows, c.vocabFirst(out[0], 0),
                              keys, order, stream_);
      launched("embedding gradient (keys)");
      sortEmbeddingKeys(sortScratch, sortBytes, keys, sortedKeys, order, sortedOrder, tokens,
                        endBit, stream_);
      launchEmbeddingGradRows(c.p(in[0]), sortedKeys, sortedOrder, tokens, rows, h, c.p(out[0]),
                              stream_);
      break;
    }
    case Opcode::PositionEmbedding:
      launchPositionEmbedding(c.p(in[0]), c.p(in[1]), c.p(out[0]), c.n(), in[0].dim(1),
                              in[0].dim(2), c.positions(in[0]), stream_);
      break;
    case Opcode::PositionEmbeddingGrad:
      launchPositionEmbeddingGrad(c.p(in[0]), c.p(out[0]), out[0].dim(0), in[0].dim(0),
                                  in[0].dim(1), in[0].dim(2), c.positions(in[0]), stream_);
      break;
    default:
      throw std::logic_error("cuda backend: not an opcode of runEmbeddings");
    }
  }

  /// Layer and RMS norms and their gradients.
  template <typename T> void runNorms(const Call<T> &c) {
    const plan::Instruction &inst = c.inst;
    const TensorView *in = c.in, *out = c.out;
    switch (inst.opcode()) {
    case Opcode::LayerNorm:
      launchLayerNorm(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.p(out[0]), in[0].rows(), in[0].cols(),
                      static_cast<float>(inst.epsilon()), stream_);
      break;
    case Opcode::RmsNorm:
      launchRmsNorm(c.p(in[0]), c.p(in[1]), c.p(out[0]), in[0].rows(), in[0].cols(),
                    static_cast<float>(inst.epsilon()), stream_);
      break;
    case Opcode::QkNorm:
      launchQkNorm(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.p(out[0]), in[0].rows(),
                   qkvLayoutOf(inst, inst.heads(), in[0].dim(2)),
                   static_cast<float>(inst.epsilon()), stream_);
      break;
    case Opcode::QkNormGrad: {
      const QkvLayout layout = qkvLayoutOf(inst, inst.heads(), in[1].dim(2));
      const int64_t rows = in[1].rows();
      auto *rstds = static_cast<float *>(scratch(qkNormGradScratchBytes(rows, layout)));
      const float eps = static_cast<float>(inst.epsilon());
      if (inst.accumulate())
        launchQkNormGrad(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.p(in[3]), c.p(out[0]), c.f(out[1]),
                         c.f(out[2]), rows, layout, eps, true, rstds, stream_);
      else
        launchQkNormGrad(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.p(in[3]), c.p(out[0]), c.p(out[1]),
                         c.p(out[2]), rows, layout, eps, false, rstds, stream_);
      break;
    }
    case Opcode::RmsNormGrad: {
      const int64_t rows = in[1].rows(), h = in[1].cols();
      const size_t rowBytes = roundUp(sizeof(float) * std::max<int64_t>(rows, 1));
      auto *rstds = static_cast<float *>(scratch(rowBytes + normGradColumnBytes(1, rows, h)));
      float *sums = after<float>(rstds, rowBytes);
      const float eps = static_cast<float>(inst.epsilon());
      if (inst.accumulate())
        launchRmsNormGrad(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.residualGrad(), c.p(out[0]), rstds,
                          c.f(out[1]), rows, h, eps, sums, true, stream_);
      else
        launchRmsNormGrad(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.residualGrad(), c.p(out[0]), rstds,
                          c.p(out[1]), rows, h, eps, sums, false, stream_);
      launched("rms norm gradient");
      break;
    }
    case Opcode::LayerNormGrad: {
      const int64_t rows = in[1].rows(), h = in[1].cols();
      const size_t rowBytes = roundUp(sizeof(float2) * std::max<int64_t>(rows, 1));
      auto *moments = static_cast<float2 *>(scratch(rowBytes + normGradColumnBytes(2, rows, h)));
      float *sums = after<float>(moments, rowBytes);
      const float eps = static_cast<float>(inst.epsilon());
      if (inst.accumulate())
        launchLayerNormGrad(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.residualGrad(), c.p(out[0]),
                            moments, c.f(out[1]), c.f(out[2]), rows, h, eps, sums, true, stream_);
      else
        launchLayerNormGrad(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.residualGrad(), c.p(out[0]),
                            moments, c.p(out[1]), c.p(out[2]), rows, h, eps, sums, false, stream_);
      launched("layer norm gradient");
      break;
    }
    default:
      throw std::logic_error("cuda backend: not an opcode of runNorms");
    }
  }

  /// dW[N×K] = dy[M×N]ᵀ·x[M×K]: column-major dWᵀ = xᵀ·dy (added to the f32 gradient where
  /// the instruction accumulates). With `sums`, cuBLASLt's epilogue also writes dy's
  /// column sums there (Epilogue::biasGrad), if it has an algorithm for that: false,
  /// having run the plain product, where it has none.
  template <typename T> bool weightGradient(const Call<T> &c, void *sums) {
    const TensorView *in = c.in, *out = c.out;
    const int64_t m = in[0].rows(), nOut = in[0].cols(), k = in[1].cols();
    Epilogue epilogue{nullptr, Activation::None, nullptr, c.inst.accumulate(), sums};
    if (sums && gemmPath_ != GemmPath::CublasOnly) {
      int64_t ldDy = nOut;
      const void *dy = stagedB(in[0].data, nOut, m, ldDy, c.type());
      if (ltGemms_->run(buffers_->workspace, kWorkspaceBytes, false, true, k, nOut, m, in[1].data,
                        k, dy, ldDy, out[0].data, k, c.type(), epilogue, stream_))
        return true;
    }
    if (sums && gemmPath_ == GemmPath::CublasLtOnly)
      throw std::runtime_error(cat("cuda backend: cuBLASLt did not run the bias-gradient "
                                   "epilogue of a ",
                                   k, " x ", nOut, " x ", m,
                                   " weight gradient, and MT_CUDA_GEMM=cublaslt forbids "
                                   "summing the bias gradient apart"));
    if (sums && gemmPath_ != GemmPath::CublasOnly && !warnedBiasGrad_) {
      std::fprintf(stderr,
                   "cuda backend: cuBLASLt did not run the bias-gradient epilogue of a "
                   "%lld x %lld x %lld weight gradient (no algorithm, a vector not "
                   "16-byte aligned, or a refused call); such bias gradients are "
                   "summed apart\n",
                   static_cast<long long>(k), static_cast<long long>(nOut),
                   static_cast<long long>(m));
      warnedBiasGrad_ = true;
    }
    epilogue.biasGrad = nullptr;
    gemm(false, true, k, nOut, m, in[1].data, k, in[0].data, nOut, out[0].data, k, c.type(),
         epilogue);
    return false;
  }
  /// db = dy's column sums (added to the f32 gradient where the instruction accumulates).
  template <typename T> void biasGradient(const Call<T> &c, const TensorView &db) {
    const int64_t rows = c.in[0].rows(), cols = c.in[0].cols();
    float *partials = static_cast<float *>(scratch(columnSumScratchBytes(1, rows, cols)));
    if (c.inst.accumulate())
      launchBiasGrad(c.p(c.in[0]), c.f(db), rows, cols, partials, true, stream_);
    else
      launchBiasGrad(c.p(c.in[0]), c.p(db), rows, cols, partials, false, stream_);
  }

  /// The linears (GEMMs with their epilogues), their gradients and bias gradients.
  template <typename T> void runLinears(const Call<T> &c) {
    const plan::Instruction &inst = c.inst;
    const TensorView *in = c.in, *out = c.out;
    switch (inst.opcode()) {
    case Opcode::Linear:
    case Opcode::LinearGelu: {
      // Row-major out[M×N] = x[M×K]·W[N×K]ᵀ + b is column-major outᵀ = W·xᵀ; LinearGelu
      // keeps that pre-activation in out[0] and its GELU in out[1].
      const int64_t m = in[0].rows(), k = in[0].cols(), nOut = in[1].dim(0);
      const bool gelu = inst.opcode() == Opcode::LinearGelu;
      gemm(true, false, nOut, m, k, in[1].data, k, in[0].data, k, out[gelu ? 1 : 0].data, nOut,
           c.type(),
           {inst.inputs()->size() == 3 ? in[2].data : nullptr,
            gelu ? Activation::Gelu : Activation::None, gelu ? out[0].data : nullptr});
      break;
    }
    case Opcode::LinearGradInput:
    case Opcode::LinearGradInputGelu: {
      // dx[M×K] = dy[M×N]·W[N×K]: column-major dxᵀ = Wᵀ·dyᵀ; LinearGradInputGelu times
      // gelu'(pre = in[2]).
      const int64_t m = in[0].rows(), nOut = in[0].cols(), k = in[1].dim(1);
      const bool gelu = inst.opcode() == Opcode::LinearGradInputGelu;
      gemm(false, false, k, m, nOut, in[1].data, k, in[0].data, nOut, out[0].data, k, c.type(),
           {nullptr, gelu ? Activation::GeluGrad : Activation::None, gelu ? in[2].data : nullptr});
      break;
    }
    case Opcode::LinearGradWeight:
      weightGradient(c, nullptr);
      break;
    case Opcode::BiasGrad:
      biasGradient(c, out[0]);
      break;
    case Opcode::LinearGradWeightBias: {
      // The bias gradient as the GEMM reads dy (BGRADB), in f32 and then added where the
      // instruction accumulates; where cuBLASLt has no algorithm for it, the pair.
      const bool accumulate = inst.accumulate();
      void *sums = accumulate ? scratch(sizeof(float) * in[0].cols()) : out[1].data;
      if (!weightGradient(c, sums)) {
        biasGradient(c, out[1]);
        break;
      }
      if (accumulate)
        launchAccumulate(static_cast<const float *>(sums), c.f(out[1]), in[0].cols(), stream_);
      break;
    }
    default:
      throw std::logic_error("cuda backend: not an opcode of runLinears");
    }
  }

  /// Blocks of kThreads for a warp each of n.
  static unsigned warpsFor(int64_t n) {
    return static_cast<unsigned>((n * 32 + kThreads - 1) / kThreads);
  }
  /// Expert ids and counts as the router writes them (i32).
  static const int32_t *ids(const TensorView &t) {
    if (t.dtype != DType::I32)
      throw std::runtime_error("cuda backend: mixture of experts with i64 experts or counts");
    return t.as<int32_t>();
  }
  /// Each slot's dispatched row of experts [B, S, k] among `e` experts keeping `capacity`
  /// slots each (Moe.cuh; 0: all), in scratch: the slots per expert, the rows each keeps
  /// (`kept`), then the rows, and `more` ints after them for the caller.
  int *moeRows(const TensorView &experts, int64_t e, int64_t capacity, int *&kept,
               int64_t more = 0) {
    const int64_t slots = experts.numel();
    int *counts = static_cast<int *>(scratch(sizeof(int) * (2 * e + slots + more)));
    int *rows = counts + 2 * e;
    kept = counts + e;
    moeCountKernel<<<static_cast<unsigned>(e), kMoeThreads, 0, stream_>>>(ids(experts), slots,
                                                                          counts);
    launched("expert counts");
    moeRowsKernel<<<static_cast<unsigned>(e), kMoeThreads, 0, stream_>>>(
        ids(experts), slots, static_cast<int>(e), capacity, counts, kept, rows);
    launched("dispatched rows");
    return rows;
  }

  /// Mixture of experts (Moe.cuh; the experts' GEMMs: runGroupedLinear).
  template <typename T> void runMoe(const Call<T> &c) {
    const plan::Instruction &inst = c.inst;
    const TensorView *in = c.in, *out = c.out;
    int *counts = nullptr;
    switch (inst.opcode()) {
    case Opcode::MoeRouter: {
      const int64_t e = in[0].dim(2), tokens = in[0].numel() / e;
      ids(out[1]);
      moeRouterKernel<<<warpsFor(tokens), kThreads, 0, stream_>>>(
          c.p(in[0]), c.p(out[0]), out[1].as<int32_t>(), tokens, static_cast<int>(e),
          static_cast<int>(inst.topk()), inst.pre_softmax());
      break;
    }
    case Opcode::MoeRouterGrad: {
      const TensorView &logits = in[1], &experts = in[2];
      const int64_t e = logits.dim(2), k = inst.topk(), tokens = logits.numel() / e;
      if (inst.aux_loss_coeff() > 0 && inst.inputs()->size() > 3) {
        counts = static_cast<int *>(in[3].data); // the load: the whole micro-batch's
      } else if (inst.aux_loss_coeff() > 0) {
        counts = static_cast<int *>(scratch(sizeof(int) * e));
        moeCountKernel<<<static_cast<unsigned>(e), kMoeThreads, 0, stream_>>>(
            ids(experts), experts.numel(), counts);
        launched("expert counts");
      }
      moeRouterGradKernel<<<warpsFor(tokens), kThreads, 0, stream_>>>(
          c.p(in[0]), c.p(logits), ids(experts), counts, inst.aux_loss_coeff(), c.step, c.p(out[0]),
          tokens, static_cast<int>(e), static_cast<int>(k), inst.pre_softmax());
      break;
    }
    case Opcode::MoeCount:
      ids(out[0]);
      moeCountKernel<<<static_cast<unsigned>(inst.num_experts()), kMoeThreads, 0, stream_>>>(
          ids(in[0]), in[0].numel(), out[0].as<int32_t>());
      break;
    case Opcode::MoeDrop: {
      const TensorView &experts = in[1];
      const int64_t slots = experts.numel(), e = inst.num_experts();
      // Each expert's slots in slot order (their rows without a capacity: `counts` all of
      // each expert's), then each slot's rank among them.
      int *rows = moeRows(experts, e, 0, counts, slots), *order = rows + slots;
      moeOrderKernel<<<blocksFor(slots), kThreads, 0, stream_>>>(rows, slots, order);
      launched("the experts' slots in order");
      ids(out[0]);
      moeDropKernel<<<blocksFor(slots), kThreads, 0, stream_>>>(
          c.p(in[0]), ids(experts), out[0].as<int32_t>(), slots, static_cast<int>(e),
          inst.capacity(), counts, order);
      break;
    }
    case Opcode::MoeDispatch: {
      const TensorView &x = in[0], &experts = in[1];
      const int64_t e = inst.num_experts(), h = x.dim(2);
      const int *rows = moeRows(experts, inst.num_experts(), inst.capacity(), counts);
      check(cudaMemsetAsync(out[0].data, 0, out[0].bytes(), stream_), "zeroing the rows");
      moeDispatchKernel<<<blocksFor(experts.numel() * h), kThreads, 0, stream_>>>(
          c.p(x), rows, c.p(out[0]), experts.numel(), static_cast<int>(experts.dim(2)), h);
      ids(out[1]);
      check(
          cudaMemcpyAsync(out[1].data, counts, sizeof(int) * e, cudaMemcpyDeviceToDevice, stream_),
          "copying the expert counts");
      break;
    }
    case Opcode::MoeDispatchGrad:
    case Opcode::MoeCombine: {
      const bool combine = inst.opcode() == Opcode::MoeCombine;
      const TensorView &experts = in[combine ? 2 : 1];
      const int *rows = moeRows(experts, inst.num_experts(), inst.capacity(), counts);
      const int64_t k = experts.dim(2), tokens = experts.numel() / k, h = out[0].dim(2);
      moeGatherKernel<<<blocksFor(tokens * h), kThreads, 0, stream_>>>(
          c.p(in[0]), combine ? c.p(in[1]) : nullptr, rows, c.p(out[0]), tokens,
          static_cast<int>(k), h);
      break;
    }
    case Opcode::MoeCombineGrad: {
      const TensorView &experts = in[3];
      const int *rows = moeRows(experts, inst.num_experts(), inst.capacity(), counts);
      check(cudaMemsetAsync(out[0].data, 0, out[0].bytes(), stream_), "zeroing the rows");
      moeCombineGradKernel<<<warpsFor(experts.numel()), kThreads, 0, stream_>>>(
          c.p(in[0]), c.p(in[1]), c.p(in[2]), rows, c.p(out[0]), c.p(out[1]), experts.numel(),
          static_cast<int>(experts.dim(2)), in[0].dim(2));
      break;
    }
    case Opcode::GroupedLinear:
    case Opcode::GroupedLinearGradInput:
    case Opcode::GroupedLinearGradWeight:
      runGroupedLinear(c);
      break;
    default:
      throw std::logic_error("cuda backend: not an opcode of runMoe");
    }
  }

  /// The experts' GEMMs, one per expert over its rows (counted on the device, read here:
  /// the one wait for the device of a mixture of experts), as Linear, LinearGradInput and
  /// LinearGradWeight; rows past the counted ones are 0.
  template <typename T> void runGroupedLinear(const Call<T> &c) {
    const plan::Instruction &inst = c.inst;
    const TensorView *in = c.in, *out = c.out;
    const bool weights = inst.opcode() == Opcode::GroupedLinearGradWeight;
    const TensorView &w = weights ? out[0] : in[2], &counted = in[weights ? 2 : 1];
    const int64_t n = in[0].dim(0), o = w.dim(1), i = w.dim(2), e = w.dim(0);
    // counts [E], or [sources, E] after an expert exchange: an expert's rows their sum.
    std::vector<int32_t> counts(counted.numel());
    check(cudaMemcpyAsync(counts.data(), ids(counted), sizeof(int32_t) * counts.size(),
                          cudaMemcpyDeviceToHost, stream_),
          "reading the expert counts");
    check(cudaStreamSynchronize(stream_), "waiting for the expert counts");
    std::vector<int64_t> rows(e, 0);
    for (size_t x = 0; x < counts.size(); ++x) {
      if (counts[x] < 0 || counts[x] > n)
        throw std::runtime_error(
            cat("cuda backend: grouped linear: a count of ", counts[x], " rows, of ", n));
      rows[x % e] += counts[x];
    }
    const size_t size = dtypeBytes(c.type());
    // Misaligned columns' copies (stagedB, stagingFor) sized once for any expert's rows:
    // the buffer growing between experts would make every recorded program stale.
    const int64_t paddedO = paddedColumn(o, c.type()), paddedI = paddedColumn(i, c.type());
    if (paddedO != o || paddedI != i)
      stagingBuffer(size * std::max(n, o) * std::max(paddedO, paddedI));
    auto at = [&](const TensorView &t, int64_t element) {
      return static_cast<char *>(t.data) + size * element;
    };
    int64_t first = 0;
    for (int64_t x = 0; x < e; first += rows[x++]) {
      if (rows[x] < 0 || rows[x] > n - first)
        throw std::runtime_error(cat("cuda backend: grouped linear: expert ", x, "'s ", rows[x],
                                     " rows, of ", n, " (", first, " before it)"));
      const int64_t m = rows[x];
      if (weights && m == 0)
        check(cudaMemsetAsync(at(w, x * o * i), 0, size * o * i, stream_), "zeroing a gradient");
      else if (weights) // dW[e] = dyᵀ·x over its rows
        gemm(false, true, i, o, m, at(in[1], first * i), i, at(in[0], first * o), o,
             at(w, x * o * i), i, c.type());
      else if (m > 0 && inst.opcode() == Opcode::GroupedLinear) // y = x·W[e]ᵀ
        gemm(true, false, o, m, i, at(w, x * o * i), i, at(in[0], first * i), i,
             at(out[0], first * o), o, c.type());
      else if (m > 0) // dx = dy·W[e]
        gemm(false, false, i, m, o, at(w, x * o * i), i, at(in[0], first * o), o,
             at(out[0], first * i), i, c.type());
    }
    if (!weights) {
      const int64_t width = out[0].dim(1);
      check(cudaMemsetAsync(at(out[0], first * width), 0, size * (n - first) * width, stream_),
            "zeroing the rows past the experts'");
    }
  }

  /// Fused and unfused attention and their gradients.
  template <typename T> void runAttention(const Call<T> &c) {
    const plan::Instruction &inst = c.inst;
    const TensorView *in = c.in, *out = c.out;
    switch (inst.opcode()) {
    case Opcode::Attention: {
      // The rows' statistics go to the second output where the plan keeps them (for
      // the gradient), else to scratch where cuDNN must write them.
      AttentionShape a =
          attentionShape(in[0], out[0].dim(1), inst.heads(), inst, c.ctx, c.step, true);
      float *kept = inst.outputs()->size() > 1 ? c.f(out[1]) : nullptr;
      if (throughCudnn(a, c.type(), [&](const SdpaProblem &problem, std::string &why) {
            float *stats =
                kept ? kept : static_cast<float *>(scratch(sizeof(float) * a.b * a.heads * a.s));
            return cudnn_.forward(problem, in[0].data, out[0].data, stats, cudnnWorkspace(),
                                  stream_, why);
          }))
        break;
      launchAttentionForward(c.p(in[0]), c.p(in[0]), c.p(out[0]), kept, a, false, stream_);
      break;
    }
    case Opcode::RingAttention: { // a step: (qkv, the share in flight) -> (out, lse)
      AttentionShape a =
          attentionShape(in[0], in[0].dim(1), inst.heads(), inst, c.ctx, c.step, true);
      withoutCudnn(a, c.type());
      launchAttentionForward(c.p(in[0]), c.p(in[1]), c.p(out[0]), c.f(out[1]), a, !c.ctx.ringFirst,
                             stream_);
      break;
    }
    case Opcode::RingAttentionGrad: { // (dy, qkv, out, lse, the share) -> (dqkv, its dkv) +=
      AttentionShape a =
          attentionShape(in[1], in[1].dim(1), inst.heads(), inst, c.ctx, c.step, true);
      withoutCudnn(a, c.type());
      float2 *stats = static_cast<float2 *>(scratch(sizeof(float2) * a.b * a.heads * a.rows));
      launchAttentionBackwardQuery(c.p(in[1]), c.p(in[4]), c.p(in[2]), c.p(in[0]), c.p(out[0]),
                                   c.f(in[3]), stats, a, true, stream_);
      launched("ring attention backward (queries)");
      launchAttentionBackwardKey(c.p(in[1]), c.p(in[4]), c.p(in[0]), c.p(out[1]), stats, a, true,
                                 stream_);
      break;
    }
    case Opcode::AttentionGrad: {
      AttentionShape a =
          attentionShape(in[1], in[2].dim(1), inst.heads(), inst, c.ctx, c.step, true);
      // cuDNN's backward takes the rows' statistics: the forward's where the plan kept
      // them (mt-keep-attention-stats), else from a forward run again for them (its
      // output written to scratch and discarded). Both paths write the same form of
      // them (the log-sum-exp of the scaled scores), so either backward reads either's.
      const float *given = inst.inputs()->size() > 3 ? c.f(in[3]) : nullptr;
      if (throughCudnn(a, c.type(), [&](const SdpaProblem &problem, std::string &why) {
            if (given)
              return cudnn_.backward(problem, in[1].data, in[2].data, in[0].data, given,
                                     out[0].data, cudnnWorkspace(), stream_, why);
            if (!cudnn_.supports(problem, why))
              return false;
            // The output after the statistics, 256-byte aligned as cuDNN needs.
            const size_t statsBytes = roundUp(sizeof(float) * a.b * a.heads * a.s);
            void *temporaries = scratch(statsBytes + in[2].bytes());
            float *stats = static_cast<float *>(temporaries);
            void *output = after<char>(temporaries, statsBytes);
            return cudnn_.forward(problem, in[1].data, output, stats, cudnnWorkspace(), stream_,
                                  why) &&
                   cudnn_.backward(problem, in[1].data, in[2].data, in[0].data, stats, out[0].data,
                                   cudnnWorkspace(), stream_, why);
          }))
        break;
      float2 *stats = static_cast<float2 *>(scratch(sizeof(float2) * a.b * a.heads * a.rows));
      if (a.gathered) // the rows of other ranks' queries get no query gradient here
        check(cudaMemsetAsync(out[0].data, 0, out[0].bytes(), stream_),
              "zeroing attention's gradient");
      launchAttentionBackwardQuery(c.p(in[1]), c.p(in[1]), c.p(in[2]), c.p(in[0]), c.p(out[0]),
                                   given, stats, a, false, stream_);
      launched("attention backward (queries)");
      launchAttentionBackwardKey(c.p(in[1]), c.p(in[1]), c.p(in[0]), c.p(out[0]), stats, a, false,
                                 stream_);
      break;
    }
    case Opcode::AttentionProbs: {
      AttentionShape a =
          attentionShape(in[0], in[0].dim(1), inst.heads(), inst, c.ctx, c.step, false);
      launchAttentionProbs(c.p(in[0]), c.p(out[0]), a, stream_);
      break;
    }
    case Opcode::AttentionContext: {
      AttentionShape a =
          attentionShape(in[1], in[1].dim(1), in[0].dim(1), inst, c.ctx, c.step, false);
      launchAttentionContext(c.p(in[0]), c.p(in[1]), c.p(out[0]), a, stream_);
      break;
    }
    case Opcode::AttentionProbsGrad: {
      AttentionShape a =
          attentionShape(in[2], in[2].dim(1), in[1].dim(1), inst, c.ctx, c.step, false);
      float *deltas = static_cast<float *>(scratch(sizeof(float) * a.b * a.heads * a.s));
      launchAttentionProbsGradQuery(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.p(out[0]), deltas, a,
                                    stream_);
      launched("attention probabilities gradient (queries)");
      launchAttentionProbsGradKey(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.p(out[0]), deltas, a,
                                  stream_);
      break;
    }
    case Opcode::AttentionContextGrad: {
      AttentionShape a =
          attentionShape(in[2], in[2].dim(1), in[1].dim(1), inst, c.ctx, c.step, false);
      launchAttentionContextGradProbs(c.p(in[0]), c.p(in[2]), c.p(out[0]), a, stream_);
      launched("attention context gradient (probabilities)");
      launchAttentionContextGradValues(c.p(in[0]), c.p(in[1]), c.p(out[1]), a, stream_);
      break;
    }
    default:
      throw std::logic_error("cuda backend: not an opcode of runAttention");
    }
  }

  /// Cross-entropy, fused, unfused and vocabulary-parallel.
  template <typename T> void runLosses(const Call<T> &c) {
    const plan::Instruction &inst = c.inst;
    const TensorView *in = c.in, *out = c.out;
    switch (inst.opcode()) {
    case Opcode::CrossEntropy: {
      const int64_t m = in[0].rows(), v = in[0].cols();
      const int64_t classes = inst.num_classes() ? inst.num_classes() : v;
      float *rowLoss = static_cast<float *>(scratch(sizeof(float) * m));
      launchCrossEntropyRows(c.p(in[0]), in[1].data, c.wide(in[1]), rowLoss, m, v, classes,
                             idsCheck("a target id", classes), stream_);
      launched("cross-entropy");
      launchMean(rowLoss, m, c.f(out[0]), stream_);
      break;
    }
    case Opcode::CrossEntropyGrad: {
      const int64_t m = in[1].rows(), v = in[1].cols();
      const int64_t classes = inst.num_classes() ? inst.num_classes() : v;
      launchCrossEntropyGrad(c.f(in[0]), c.p(in[1]), in[2].data, c.wide(in[2]), c.p(out[0]), m, v,
                             classes, idsCheck("a target id", classes), stream_);
      break;
    }
    case Opcode::CrossEntropyWithGrad: {
      const int64_t m = in[1].rows(), v = in[1].cols();
      const int64_t classes = inst.num_classes() ? inst.num_classes() : v;
      float *rowLoss = static_cast<float *>(scratch(sizeof(float) * m));
      launchCrossEntropyWithGrad(c.f(in[0]), c.p(in[1]), in[2].data, c.wide(in[2]), rowLoss,
                                 c.p(out[1]), m, v, classes, idsCheck("a target id", classes),
                                 stream_);
      launched("cross-entropy with its gradient");
      launchMean(rowLoss, m, c.f(out[0]), stream_);
      break;
    }
    case Opcode::CrossEntropyStats: {
      const int64_t m = in[0].rows(), v = in[0].cols(), first = c.vocabFirst(in[0], in[0].rank - 1);
      const int64_t classes = inst.num_classes() ? inst.num_classes() : v * c.parts();
      const int64_t valid = std::clamp<int64_t>(classes - first, 0, v);
      launchCrossEntropyStats(c.p(in[0]), in[1].data, c.wide(in[1]), c.f(out[0]), m, v, first,
                              valid, classes, idsCheck("a target id", classes), stream_);
      break;
    }
    case Opcode::CrossEntropyMerge: {
      const int64_t m = in[0].cols(), shards = in[0].dim(0) / 3;
      float *rowLoss = static_cast<float *>(scratch(sizeof(float) * m));
      launchCrossEntropyMergeRows(c.f(in[0]), rowLoss, m, shards, stream_);
      launched("cross-entropy merge");
      launchMean(rowLoss, m, c.f(out[0]), stream_);
      break;
    }
    case Opcode::VocabParallelCrossEntropyGrad: {
      const int64_t m = in[1].rows(), v = in[1].cols(), first = c.vocabFirst(in[1], in[1].rank - 1);
      const int64_t classes = inst.num_classes() ? inst.num_classes() : v * c.parts();
      launchVocabParallelCrossEntropyGrad(c.f(in[0]), c.p(in[1]), in[2].data, c.wide(in[2]),
                                          c.f(in[3]), c.p(out[0]), m, v, in[3].dim(0) / 3, first,
                                          std::clamp<int64_t>(classes - first, 0, v), stream_);
      break;
    }
    default:
      throw std::logic_error("cuda backend: not an opcode of runLosses");
    }
  }

  /// The activations (core/SharedMath.h), each as its instruction makes it.
  template <typename T> void runActivations(const Call<T> &c) {
    const TensorView *in = c.in, *out = c.out;
    switch (c.inst.opcode()) {
#define MT_ACTIVATION(opcode, gradient, F)                                                     \
  case Opcode::opcode:                                                                         \
    return launchActivation(activationOf<F>(c.inst), c.p(in[0]), c.p(out[0]), c.n(),           \
                            stream_);                                                          \
  case Opcode::gradient:                                                                       \
    return launchActivationGrad(activationOf<F>(c.inst), c.p(in[0]), c.p(in[1]), c.p(out[0]),  \
                                c.n(), stream_);
#include "backends/Activations.def"
    case Opcode::Swiglu:
      return launchSwiglu(c.p(in[0]), c.p(in[1]), c.p(out[0]), c.n(), stream_);
    case Opcode::SwigluGrad:
      return launchSwigluGrad(c.p(in[0]), c.p(in[1]), c.p(in[2]), c.p(out[0]), c.p(out[1]), c.n(),
                              stream_);
    default:
      throw std::logic_error("cuda backend: not an opcode of runActivations");
    }
  }

  /// Fill: its value, or the loss seed's (times the loss scale), in f32 or T.
  template <typename T> void fill(const Call<T> &c) {
    const plan::Instruction &inst = c.inst;
    const TensorView &out = c.out[0];
    if (inst.loss_seed() && out.dtype == DType::F32)
      launchLossSeed(c.f(out), c.n(), inst.value(), c.step, stream_);
    else if (inst.loss_seed())
      launchLossSeed(c.p(out), c.n(), inst.value(), c.step, stream_);
    else if (out.dtype == DType::F32)
      launchFill(c.f(out), c.n(), static_cast<float>(inst.value()), stream_);
    else
      launchFill(c.p(out), c.n(), static_cast<float>(inst.value()), stream_);
  }

  template <typename T> void rotary(const Call<T> &c) {
    const TensorView &qkv = c.in[0];
    launchRotary(c.p(qkv), c.p(c.out[0]), qkv.rows(), qkv.dim(1),
                 qkvLayoutOf(c.inst, c.inst.heads(), qkv.dim(2)), ropeOf(c.inst), c.positions(qkv),
                 stream_);
  }

  template <typename T>
  Status dispatch(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
                  const StepContext &ctx) {
    const Call<T> c{inst, in, out, ctx, counters(ctx)};
    switch (inst.opcode()) {
    case Opcode::Embedding:
    case Opcode::EmbeddingGrad:
    case Opcode::PositionEmbedding:
    case Opcode::PositionEmbeddingGrad:
      runEmbeddings(c);
      break;
    case Opcode::LayerNorm:
    case Opcode::RmsNorm:
    case Opcode::RmsNormGrad:
    case Opcode::LayerNormGrad:
    case Opcode::QkNorm:
    case Opcode::QkNormGrad:
      runNorms(c);
      break;
    case Opcode::Linear:
    case Opcode::LinearGelu:
    case Opcode::LinearGradInput:
    case Opcode::LinearGradInputGelu:
    case Opcode::LinearGradWeight:
    case Opcode::BiasGrad:
    case Opcode::LinearGradWeightBias:
      runLinears(c);
      break;
    case Opcode::Attention:
    case Opcode::AttentionGrad:
    case Opcode::AttentionProbs:
    case Opcode::AttentionContext:
    case Opcode::AttentionProbsGrad:
    case Opcode::AttentionContextGrad:
    case Opcode::RingAttention:
    case Opcode::RingAttentionGrad:
      runAttention(c);
      break;
    case Opcode::CrossEntropy:
    case Opcode::CrossEntropyGrad:
    case Opcode::CrossEntropyWithGrad:
    case Opcode::CrossEntropyStats:
    case Opcode::CrossEntropyMerge:
    case Opcode::VocabParallelCrossEntropyGrad:
      runLosses(c);
      break;
    case Opcode::Fill:
      fill(c);
      break;
    case Opcode::BiasAdd:
      launchBiasAdd(c.p(in[0]), c.p(in[1]), c.p(out[0]), c.n(), in[0].cols(), stream_);
      break;
    case Opcode::Add:
      launchAdd(c.p(in[0]), c.p(in[1]), c.p(out[0]), c.n(), stream_);
      break;
#define MT_ACTIVATION(opcode, gradient, F)                                                     \
  case Opcode::opcode:                                                                         \
  case Opcode::gradient:
#include "backends/Activations.def"
    case Opcode::Swiglu:
    case Opcode::SwigluGrad:
      runActivations(c);
      break;
    case Opcode::Rotary:
      rotary(c);
      break;
    case Opcode::TpCopy:
      convertOn(out[0].data, c.type(), in[0].data, c.type(), c.n());
      break;
    case Opcode::ContextOrder:
      contextOrder(in[0], inst.context_parallel(), inst.inverse(), out[0]);
      break;
    case Opcode::ParamGrad:
      launchAccumulate(c.p(in[0]), c.f(out[0]), out[0].numel(), stream_);
      break;
    case Opcode::BiasDropoutAdd:
      launchBiasDropoutAdd(
          c.p(in[0]), c.p(in[1]), inst.inputs()->size() == 3 ? c.p(in[2]) : nullptr, in[0].cols(),
          c.p(out[0]), inst.outputs()->size() == 2 ? static_cast<uint8_t *>(out[1].data) : nullptr,
          c.n(), dropoutRate(inst, c.ctx), static_cast<uint32_t>(inst.stream()),
          dropoutShard(inst, in[0], c.ctx), c.step, stream_);
      break;
    case Opcode::Dropout:
    case Opcode::DropoutGrad: {
      // A dropout gradient without its mask draws the mask again: the same dropout.
      if (inst.opcode() == Opcode::DropoutGrad && inst.inputs()->size() == 2) {
        launchDropoutGrad(c.p(in[0]), static_cast<const uint8_t *>(in[1].data), c.p(out[0]), c.n(),
                          keptScale(inst.rate()), stream_);
        break;
      }
      const bool masked = inst.opcode() == Opcode::Dropout && inst.outputs()->size() == 2;
      launchDropout(c.p(in[0]), c.p(out[0]), masked ? static_cast<uint8_t *>(out[1].data) : nullptr,
                    c.n(), dropoutRate(inst, c.ctx), static_cast<uint32_t>(inst.stream()),
                    dropoutShard(inst, in[0], c.ctx), c.step, stream_);
      break;
    }
    case Opcode::AllReduce:
    case Opcode::AllGather:
    case Opcode::ReduceScatter:
    case Opcode::MoeExchange:
    case Opcode::MoeExchangeBack:
      return Status::failure("collectives run through the communicator, not the backend");
    case Opcode::MoeRouter:
    case Opcode::MoeRouterGrad:
    case Opcode::MoeCount:
    case Opcode::MoeDrop:
    case Opcode::MoeDispatch:
    case Opcode::MoeDispatchGrad:
    case Opcode::MoeCombine:
    case Opcode::MoeCombineGrad:
    case Opcode::GroupedLinear:
    case Opcode::GroupedLinearGradInput:
    case Opcode::GroupedLinearGradWeight:
      runMoe(c);
      break;
    }
    launched(plan::EnumNameOpcode(inst.opcode()));
    return Status::success();
  }

  // The stream, destroyed after everything else (cuDNN's handle among them) is gone.
  struct OwnedStream {
    cudaStream_t stream = nullptr;
    ~OwnedStream() {
      if (stream)
        cudaStreamDestroy(stream);
    }
  } owned_, ownedSide_;
  // MT_CUDA_SIDE_STREAM=on: weight gradients on a second stream (side_, a blocking one as
  // stream_ is), each forked from stream_ as it is issued, beside the rest of backward.
  // An instruction on stream_ waits for them where it meets what they read or write
  // (hazards_); any other work on stream_ waits for them whole (joinSide). Off while
  // profiling: the profile times instructions on one stream.
  const bool sideWanted_ = environmentChoice("MT_CUDA_SIDE_STREAM", "on", "off") == 1;
  cudaStream_t side_ = nullptr;
  cudaEvent_t forked_ = nullptr, joined_ = nullptr;
  SideStreamHazards hazards_;
  std::vector<ByteRange> reads_, writes_; // run()'s instruction's, reused
  bool onSide_ = false; // an instruction is issued to side_: stream_ and buffers_ swapped
  bool profiling_ = false;
  bool swapFailed_ = false; // cuBLAS's handle could not follow a swap of streams
  // Choosing GEMM algorithms by timing (MT_CUDA_GEMM_CHOICES).
  const bool choosing_ = [] {
    const char *path = std::getenv("MT_CUDA_GEMM_CHOICES");
    return path && *path;
  }();
  cublasLtHandle_t lt_ = nullptr;
  GemmChoices gemmChoices_;          // MT_CUDA_GEMM_CHOICES's file, read once
  std::unique_ptr<LtGemms> ltGemms_; // lt_'s plans, freed before it
  cublasHandle_t blas_ = nullptr;
  unsigned long long *flags_ = nullptr;
  std::vector<IdsCheck> checks_;
  size_t runs_ = 0; // run() calls since checkRuns
  StepCounters *counters_ = nullptr;
  std::optional<StepCounters> countersHeld_; // what counters_ holds, once known
  bool capturing_ = false;  // a program is being recorded: nothing may wait or allocate
  uint64_t generation_ = 0; // counts the buffers that moved (graphs hold their addresses)
  const bool graphsOff_ = environmentChoice("MT_CUDA_GRAPHS", "off", "on") == 1;
  /// What a stream's instructions use for their temporaries, each filled and read by one
  /// instruction (or two in a row: staged_): the main stream's, and the side stream's.
  struct StreamBuffers {
    void *workspace = nullptr; // kWorkspaceBytes: cuBLASLt's and the cuBLAS fallback's
    DeviceBuffer scratch;      // one instruction's temporaries
    DeviceBuffer gemmOut;      // an f32 product before its bias (the cuBLAS fallback)
    DeviceBuffer biasCopy;     // a misaligned bias, aligned for the epilogue
    DeviceBuffer staging;      // a GEMM's B or C with its columns aligned (stagedB, stagingFor)
    size_t bytes() const {
      return (workspace ? kWorkspaceBytes : 0) + scratch.capacity() + gemmOut.capacity() +
             biasCopy.capacity() + staging.capacity();
    }
  };
  StreamBuffers main_, sideBuffers_;
  StreamBuffers *buffers_ = &main_; // the stream's running instructions
  DeviceBuffer keep_;     // attention's keep mask for cuDNN (keepMask)
  size_t keepRefused_ = 0;      // the smallest keep mask the device had no room for (0: none)
  size_t workspaceRefused_ = 0; // the smallest cuDNN workspace it had no room for (0: none)
  Staged staged_;
  Place running_;      // of the run() call running, or last run
  uint64_t calls_ = 0; // run() calls
  CudnnAttention cudnn_;
  DeviceBuffer cudnnWorkspace_;
  DeviceBuffer adamwTable_, squaresTable_; // the optimizer's chunks (onDevice)
  std::vector<AdamWChunk> adamwHost_;
  std::vector<SquaresChunk> squaresHost_;
  bool warnedCudnn_ = false;
  bool warnedBiasGrad_ = false; // said once: a bias gradient summed apart
  bool warnedStaging_ = false;  // said once: no memory for the staging
  const bool synchronous_ = synchronousLaunches();
  const GemmPath gemmPath_ = gemmPath();
  const AttentionPath attentionPath_ = attentionPath();
  // Every kernel, copy and library call of this backend runs on this stream (a created
  // one: the legacy default stream cannot be captured). It is a blocking stream, so it
  // is ordered both ways with NCCL's collectives on the legacy default stream.
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Backend> cpu_ = makeCpuBackend();
  WaitWatch watch_;               // the communicator's watchdog over drain()
  cudaEvent_t drained_ = nullptr; // drain()'s mark in the queue
};

} // namespace

int cudaDevices() {
  int count = 0;
  return handled(cudaGetDeviceCount(&count)) == cudaSuccess ? count : 0;
}

Status makeCudaBackend(int device, std::unique_ptr<Backend> &out) {
  try {
    out = std::make_unique<CudaBackend>(device);
    return Status::success();
  } catch (const std::exception &e) {
    return Status::failure(e.what());
  }
}

} // namespace mt
