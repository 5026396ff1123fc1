// The MPI communicator, built as a plugin (libmtc_mpi.so) that mtrun loads only when a
// launcher (mpirun, srun) started it as one of several ranks: a one-process run needs no
// MPI library, so the runtime travels to machines that have none (scripts/bundle.sh).
#include "comm/AxisBlocks.h"
#include "comm/Comm.h"
#include "comm/MpiPlugin.h"
#include "core/Half.h"
#include "core/Poll.h"

#include <array>
#include <mpi.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <list>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace mt {
namespace {

/// Row by row on the host.
void hostCopy2D(char *dst, size_t dstPitch, const char *src, size_t srcPitch, size_t width,
                size_t height) {
  for (size_t r = 0; r < height; ++r)
    std::memcpy(dst + r * dstPitch, src + r * srcPitch, width);
}

/// MPI's type of each plan dtype, in plan.fbs's order: 16-bit floats move as their bits
/// (the communicator sums them itself), I8 (dropout masks) as bytes.
MPI_Datatype mpiType(plan::DType dtype) {
  static const MPI_Datatype kTypes[] = {MPI_FLOAT,   MPI_DOUBLE,  MPI_UINT16_T, MPI_UINT16_T,
                                        MPI_INT32_T, MPI_INT64_T, MPI_UINT8_T};
  static_assert(std::size(kTypes) == static_cast<size_t>(plan::DType::MAX) + 1);
  return kTypes[static_cast<size_t>(dtype)];
}

/// Sums of 16-bit floats, which MPI does not know: each pair is added in f32 and rounded
/// once, as NCCL does.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void sumHalves(void *in, void *inOut, int *count, MPI_Datatype *) {
  const uint16_t *a = static_cast<const uint16_t *>(in);
  uint16_t *b = static_cast<uint16_t *>(inOut);
  for (int i = 0; i < *count; ++i)
    b[i] = Narrow(Widen(a[i]) + Widen(b[i]));
}

/// One rank's answer to a roll call: who it is and what it waits in.
struct RollCallAnswer {
  int32_t rank;
  char waiting[1020];
};
constexpr int kRollCallTag = 31000;

class MpiComm final : public Comm {
public:
  MpiComm(GridPosition position, const std::array<MPI_Comm, kGroups> &groups, MPI_Comm watch)
      : groups_(groups), watch_(watch) {
    position_ = position;
    MPI_Op_create(&sumHalves<bf16ToFloat, floatToBf16>, /*commute=*/1, &sumBf16_);
    MPI_Op_create(&sumHalves<f16ToFloat, floatToF16>, /*commute=*/1, &sumF16_);
  }

  MPI_Op sumOf(plan::DType dtype) const {
    return dtype == plan::DType::BF16 ? sumBf16_ : dtype == plan::DType::F16 ? sumF16_ : MPI_SUM;
  }
  ~MpiComm() override {
    (void)waitSends();
    for (auto &entry : subgroups_)
      if (entry.second != MPI_COMM_NULL)
        MPI_Comm_free(&entry.second);
    for (MPI_Comm &group : groups_)
      MPI_Comm_free(&group);
    MPI_Comm_free(&watch_);
    MPI_Op_free(&sumBf16_);
    MPI_Op_free(&sumF16_);
    MPI_Finalize();
  }

  MPI_Comm of(Group g) const { return groups_[static_cast<int>(g)]; }

  Status allReduceSumAmong(Group g, const std::vector<int> &members,
                           const TensorView &inOut) override {
    auto key = std::make_pair(static_cast<int>(g), members);
    auto it = subgroups_.find(key);
    if (it == subgroups_.end()) {
      // Collective over the members only: the others never call it.
      MPI_Group all, some;
      MPI_Comm_group(of(g), &all);
      MPI_Group_incl(all, static_cast<int>(members.size()), members.data(), &some);
      MPI_Comm comm = MPI_COMM_NULL;
      int code = MPI_Comm_create_group(of(g), some, /*tag=*/7, &comm);
      MPI_Group_free(&some);
      MPI_Group_free(&all);
      if (Status s = check(code, "creating a subgroup"); !s.ok())
        return s;
      it = subgroups_.emplace(key, comm).first;
    }
    MPI_Request request;
    MT_TRY(check(MPI_Iallreduce(MPI_IN_PLACE, inOut.data, static_cast<int>(inOut.numel()),
                                mpiType(inOut.dtype), sumOf(inOut.dtype), it->second, &request),
                 "all-reduce among stages"));
    return wait(request, "an all-reduce among the pipeline stages that share a parameter");
  }

