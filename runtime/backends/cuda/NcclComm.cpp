// The GPU communicator: tensor collectives on device memory through NCCL, on the
// legacy default stream, which the CUDA backend's stream (a blocking one) is ordered
// with both ways: every collective runs after the kernels that produce its input, and
// before those that read its output; so do ring attention's steps (shift: a send and a
// receive in one NCCL group). Scalars, point-to-point messages (pipeline activations
// travel through host memory) and subsets of a group (the tied embedding's stages) go
// through the MPI communicator it wraps.
//
// The watchdog. NCCL's communicators are non-blocking: no call blocks the host, and a
// call still in progress is waited on with the watchdog looking on. Each collective
// leaves an event in the queue behind it. A collective whose peer has stopped hangs in
// the device's queue, so the host meets it where it waits for that queue (the backend's
// waits, watched through Comm::watch): there this communicator checks NCCL's
// asynchronous errors (a peer that died ends the job at once, naming NCCL's error) and
// times how long no collective has finished; past the timeout the MPI communicator's
// roll ends the job, naming the oldest collective still unfinished. The communicators
// are not aborted first: ncclCommAbort frees memory, which waits for the device, whose
// queue may hold a collective of another communicator that never ends; the job's end
// takes the kernels with it.
#include "backends/cuda/DeviceBuffer.h"
#include "backends/cuda/Errors.h"
#include "comm/AxisBlocks.h"
#include "comm/Comm.h"
#include "core/DType.h"
#include "core/Poll.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace mt {
namespace {

constexpr int kBootstrapTag = 32767 - 1;

Status ncclStatus(ncclResult_t code, const char *what) {
  if (code == ncclSuccess)
    return Status::success();
  return Status::failure(cat("nccl: ", what, ": ", ncclGetErrorString(code)));
}

Status cudaStatus(cudaError_t code, const char *what) {
  if (handled(code) == cudaSuccess)
    return Status::success();
  return Status::failure(cat("nccl communicator: ", what, ": ", cudaGetErrorString(code)));
}

/// NCCL's type of each plan dtype, in plan.fbs's order (I8: dropout masks, as bytes).
ncclDataType_t ncclType(plan::DType dtype) {
  static constexpr ncclDataType_t kTypes[] = {ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat16,
                                              ncclInt32,   ncclInt64,   ncclUint8};
  static_assert(std::size(kTypes) == static_cast<size_t>(plan::DType::MAX) + 1);
  return kTypes[static_cast<size_t>(dtype)];
}

/// One strided device-to-device copy (AxisBlocks' reordering on the GPU).
struct DeviceCopy2D {
  cudaError_t error = cudaSuccess;
  void operator()(char *dst, size_t dstPitch, const char *src, size_t srcPitch, size_t width,
                  size_t height) {
    if (error == cudaSuccess)
      error = cudaMemcpy2D(dst, dstPitch, src, srcPitch, width, height,
                           cudaMemcpyDeviceToDevice);
  }
};

/// Reorders `tensor` to or from rank-major `blocks` along `axis` on the device.
cudaError_t reorder(const TensorView &tensor, int axis, int parts, void *blocks, bool toBlocks) {
  DeviceCopy2D copy;
  AxisBlocks(tensor, axis).copy(static_cast<char *>(tensor.data), static_cast<char *>(blocks),
                                parts, toBlocks, std::ref(copy));
  return copy.error;
}

class NcclComm final : public Comm {
public:
  NcclComm(Comm &host, bool singletons) : host_(&host), singletons_(singletons) {
    position_ = host.position();
    timeout_ = host.watchdogSeconds();
    activity_ = host.activity();
  }
  void own(std::unique_ptr<Comm> host) { owned_ = std::move(host); }
  ~NcclComm() override {
    for (ncclComm_t &c : comms_) {
      if (!c)
        continue;
      // Finalizing completes what is in flight, within 10 s; a communicator that cannot
      // is aborted. (Only a run that ended well gets here: a failure ends the job.)
      ncclResult_t state = ncclCommFinalize(c);
      bool late = false;
      pollUntil(
          [&] {
            return state != ncclInProgress || late ||
                   ncclCommGetAsyncError(c, &state) != ncclSuccess || state != ncclInProgress;
          },
          [&](double waited) { late = waited > 10; });
      if (state == ncclSuccess)
        ncclCommDestroy(c);
      else
        ncclCommAbort(c);
    }
    for (const Pending &p : pending_)
      cudaEventDestroy(p.done);
    for (cudaEvent_t e : spare_)
      cudaEventDestroy(e);
    if (drained_)
      cudaEventDestroy(drained_);
  }

