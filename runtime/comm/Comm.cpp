#include "comm/Comm.h"
#include "plan/PlanReader.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace mt {
namespace {

size_t viewBytes(const TensorView &v) { return dtypeBytes(v.dtype) * v.numel(); }

/// A tensor [outer, axis, inner] seen as `parts` blocks along `axis`: block p holds
/// rows [p·axis/parts, (p+1)·axis/parts) of every outer slice.
struct AxisBlocks {
  size_t outer = 1, inner = 1, axisLength, elementBytes;
  AxisBlocks(const TensorView &t, int axis) : axisLength(t.shape[axis]) {
    elementBytes = dtypeBytes(t.dtype);
    for (int i = 0; i < axis; ++i)
      outer *= t.shape[i];
    for (int i = axis + 1; i < t.rank; ++i)
      inner *= t.shape[i];
  }
  /// Copies between the tensor's layout and rank-major blocks, one block per member.
  void toBlocks(const char *tensor, char *blocks, int parts) const {
    size_t blockAxis = axisLength / parts, row = inner * elementBytes;
    for (int p = 0; p < parts; ++p)
      for (size_t o = 0; o < outer; ++o)
        std::memcpy(blocks + ((p * outer + o) * blockAxis) * row,
                    tensor + (o * axisLength + p * blockAxis) * row, blockAxis * row);
  }
  void fromBlocks(const char *blocks, char *tensor, int parts) const {
    size_t blockAxis = axisLength / parts, row = inner * elementBytes;
    for (int p = 0; p < parts; ++p)
      for (size_t o = 0; o < outer; ++o)
        std::memcpy(tensor + (o * axisLength + p * blockAxis) * row,
                    blocks + ((p * outer + o) * blockAxis) * row, blockAxis * row);
  }
};

class LocalComm final : public Comm {
public:
  Status allReduceSum(Group, const TensorView &in, const TensorView &out) override {
    if (in.data != out.data)
      std::memcpy(out.data, in.data, viewBytes(in));
    return Status::success();
  }
  Status allGather(Group, const TensorView &in, const TensorView &out, int) override {
    if (in.data != out.data)
      std::memmove(out.data, in.data, viewBytes(in));
    return Status::success();
  }
  Status reduceScatter(Group g, const TensorView &in, const TensorView &out, int) override {
    return allReduceSum(g, in, out);
  }
  double allReduceSum(Group, double value) override { return value; }
};

MPI_Datatype mpiType(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::F64:
    return MPI_DOUBLE;
  case plan::DType::I32:
    return MPI_INT32_T;
  case plan::DType::I64:
    return MPI_INT64_T;
  default:
    return MPI_FLOAT;
  }
}

class MpiComm final : public Comm {
public:
  MpiComm(GridPosition position, MPI_Comm tensor, MPI_Comm data)
      : tensor_(tensor), data_(data) {
    position_ = position;
  }
  ~MpiComm() override {
    MPI_Comm_free(&tensor_);
    MPI_Comm_free(&data_);
    MPI_Finalize();
  }

  MPI_Comm of(Group g) const { return g == Group::Tensor ? tensor_ : data_; }

  Status check(int code, const char *what) {
    if (code == MPI_SUCCESS)
      return Status::success();
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    return Status::failure(std::string(what) + " failed: " + std::string(text, length));
  }

  /// MPI counts are ints: larger all-reduces go in chunks; the others refuse a per-rank
  /// block above the limit.
  static constexpr int64_t kMaxCount = std::numeric_limits<int>::max();
  static Status fits(int64_t count, const char *what) {
    if (count <= kMaxCount)
      return Status::success();
    return Status::failure(std::string(what) + " of " + std::to_string(count) +
                           " elements exceeds MPI's count limit");
  }