  Status allToAll(Group g, const void *send, const std::vector<size_t> &sendBytes, void *recv,
                  const std::vector<size_t> &recvBytes) override {
    const size_t members = sendBytes.size();
    std::vector<int> sendCounts(members), sendAt(members), recvCounts(members), recvAt(members);
    size_t sent = 0, received = 0;
    for (size_t m = 0; m < members; ++m) {
      sendAt[m] = static_cast<int>(sent);
      recvAt[m] = static_cast<int>(received);
      sendCounts[m] = static_cast<int>(sendBytes[m]);
      recvCounts[m] = static_cast<int>(recvBytes[m]);
      sent += sendBytes[m];
      received += recvBytes[m];
      if (sent > static_cast<size_t>(kMaxCount) || received > static_cast<size_t>(kMaxCount))
        return fits(static_cast<int64_t>(std::max(sent, received)), "all-to-all");
    }
    MPI_Request request;
    MT_TRY(check(MPI_Ialltoallv(send, sendCounts.data(), sendAt.data(), MPI_BYTE, recv,
                                recvCounts.data(), recvAt.data(), MPI_BYTE, of(g), &request),
                 "all-to-all"));
    return wait(request, "an all-to-all");
  }

  Status send(Group g, int peer, const void *data, size_t bytes, int tag) override {
    if (bytes > static_cast<size_t>(kMaxCount))
      return fits(static_cast<int64_t>(bytes), "send");
    // Sends already delivered give their copies back, so at most the messages still in
    // flight are held.
    for (auto it = pending_.begin(); it != pending_.end();) {
      int done = 0;
      if (Status s = check(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "send"); !s.ok())
        return s;
      it = done ? pending_.erase(it) : std::next(it);
    }
    pending_.emplace_back();
    Pending &p = pending_.back();
    p.bytes.assign(static_cast<const char *>(data), static_cast<const char *>(data) + bytes);
    return check(MPI_Isend(p.bytes.data(), static_cast<int>(bytes), MPI_BYTE, peer, tag, of(g),
                           &p.request),
                 "send");
  }