  /// One NCCL communicator per group with more than one member (or with singletons_,
  /// per group).
  Status init() {
    for (Group g : {Group::Tensor, Group::Context, Group::Data, Group::Pipeline, Group::Expert,
                    Group::ExpertData}) {
      // The expert groups only under expert parallelism (else ExpertData is Data).
      const bool expert = g == Group::Expert || g == Group::ExpertData;
      if ((size(g) == 1 && !singletons_) || (expert && position_.epSize == 1))
        continue;
      ncclUniqueId id;
      if (rank(g) == 0) {
        if (Status s = ncclStatus(ncclGetUniqueId(&id), "creating a unique id"); !s.ok())
          return s;
        for (int peer = 1; peer < size(g); ++peer)
          if (Status s = host_->send(g, peer, &id, sizeof id, kBootstrapTag); !s.ok())
            return s;
        if (Status s = host_->waitSends(); !s.ok())
          return s;
      } else if (Status s = host_->recv(g, 0, &id, sizeof id, kBootstrapTag); !s.ok()) {
        return s;
      }
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      MT_TRY(settle(g, ncclCommInitRankConfig(&of(g), size(g), id, rank(g), &config),
                    cat("creating the ", groupName(g), "-parallel NCCL communicator")));
    }
    return Status::success();
  }

  Status allReduceSum(Group g, const TensorView &in, const TensorView &out) override {
    if (!of(g))
      return copy(in, out);
    return enqueued(g, ncclAllReduce(in.data, out.data, out.numel(), ncclType(out.dtype), ncclSum,
                                     of(g), 0),
                    "an all-reduce");
  }

  /// A group of one: the result is the input.
  Status copy(const TensorView &in, const TensorView &out) {
    if (in.data == out.data)
      return Status::success();
    return cudaStatus(cudaMemcpy(out.data, in.data, in.bytes(), cudaMemcpyDeviceToDevice),
                      "copying");
  }

  Status allGather(Group g, const TensorView &in, const TensorView &out, int axis) override {
    const int parts = size(g);
    if (!of(g))
      return copy(in, out);
    if (axis == 0)
      return enqueued(g, ncclAllGather(in.data, out.data, in.numel(), ncclType(in.dtype), of(g), 0),
                      "an all-gather");
    void *blocks = nullptr;
    MT_TRY(staging(out.bytes(), blocks));
    MT_TRY(enqueued(g, ncclAllGather(in.data, blocks, in.numel(), ncclType(in.dtype), of(g), 0),
                    "an all-gather"));
    return cudaStatus(reorder(out, axis, parts, blocks, false), "reordering gathered blocks");
  }

  Status reduceScatter(Group g, const TensorView &in, const TensorView &out, int axis) override {
    const int parts = size(g);
    if (!of(g))
      return copy(in, out);
    if (axis == 0)
      return enqueued(g, ncclReduceScatter(in.data, out.data, out.numel(), ncclType(out.dtype),
                                           ncclSum, of(g), 0),
                      "a reduce-scatter");
    void *blocks = nullptr;
    if (Status s = staging(in.bytes(), blocks); !s.ok())
      return s;
    if (Status s = cudaStatus(reorder(in, axis, parts, blocks, true), "ordering blocks"); !s.ok())
      return s;
    return enqueued(g, ncclReduceScatter(blocks, out.data, out.numel(), ncclType(out.dtype),
                                         ncclSum, of(g), 0),
                    "a reduce-scatter");
  }

  Status allReduceSum(Group g, double &value) override { return host_->allReduceSum(g, value); }

  Status allReduceSumAmong(Group g, const std::vector<int> &members,
                           const TensorView &inOut) override {
    std::vector<char> host(inOut.bytes());
    MT_TRY(drain("before copying to the host"));
    if (Status s = cudaStatus(cudaMemcpy(host.data(), inOut.data, host.size(),
                                         cudaMemcpyDeviceToHost),
                              "copying to the host");
        !s.ok())
      return s;
    TensorView onHost = inOut;
    onHost.data = host.data();
    if (Status s = host_->allReduceSumAmong(g, members, onHost); !s.ok())
      return s;
    return cudaStatus(cudaMemcpy(inOut.data, host.data(), host.size(), cudaMemcpyHostToDevice),
                      "copying to the device");
  }