  Status allReduceSum(Group g, const TensorView &in, const TensorView &out) override {
    const size_t element = dtypeBytes(out.dtype);
    for (int64_t first = 0; first < out.numel(); first += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, out.numel() - first));
      char *recv = static_cast<char *>(out.data) + element * first;
      const void *send = in.data == out.data
                             ? MPI_IN_PLACE
                             : static_cast<const char *>(in.data) + element * first;
      if (Status s = check(MPI_Allreduce(send, recv, count, mpiType(out.dtype), MPI_SUM, of(g)),
                           "all-reduce");
          !s.ok())
        return s;
    }
    return Status::success();
  }

  Status allGather(Group g, const TensorView &in, const TensorView &out, int axis) override {
    if (Status s = fits(in.numel(), "all-gather"); !s.ok())
      return s;
    const int parts = size(g);
    const int count = static_cast<int>(in.numel());
    if (axis == 0) {
      // `in` may already sit at this rank's place in `out` (a shard of a flat store).
      const char *mine = static_cast<const char *>(out.data) + rank(g) * viewBytes(in);
      const void *send = in.data == mine ? MPI_IN_PLACE : in.data;
      return check(MPI_Allgather(send, count, mpiType(in.dtype), out.data, count,
                                 mpiType(out.dtype), of(g)),
                   "all-gather");
    }
    std::vector<char> blocks(viewBytes(out));
    if (Status s = check(MPI_Allgather(in.data, count, mpiType(in.dtype), blocks.data(), count,
                                       mpiType(out.dtype), of(g)),
                         "all-gather");
        !s.ok())
      return s;
    AxisBlocks(out, axis).fromBlocks(blocks.data(), static_cast<char *>(out.data), parts);
    return Status::success();
  }

  Status reduceScatter(Group g, const TensorView &in, const TensorView &out, int axis) override {
    if (Status s = fits(out.numel(), "reduce-scatter"); !s.ok())
      return s;
    const int parts = size(g);
    const int count = static_cast<int>(out.numel());
    const void *send = in.data;
    std::vector<char> blocks;
    if (axis != 0) {
      blocks.resize(viewBytes(in));
      AxisBlocks(in, axis).toBlocks(static_cast<const char *>(in.data), blocks.data(), parts);
      send = blocks.data();
    }
    return check(MPI_Reduce_scatter_block(send, out.data, count, mpiType(out.dtype), MPI_SUM,
                                          of(g)),
                 "reduce-scatter");
  }

  double allReduceSum(Group g, double value) override {
    double sum = 0;
    MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, of(g));
    return sum;
  }

private:
  MPI_Comm tensor_, data_;
};

} // namespace

std::unique_ptr<Comm> makeLocalComm() { return std::make_unique<LocalComm>(); }

bool launchedByMpi() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name))
      return true;
  return false;
}

Status makeMpiComm(int tpSize, int dpSize, std::unique_ptr<Comm> &out) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    MPI_Init(nullptr, nullptr);
  // Errors come back as codes, so a rank can report its own failure and abort all.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (world != tpSize * dpSize) {
    if (rank == 0)
      std::fprintf(stderr, "mtrun: the plan is for %d ranks (tp %d x dp %d), but %d are running\n",
                   tpSize * dpSize, tpSize, dpSize, world);
    MPI_Finalize();
    return Status::failure("world size does not match the plan");
  }
  GridPosition p;
  p.tpSize = tpSize;
  p.dpSize = dpSize;
  p.tpRank = rank % tpSize;
  p.dpRank = rank / tpSize;
  MPI_Comm tensor, data;
  MPI_Comm_split(MPI_COMM_WORLD, p.dpRank, p.tpRank, &tensor);
  MPI_Comm_split(MPI_COMM_WORLD, p.tpRank, p.dpRank, &data);
  out = std::make_unique<MpiComm>(p, tensor, data);
  return Status::success();
}

void abortAll(const std::string &message) {
  int initialized = 0, rank = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "mtrun: rank %d: %s\n", rank, message.c_str());
  std::fflush(stderr);
  if (initialized)
    MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

} // namespace mt
