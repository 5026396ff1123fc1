// Collectives over the process groups of a plan's rank grid (Megatron's order: tensor
// parallel fastest, then context parallel, then data parallel, then pipeline). One process needs no
// library (makeLocalComm); several ranks talk through MPI, a plugin loaded only then
// (comm/MpiComm.cpp), and, on GPUs, through NCCL behind the same interface.
#ifndef MT_RUNTIME_COMM_COMM_H
#define MT_RUNTIME_COMM_COMM_H

#include "core/Status.h"
#include "core/Tensor.h"

#include <memory>
#include <string>
#include <vector>

namespace mt {

/// The groups of the grid. Data is Megatron's data-parallel group with context
/// parallelism folded in (dp × cp ranks): the ranks that reduce gradients and share the
/// distributed optimizer's state. Context is the cp ranks that hold one sequence between
/// them. Which micro-batches a rank reads follows its place in the data-parallel axis
/// alone (GridPosition::dpRank): the ranks of a context group read the same ones.
/// Expert is the ep ranks that share a mixture of experts' experts and send each other
/// tokens: ep consecutive ranks of Data; ExpertData the ranks of Data holding the same
/// experts, which reduce those experts' gradients (Megatron's expert-data-parallel
/// group).
enum class Group { Tensor, Context, Data, Pipeline, Expert, ExpertData };
inline constexpr int kGroups = 6;

/// A group's name in messages ("the tensor-parallel group").
inline const char *groupName(Group g) {
  static constexpr const char *kNames[] = {"tensor",   "context", "data",
                                           "pipeline", "expert",  "expert-data"};
  static_assert(sizeof kNames / sizeof kNames[0] == kGroups, "a name for every group");
  return kNames[static_cast<int>(g)];
}

/// The grid's sizes: tensor, context, data and pipeline parallel; ep, the expert-parallel
/// ranks among Data's (dividing dp × cp).
struct GridShape {
  int tp = 1, cp = 1, dp = 1, pp = 1, ep = 1;
  int ranks() const { return tp * cp * dp * pp; }
};

/// Where this process sits in the grid: tensor parallel fastest, then context, then
/// data, then pipeline.
struct GridPosition {
  int tpSize = 1, cpSize = 1, dpSize = 1, ppSize = 1, epSize = 1;
  int tpRank = 0, cpRank = 0, dpRank = 0, ppRank = 0;
  int worldRank() const { return ((ppRank * dpSize + dpRank) * cpSize + cpRank) * tpSize + tpRank; }
  int worldSize() const { return tpSize * cpSize * dpSize * ppSize; }
  /// The position from a world rank of a grid of `shape`.
  static GridPosition of(const GridShape &shape, int rank) {
    GridPosition p;
    p.tpSize = shape.tp, p.cpSize = shape.cp, p.dpSize = shape.dp, p.ppSize = shape.pp;
    p.epSize = shape.ep;
    p.tpRank = rank % shape.tp;
    p.cpRank = rank / shape.tp % shape.cp;
    p.dpRank = rank / (shape.tp * shape.cp) % shape.dp;
    p.ppRank = rank / (shape.tp * shape.cp * shape.dp);
    return p;
  }
};

class Comm {
public:
  virtual ~Comm() = default;
  const GridPosition &position() const { return position_; }
  int rank(Group g) const {
    const GridPosition &p = position_;
    switch (g) {
    case Group::Tensor:
      return p.tpRank;
    case Group::Context:
      return p.cpRank;
    case Group::Data:
      return p.dpRank * p.cpSize + p.cpRank;
    case Group::Pipeline:
      return p.ppRank;
    case Group::Expert:
      return rank(Group::Data) % p.epSize;
    case Group::ExpertData:
      return rank(Group::Data) / p.epSize;
    }
    return 0;
  }
  int size(Group g) const {
    const GridPosition &p = position_;
    switch (g) {
    case Group::Tensor:
      return p.tpSize;
    case Group::Context:
      return p.cpSize;
    case Group::Data:
      return p.dpSize * p.cpSize;
    case Group::Pipeline:
      return p.ppSize;
    case Group::Expert:
      return p.epSize;
    case Group::ExpertData:
      return p.dpSize * p.cpSize / p.epSize;
    }
    return 1;
  }