  Status send(Group g, int peer, const void *data, size_t bytes, int tag) override {
    return host_->send(g, peer, data, bytes, tag);
  }
  Status recv(Group g, int peer, void *data, size_t bytes, int tag) override {
    return host_->recv(g, peer, data, bytes, tag);
  }
  Status waitSends() override { return host_->waitSends(); }
  /// Every pair's send and receive in one NCCL group (bytes, device memory).
  Status allToAll(Group g, const void *send, const std::vector<size_t> &sendBytes, void *recv,
                  const std::vector<size_t> &recvBytes) override {
    if (!of(g)) // a group of one
      return cudaStatus(cudaMemcpy(recv, send, sendBytes[0], cudaMemcpyDeviceToDevice), "copying");
    MT_TRY(ncclStatus(ncclGroupStart(), "starting an all-to-all"));
    size_t sent = 0, received = 0;
    ncclResult_t failed = ncclSuccess;
    for (size_t m = 0; m < sendBytes.size(); ++m) {
      const int peer = static_cast<int>(m);
      ncclResult_t a = ncclSuccess, b = ncclSuccess;
      if (sendBytes[m])
        a = ncclSend(static_cast<const char *>(send) + sent, sendBytes[m], ncclUint8, peer, of(g),
                     0);
      if (recvBytes[m])
        b = ncclRecv(static_cast<char *>(recv) + received, recvBytes[m], ncclUint8, peer, of(g), 0);
      for (ncclResult_t part : {a, b})
        if (part != ncclSuccess && part != ncclInProgress && failed == ncclSuccess)
          failed = part;
      sent += sendBytes[m];
      received += recvBytes[m];
    }
    const ncclResult_t ended = ncclGroupEnd();
    if (failed != ncclSuccess)
      return ncclStatus(failed, "an all-to-all");
    return enqueued(g, ended, "an all-to-all");
  }
  /// One NCCL group of the send and the receive, so that every member's send meets its
  /// neighbour's receive whatever the order the members reach it in.
  Status shift(Group g, int to, const void *send, int from, void *recv, size_t bytes,
               int) override {
    if (!of(g)) // a group of one: to and from are this member
      return cudaStatus(cudaMemcpy(recv, send, bytes, cudaMemcpyDeviceToDevice), "copying");
    MT_TRY(ncclStatus(ncclGroupStart(), "starting a ring step"));
    const ncclResult_t sent = ncclSend(send, bytes, ncclUint8, to, of(g), 0);
    const ncclResult_t received = ncclRecv(recv, bytes, ncclUint8, from, of(g), 0);
    const ncclResult_t ended = ncclGroupEnd();
    for (ncclResult_t part : {sent, received})
      if (part != ncclSuccess && part != ncclInProgress)
        return ncclStatus(part, "a ring step");
    return enqueued(g, ended, "a ring step");
  }
  Status gatherOnHost(const std::string &mine, std::vector<std::string> &all) override {
    return host_->gatherOnHost(mine, all);
  }

  void setWatchdog(double seconds) override {
    Comm::setWatchdog(seconds);
    host_->setWatchdog(seconds);
  }
  void setActivity(const std::string &activity) override {
    Comm::setActivity(activity);
    host_->setActivity(activity);
  }

  /// A wait for the device's queue. What can hang there is a collective, so the time
  /// counted is the time since one last finished; a queue with none unfinished holds
  /// only this rank's own kernels, which are not timed (a roll another rank called is
  /// still answered).
  void watch(const std::string &what, double waited) override {
    retireFinished();
    if (pending_.empty())
      return watchHost(what, 0);
    const double stalled = std::min(
        waited, std::chrono::duration<double>(std::chrono::steady_clock::now() - lastRetired_)
                    .count());
    watchHost(cat(what, " (its oldest unfinished collective: ", pending_.front().what, ")"),
              stalled);
  }

private:
  ncclComm_t &of(Group g) { return comms_[static_cast<int>(g)]; }

