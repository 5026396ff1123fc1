// Collectives over the process groups of a plan's rank grid (Megatron's order: tensor
// parallel fastest, then data parallel, then pipeline). The CPU implementation is MPI;
// the CUDA backend's will be NCCL, behind the same interface.
#ifndef MT_RUNTIME_COMM_COMM_H
#define MT_RUNTIME_COMM_COMM_H

#include "core/Status.h"
#include "core/Tensor.h"

#include <memory>

namespace mt {

enum class Group { Tensor, Data };

/// Where this process sits in the grid.
struct GridPosition {
  int tpSize = 1, dpSize = 1;
  int tpRank = 0, dpRank = 0;
  int worldRank() const { return dpRank * tpSize + tpRank; }
  int worldSize() const { return tpSize * dpSize; }
};

class Comm {
public:
  virtual ~Comm() = default;
  const GridPosition &position() const { return position_; }
  int rank(Group g) const { return g == Group::Tensor ? position_.tpRank : position_.dpRank; }
  int size(Group g) const { return g == Group::Tensor ? position_.tpSize : position_.dpSize; }

  /// out = Σ over the group of in (in and out may alias).
  virtual Status allReduceSum(Group group, const TensorView &in, const TensorView &out) = 0;
  /// out concatenates every member's in along `axis`, in rank order.
  virtual Status allGather(Group group, const TensorView &in, const TensorView &out,
                           int axis) = 0;
  /// out is this member's block, along `axis`, of Σ over the group of in.
  virtual Status reduceScatter(Group group, const TensorView &in, const TensorView &out,
                               int axis) = 0;
  /// Σ over the group of a host number (losses, norms).
  virtual double allReduceSum(Group group, double value) = 0;

protected:
  GridPosition position_;
};

/// One process: every group has one member.
std::unique_ptr<Comm> makeLocalComm();

/// MPI_COMM_WORLD split into the plan's grid; fails if the world does not match.
Status makeMpiComm(int tpSize, int dpSize, std::unique_ptr<Comm> &out);

/// Aborts every rank of the job (after a rank's own error), naming this one.
[[noreturn]] void abortAll(const std::string &message);

/// Whether a launcher (mpirun, srun) started this process as one of several.
bool launchedByMpi();

} // namespace mt

#endif