  /// out = Σ over the group of in (in and out may alias).
  virtual Status allReduceSum(Group group, const TensorView &in, const TensorView &out) = 0;
  /// out concatenates every member's in along `axis`, in rank order.
  virtual Status allGather(Group group, const TensorView &in, const TensorView &out,
                           int axis) = 0;
  /// out is this member's block, along `axis`, of Σ over the group of in. Along axis 0,
  /// out may be in's own block of this member (in place; the rest of in is then left
  /// undefined).
  virtual Status reduceScatter(Group group, const TensorView &in, const TensorView &out,
                               int axis) = 0;
  /// value = Σ over the group of value, a host number (losses, norms).
  virtual Status allReduceSum(Group group, double &value) = 0;
  /// value = Σ over every rank of the world: over each group in turn (Data holds the
  /// context-parallel ranks too).
  Status allReduceSumWorld(double &value) {
    for (Group group : {Group::Tensor, Group::Data, Group::Pipeline})
      MT_TRY(allReduceSum(group, value));
    return Status::success();
  }
  /// Σ over the listed members of the group (this rank among them): a parameter that
  /// several pipeline stages hold, such as the tied embedding.
  virtual Status allReduceSumAmong(Group group, const std::vector<int> &members,
                                   const TensorView &inOut) = 0;
  /// Every member sends sendBytes[m] bytes to each member m, from `send` in member order,
  /// and receives recvBytes[m] bytes from each, into `recv` in member order; in the
  /// memory the backend computes in (the device's under NCCL). Done for what the backend
  /// runs next, as shift() is.
  virtual Status allToAll(Group group, const void *send, const std::vector<size_t> &sendBytes,
                          void *recv, const std::vector<size_t> &recvBytes) = 0;
  /// Point to point within a group. A send returns at once (the bytes are copied);
  /// waitSends() completes them. A receive waits for its message.
  virtual Status send(Group group, int peer, const void *data, size_t bytes, int tag) = 0;
  virtual Status recv(Group group, int peer, void *data, size_t bytes, int tag) = 0;
  virtual Status waitSends() = 0;
  /// A step of a ring within a group: `send` goes to member `to` while `recv` arrives
  /// from member `from`, `bytes` each, in the memory the backend computes in (the
  /// device's under NCCL). Done for what the backend runs next: on the host the receive
  /// has arrived; on a device the exchange is queued before it.
  virtual Status shift(Group group, int to, const void *send, int from, void *recv, size_t bytes,
                       int tag) {
    MT_TRY(this->send(group, to, send, bytes, tag));
    return this->recv(group, from, recv, bytes, tag);
  }
  /// Every rank on this host (under this running kernel: the ranks that share its CPUs)
  /// gives `mine`; `all` holds them in rank order, this rank's among them. One process:
  /// its own.
  virtual Status gatherOnHost(const std::string &mine, std::vector<std::string> &all) {
    all = {mine};
    return Status::success();
  }

  /// The watchdog: a wait for a collective or a message that lasts `seconds` (0: wait
  /// forever) calls a roll instead: every rank then waiting answers, and the job ends
  /// with a message naming the activity (setActivity), what this rank waited in, and the
  /// ranks that did not answer (stopped, or busy outside any collective).
  virtual void setWatchdog(double seconds) { timeout_ = seconds; }
  /// What the caller is doing ("step 12"), for the watchdog's message.
  virtual void setActivity(const std::string &activity) { activity_ = activity; }
  /// The watchdog over a wait outside the communicator's own calls (the host waiting for
  /// the device's queue, where NCCL's collectives run): called every few milliseconds of
  /// it with the seconds it has made no progress. Under several ranks, past the timeout
  /// it calls a roll as above, and it answers a roll another rank called; either ends
  /// the job. Otherwise it returns. One process has no collective to wait for: nothing.
  virtual void watch(const std::string &what, double waited) {
    (void)what;
    (void)waited;
  }
  double watchdogSeconds() const { return timeout_; }
  const std::string &activity() const { return activity_; }

protected:
  GridPosition position_;
  double timeout_ = 0;
  std::string activity_ = "starting";
};

/// One process: every group has one member.
std::unique_ptr<Comm> makeLocalComm();

/// MPI_COMM_WORLD split into the plan's grid, through the MPI plugin (libmtc_mpi.so,
/// beside the executable or in ../lib; MTC_MPI_PLUGIN overrides); fails, saying why, if
/// the plugin or its MPI library cannot be loaded or the world does not match.
Status makeMpiComm(const GridShape &shape, std::unique_ptr<Comm> &out);

/// Wraps `comm` (MPI): collectives on device memory through NCCL, one communicator per
/// group of the grid (its unique id sent from the group's first rank over `comm`);
/// scalars, point-to-point messages and subsets of a group still go through `comm`. On
/// failure `comm` is left as it was. `singletons`: a communicator for groups of one too,
/// so that one GPU exercises NCCL (tests).
Status makeNcclComm(std::unique_ptr<Comm> &comm, bool singletons = false);

/// Aborts every rank of the job (after a rank's own error), naming this one.
[[noreturn]] void abortAll(const std::string &message);

/// Whether a launcher (mpirun, srun) started this process as one of several.
bool launchedByMpi();

} // namespace mt

#endif
