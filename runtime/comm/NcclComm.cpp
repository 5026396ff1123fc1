// The GPU communicator: tensor collectives on device memory through NCCL, on the
// stream the CUDA backend's kernels run on (the default stream, so every collective is
// ordered after the kernels that produce its input). Scalars, point-to-point messages
// (pipeline activations travel through host memory) and subsets of a group (the tied
// embedding's stages) go through the MPI communicator it wraps.
#include "backends/cuda/DeviceBuffer.h"
#include "comm/AxisBlocks.h"
#include "comm/Comm.h"
#include "core/DType.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <functional>
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
  if (code == cudaSuccess)
    return Status::success();
  return Status::failure(cat("nccl communicator: ", what, ": ", cudaGetErrorString(code)));
}

ncclDataType_t ncclType(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::F64:
    return ncclFloat64;
  case plan::DType::BF16:
    return ncclBfloat16;
  case plan::DType::F16:
    return ncclFloat16;
  case plan::DType::I32:
    return ncclInt32;
  case plan::DType::I64:
    return ncclInt64;
  case plan::DType::I8:
    return ncclUint8;
  default:
    return ncclFloat32;
  }
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
  explicit NcclComm(Comm &host) : host_(&host) { position_ = host.position(); }
  void own(std::unique_ptr<Comm> host) { owned_ = std::move(host); }
  ~NcclComm() override {
    for (ncclComm_t c : comms_)
      if (c)
        ncclCommDestroy(c);
  }

  /// One NCCL communicator per group with more than one member.
  Status init() {
    for (Group g : {Group::Tensor, Group::Data, Group::Pipeline}) {
      if (size(g) == 1)
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
      if (Status s = ncclStatus(ncclCommInitRank(&of(g), size(g), id, rank(g)),
                                "creating a communicator");
          !s.ok())
        return s;
    }
    return Status::success();
  }

  Status allReduceSum(Group g, const TensorView &in, const TensorView &out) override {
    if (size(g) == 1)
      return copy(in, out);
    return ncclStatus(ncclAllReduce(in.data, out.data, out.numel(), ncclType(out.dtype), ncclSum,
                                    of(g), 0),
                      "all-reduce");
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
    if (parts == 1)
      return copy(in, out);
    if (axis == 0)
      return ncclStatus(ncclAllGather(in.data, out.data, in.numel(), ncclType(in.dtype), of(g), 0),
                        "all-gather");
    void *blocks = nullptr;
    if (Status s = staging(out.bytes(), blocks); !s.ok())
      return s;
    if (Status s = ncclStatus(ncclAllGather(in.data, blocks, in.numel(), ncclType(in.dtype), of(g), 0),
                              "all-gather");
        !s.ok())
      return s;
    return cudaStatus(reorder(out, axis, parts, blocks, false), "reordering gathered blocks");
  }

  Status reduceScatter(Group g, const TensorView &in, const TensorView &out, int axis) override {
    const int parts = size(g);
    if (parts == 1)
      return copy(in, out);
    if (axis == 0)
      return ncclStatus(ncclReduceScatter(in.data, out.data, out.numel(), ncclType(out.dtype),
                                          ncclSum, of(g), 0),
                        "reduce-scatter");
    void *blocks = nullptr;
    if (Status s = staging(in.bytes(), blocks); !s.ok())
      return s;
    if (Status s = cudaStatus(reorder(in, axis, parts, blocks, true), "ordering blocks"); !s.ok())
      return s;
    return ncclStatus(ncclReduceScatter(blocks, out.data, out.numel(), ncclType(out.dtype),
                                        ncclSum, of(g), 0),
                      "reduce-scatter");
  }

  Status allReduceSum(Group g, double &value) override { return host_->allReduceSum(g, value); }

  Status allReduceSumAmong(Group g, const std::vector<int> &members,
                           const TensorView &inOut) override {
    std::vector<char> host(inOut.bytes());
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
  // The watchdog covers what goes through MPI (numbers, pipeline messages) as is. Its
  // NCCL half, for collectives that hang inside a kernel: after each collective, record
  // an event; where the backend would wait on the stream, poll cudaEventQuery and
  // ncclCommGetAsyncError instead, up to the timeout; on a timeout or an error,
  // ncclCommAbort every communicator (which frees the stuck kernels), then call the same
  // MPI roll call to name the stalled ranks. Not built yet: one GPU cannot hang a
  // multi-rank NCCL collective to test it.
  void setWatchdog(double seconds) override { host_->setWatchdog(seconds); }
  void setActivity(const std::string &activity) override { host_->setActivity(activity); }

private:
  ncclComm_t &of(Group g) { return comms_[static_cast<int>(g)]; }

  /// Rank-major blocks of a gather or scatter along a non-zero axis: one device buffer,
  /// reused (every use is ordered on the default stream).
  Status staging(size_t bytes, void *&out) {
    return cudaStatus(staging_.get(bytes, out), "allocating the staging buffer");
  }

  Comm *host_;
  std::unique_ptr<Comm> owned_; // host_, once this communicator works
  std::array<ncclComm_t, 3> comms_{};
  DeviceBuffer staging_;
};

} // namespace

Status makeNcclComm(std::unique_ptr<Comm> &comm) {
  auto nccl = std::make_unique<NcclComm>(*comm);
  if (Status s = nccl->init(); !s.ok())
    return s;
  nccl->own(std::move(comm));
  comm = std::move(nccl);
  return Status::success();
}

} // namespace mt