  Status recv(Group g, int peer, void *data, size_t bytes, int tag) override {
    if (bytes > static_cast<size_t>(kMaxCount))
      return fits(static_cast<int64_t>(bytes), "receive");
    MPI_Status status;
    MPI_Request request;
    MT_TRY(check(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, of(g), &request),
                 "receive"));
    MT_TRY(wait(request, cat("a message from ", groupName(g), "-parallel rank ", peer), &status));
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (static_cast<size_t>(count) != bytes)
      return Status::failure("received " + std::to_string(count) + " bytes from rank " +
                             std::to_string(peer) + ", expected " + std::to_string(bytes));
    return Status::success();
  }

  Status waitSends() override {
    Status status = Status::success();
    for (Pending &p : pending_)
      if (Status s = wait(p.request, "a send's delivery"); !s.ok())
        status = s;
    pending_.clear();
    return status;
  }

  /// Over the world, keeping the ranks whose running kernel is this one's (its boot id):
  /// the ones that share its CPUs, whatever their host names or network namespaces.
  Status gatherOnHost(const std::string &mine, std::vector<std::string> &all) override {
    const std::string host = bootId() + '\n', tagged = host + mine;
    int ranks = 0, bytes = static_cast<int>(tagged.size());
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    std::vector<int> sizes(ranks), offsets(ranks);
    MT_TRY(check(MPI_Allgather(&bytes, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD),
                 "gathering sizes from every rank"));
    int total = 0;
    for (int r = 0; r < ranks; ++r) {
      offsets[r] = total;
      total += sizes[r];
    }
    std::string joined(total, '\0');
    MT_TRY(check(MPI_Allgatherv(tagged.data(), bytes, MPI_BYTE, joined.data(), sizes.data(),
                                offsets.data(), MPI_BYTE, MPI_COMM_WORLD),
                 "gathering from every rank"));
    all.clear();
    for (int r = 0; r < ranks; ++r)
      if (joined.compare(offsets[r], host.size(), host) == 0)
        all.push_back(joined.substr(offsets[r] + host.size(), sizes[r] - host.size()));
    return Status::success();
  }

  /// What tells this kernel from others: Linux's boot id, else the host name.
  static std::string bootId() {
    std::string id;
    if (FILE *f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
      char line[64] = {};
      if (std::fgets(line, sizeof line, f))
        id = line;
      std::fclose(f);
    }
    while (!id.empty() && (id.back() == '\n' || id.back() == ' '))
      id.pop_back();
    if (id.empty()) {
      char name[256] = {};
      gethostname(name, sizeof name - 1);
      id = name;
    }
    return id;
  }

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
      MPI_Request request;
      MT_TRY(check(MPI_Iallreduce(send, recv, count, mpiType(out.dtype), sumOf(out.dtype), of(g),
                                  &request),
                   "all-reduce"));
      MT_TRY(wait(request, cat("an all-reduce over the ", groupName(g), "-parallel group")));
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
      const char *mine = static_cast<const char *>(out.data) + rank(g) * in.bytes();
      const void *send = in.data == mine ? MPI_IN_PLACE : in.data;
      MPI_Request request;
      MT_TRY(check(MPI_Iallgather(send, count, mpiType(in.dtype), out.data, count,
                                  mpiType(out.dtype), of(g), &request),
                   "all-gather"));
      return wait(request, cat("an all-gather over the ", groupName(g), "-parallel group"));
    }
    std::vector<char> blocks(out.bytes());
    MPI_Request request;
    MT_TRY(check(MPI_Iallgather(in.data, count, mpiType(in.dtype), blocks.data(), count,
                                mpiType(out.dtype), of(g), &request),
                 "all-gather"));
    MT_TRY(wait(request, cat("an all-gather over the ", groupName(g), "-parallel group")));
    AxisBlocks(out, axis).copy(static_cast<char *>(out.data), blocks.data(), parts, false,
                               hostCopy2D);
    return Status::success();
  }

  Status reduceScatter(Group g, const TensorView &in, const TensorView &out, int axis) override {
    if (Status s = fits(out.numel(), "reduce-scatter"); !s.ok())
      return s;
    const int parts = size(g);
    const int count = static_cast<int>(out.numel());
    if (axis == 0 && out.data == static_cast<char *>(in.data) + rank(g) * out.bytes()) {
      // In place: MPI leaves the sum at the front of the buffer, then it moves to this
      // member's block.
      MPI_Request request;
      MT_TRY(check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, in.data, count, mpiType(out.dtype),
                                             sumOf(out.dtype), of(g), &request),
                   "reduce-scatter"));
      MT_TRY(wait(request, cat("a reduce-scatter over the ", groupName(g), "-parallel group")));
      if (out.data != in.data)
        std::memcpy(out.data, in.data, out.bytes());
      return Status::success();
    }
    const void *send = in.data;
    std::vector<char> blocks;
    if (axis != 0) {
      blocks.resize(in.bytes());
      AxisBlocks(in, axis).copy(static_cast<char *>(in.data), blocks.data(), parts, true,
                                hostCopy2D);
      send = blocks.data();
    }
    MPI_Request request;
    MT_TRY(check(MPI_Ireduce_scatter_block(send, out.data, count, mpiType(out.dtype),
                                           sumOf(out.dtype), of(g), &request),
                 "reduce-scatter"));
    return wait(request, cat("a reduce-scatter over the ", groupName(g), "-parallel group"));
  }

  Status allReduceSum(Group g, double &value) override {
    MPI_Request request;
    MT_TRY(check(MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, of(g), &request),
                 "all-reduce of a number"));
    return wait(request, cat("an all-reduce of a number over the ", groupName(g),
                             "-parallel group"));
  }

  /// Completes `request`; with a watchdog, fails after timeout_ seconds without progress,
  /// or as soon as another rank's watchdog calls the roll, joining it.
  Status wait(MPI_Request &request, const std::string &what,
              MPI_Status *status = MPI_STATUS_IGNORE) {
    if (timeout_ <= 0)
      return check(MPI_Wait(&request, status), what.c_str());
    int code = MPI_SUCCESS, done = 0;
    pollUntil([&] { return (code = MPI_Test(&request, &done, status)) != MPI_SUCCESS || done; },
              [&](double waited) { watch(what, waited); });
    return check(code, what.c_str());
  }

  void watch(const std::string &what, double waited) override {
    if (timeout_ <= 0)
      return;
    int called = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, watch_, &called, MPI_STATUS_IGNORE);
    if (waited > timeout_ || called)
      rollCall(what, waited, called != 0);
  }

  /// Tells every rank what this one waits in, gathers the answers of the others that
  /// are waiting too, and names the ones that never answer.
  [[noreturn]] void rollCall(const std::string &what, double waited, bool answering) {
    int world = 0, me = 0;
    MPI_Comm_size(watch_, &world);
    MPI_Comm_rank(watch_, &me);
    static RollCallAnswer mine; // still being sent when the job aborts
    mine.rank = me;
    std::snprintf(mine.waiting, sizeof mine.waiting, "%s: %s", activity_.c_str(), what.c_str());
    static std::vector<MPI_Request> sends;
    sends.assign(world, MPI_REQUEST_NULL);
    for (int r = 0; r < world; ++r)
      if (r != me)
        MPI_Isend(&mine, sizeof mine, MPI_BYTE, r, kRollCallTag, watch_, &sends[r]);
    std::map<int, std::string> answers;
    const double grace = std::clamp(timeout_ / 2, 1.0, 10.0);
    const auto start = std::chrono::steady_clock::now();
    while (static_cast<int>(answers.size()) < world - 1 &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
               grace) {
      int found = 0;
      MPI_Status probed;
      MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, watch_, &found, &probed);
      if (!found) {
        timespec pause{0, 1000000}; // 1 ms
        nanosleep(&pause, nullptr);
        continue;
      }
      RollCallAnswer answer;
      MPI_Recv(&answer, sizeof answer, MPI_BYTE, probed.MPI_SOURCE, kRollCallTag, watch_,
               MPI_STATUS_IGNORE);
      answer.waiting[sizeof answer.waiting - 1] = '\0';
      answers[probed.MPI_SOURCE] = answer.waiting;
    }
    std::string silent;
    for (int r = 0; r < world; ++r)
      if (r != me && !answers.count(r))
        silent += cat(silent.empty() ? "" : ", ", r);
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f s", waited);
    if (answering) {
      // The rank that called the roll names the stalled ones and ends the job; this one
      // waits for that, rather than end it first with less to say.
      timespec pause{static_cast<time_t>(2 * grace + 2), 0};
      while (nanosleep(&pause, &pause) != 0 && errno == EINTR) // a caught signal: wait on
        ;
      abortJob(me, cat("in ", activity_, ", another rank's watchdog called a roll while this ",
                       "one waited ", seconds, " in ", what, ", and did not end the job"));
    }
    std::string message = cat("no progress for ", seconds, " (--collective-timeout ", timeout_,
                              ") in ", activity_, ", waiting in ", what);
    message += silent.empty()
                   ? cat("; every rank answered, each waiting: a collective mismatch or a "
                         "deadlock")
                   : cat("; rank(s) ", silent,
                         " did not answer (stopped, or busy outside any collective)");
    int listed = 0;
    for (const auto &[rank, waiting] : answers)
      if (listed++ < 4)
        message += cat("; rank ", rank, " waits in ", waiting);
    abortJob(me, message);
  }

  /// Ends the job from inside a wait: returning would unwind past buffers MPI still
  /// writes into (the requests the watchdog gave up on), and past a checkpoint thread
  /// the caller would join first.
  [[noreturn]] static void abortJob(int rank, const std::string &message) {
    std::fprintf(stderr, "mtrun: rank %d: %s\n", rank, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

private:
  struct Pending {
    std::vector<char> bytes;
    MPI_Request request;
  };
  std::array<MPI_Comm, kGroups> groups_; // by Group
  MPI_Comm watch_; // the watchdog's roll calls, apart from everything else
  MPI_Op sumBf16_ = MPI_OP_NULL, sumF16_ = MPI_OP_NULL;
  std::list<Pending> pending_; // stable addresses while MPI holds them
  std::map<std::pair<int, std::vector<int>>, MPI_Comm> subgroups_;
};

/// MPI_COMM_WORLD split into the plan's grid; fails if the world does not match.
Status makeWorld(const GridShape &shape, std::unique_ptr<Comm> &out) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    MPI_Init(nullptr, nullptr);
  // Errors come back as codes, so a rank can report its own failure and abort all.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (world != shape.ranks()) {
    if (rank == 0)
      std::fprintf(stderr,
                   "mtrun: the plan is for %d ranks (tp %d x cp %d x dp %d x pp %d), but %d are "
                   "running\n",
                   shape.ranks(), shape.tp, shape.cp, shape.dp, shape.pp, world);
    MPI_Finalize();
    return Status::failure(""); // said once, by rank 0
  }
  const GridPosition p = GridPosition::of(shape, rank);
  // Each group: the ranks that agree on every coordinate but its own (Data: but the
  // data- and context-parallel ones), ordered by its own.
  const int tp = p.tpRank, cp = p.cpRank, dp = p.dpRank, pp = p.ppRank;
  std::array<MPI_Comm, kGroups> g;
  auto of = [&](Group group) -> MPI_Comm * { return &g[static_cast<int>(group)]; };
  const int data = dp * shape.cp + cp, ep = shape.ep;
  MPI_Comm_split(MPI_COMM_WORLD, (pp * shape.dp + dp) * shape.cp + cp, tp, of(Group::Tensor));
  MPI_Comm_split(MPI_COMM_WORLD, (pp * shape.dp + dp) * shape.tp + tp, cp, of(Group::Context));
  MPI_Comm_split(MPI_COMM_WORLD, pp * shape.tp + tp, data, of(Group::Data));
  MPI_Comm_split(MPI_COMM_WORLD, data * shape.tp + tp, pp, of(Group::Pipeline));
  // Expert: ep consecutive data ranks; ExpertData: the data ranks of one expert rank.
  const int blocks = shape.dp * shape.cp / ep;
  MPI_Comm_split(MPI_COMM_WORLD, (pp * shape.tp + tp) * blocks + data / ep, data % ep,
                 of(Group::Expert));
  MPI_Comm_split(MPI_COMM_WORLD, (pp * shape.tp + tp) * ep + data % ep, data / ep,
                 of(Group::ExpertData));
  MPI_Comm watch;
  MPI_Comm_dup(MPI_COMM_WORLD, &watch);
  out = std::make_unique<MpiComm>(p, g, watch);
  return Status::success();
}

} // namespace
} // namespace mt

extern "C" MT_PLUGIN_EXPORT void
mtMpiMakeGridComm(const mt::GridShape *shape, std::unique_ptr<mt::Comm> *out, mt::Status *status) {
  *status = mt::makeWorld(*shape, *out);
}

extern "C" MT_PLUGIN_EXPORT void mtMpiAbort() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    MPI_Abort(MPI_COMM_WORLD, 1);
}

extern "C" MT_PLUGIN_EXPORT int mtMpiWorldRank() {
  int initialized = 0, rank = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