  /// NCCL's asynchronous errors (a peer that died, a network error) end the job at once,
  /// naming the error; the MPI communicator's watchdog does the rest.
  void watchHost(const std::string &waiting, double waited) {
    for (ncclComm_t c : comms_) {
      ncclResult_t state = ncclSuccess;
      if (c && ncclCommGetAsyncError(c, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress) {
        const std::string detail = ncclGetLastError(c);
        abortAll(cat("NCCL failed in ", activity_, ": ", ncclGetErrorString(state),
                     detail.empty() ? "" : cat(" (", detail, ")"), ", while waiting in ",
                     waiting));
      }
    }
    host_->watch(waiting, waited);
  }

  /// Waits, watched, for a call on a non-blocking communicator that returned before it
  /// was done; the device's queue must not be touched until it is.
  Status settle(Group g, ncclResult_t result, const std::string &what) {
    pollUntil(
        [&] {
          if (result != ncclInProgress)
            return true;
          if (ncclResult_t code = ncclCommGetAsyncError(of(g), &result); code != ncclSuccess)
            result = code;
          return result != ncclInProgress;
        },
        [&](double waited) { watchHost(what, waited); });
    return ncclStatus(result, what.c_str());
  }

  /// Waits, watched, for everything queued so far: before a copy to or from pageable
  /// host memory, which would block the host on the queue.
  Status drain(const char *what) {
    if (!drained_)
      MT_TRY(cudaStatus(cudaEventCreateWithFlags(&drained_, cudaEventDisableTiming),
                        "creating an event"));
    MT_TRY(cudaStatus(cudaEventRecord(drained_, 0), "recording an event"));
    cudaError_t code = cudaSuccess;
    pollUntil([&] { return (code = queryEvent(drained_)) != cudaErrorNotReady; },
              [&](double waited) { watch(cat("the device's queue ", what), waited); });
    return cudaStatus(code, what);
  }

  /// A collective just enqueued on group `g`: once NCCL has taken it, an event behind it
  /// marks when it is done, for the watchdog's message.
  Status enqueued(Group g, ncclResult_t result, const char *kind) {
    const std::string what = cat(kind, " over the ", groupName(g), "-parallel group");
    MT_TRY(settle(g, result, what));
    retireFinished();
    cudaEvent_t done = nullptr;
    if (!spare_.empty()) {
      done = spare_.back();
      spare_.pop_back();
    } else {
      MT_TRY(cudaStatus(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                        "creating an event"));
    }
    pending_.push_back({done, cat(what, " in ", activity_)});
    return cudaStatus(cudaEventRecord(done, 0), "recording an event");
  }

  /// Events are reached in queue order: the finished ones are at the front.
  void retireFinished() {
    while (!pending_.empty() && handled(queryEvent(pending_.front().done)) == cudaSuccess) {
      spare_.push_back(pending_.front().done);
      pending_.pop_front();
      lastRetired_ = std::chrono::steady_clock::now();
    }
  }

  /// Rank-major blocks of a gather or scatter along a non-zero axis: one device buffer,
  /// reused (every use is ordered on the default stream).
  Status staging(size_t bytes, void *&out) {
    if (bytes > staging_.capacity())
      MT_TRY(drain("before freeing a buffer to grow it")); // cudaFree waits for the device
    return cudaStatus(staging_.get(bytes, out), "allocating the staging buffer");
  }

  Comm *host_;
  const bool singletons_;
  std::unique_ptr<Comm> owned_; // host_, once this communicator works
  std::array<ncclComm_t, kGroups> comms_{}; // by Group
  DeviceBuffer staging_;
  struct Pending {
    cudaEvent_t done; // recorded behind the collective
    std::string what;
  };
  std::deque<Pending> pending_; // collectives enqueued and perhaps unfinished, oldest first
  std::chrono::steady_clock::time_point lastRetired_ = std::chrono::steady_clock::now();
  std::vector<cudaEvent_t> spare_;
  cudaEvent_t drained_ = nullptr; // drain()'s mark in the queue
};

} // namespace

Status makeNcclComm(std::unique_ptr<Comm> &comm, bool singletons) {
  auto nccl = std::make_unique<NcclComm>(*comm, singletons);
  if (Status s = nccl->init(); !s.ok()) {
    // The job ends: communicators half made are left to the process's end, rather than
    // finalized against peers that may never come.
    (void)nccl.release();
    return s;
  }
  nccl->own(std::move(comm));
  comm = std::move(nccl);
  return Status::success();
}

} // namespace mt
