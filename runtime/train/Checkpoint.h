// Sharded checkpoints (files: CheckpointFiles.h). Every rank writes, in parallel, the
// chunks of state it alone is chosen to write: each tensor-parallel shard once, the
// distributed optimizer's shares from their owners, and replicated state split across
// the ranks holding it so that they write about equal bytes. A checkpoint becomes
// visible only once every rank's file is durable: the ranks write into a temporary
// directory, agree, and world rank 0 writes the index, renames the directory into place
// and moves the latest marker. On load each rank reads only the boxes its own layout
// holds, from whichever chunks hold them, so any layout loads any other's checkpoint.
#ifndef MT_RUNTIME_TRAIN_CHECKPOINT_H
#define MT_RUNTIME_TRAIN_CHECKPOINT_H

#include "exec/Executor.h"
#include "train/Boxes.h"
#include "train/Optimizer.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mt {

struct TrainingState {
  int64_t step = 0;          // steps completed
  uint64_t dataPosition = 0; // samples consumed
  uint64_t seed = 0;
  LossScaler lossScaler;     // fp16 only
  int64_t skippedSteps = 0;  // fp16: steps whose gradients overflowed
  /// The documents training reads (Megatron's --split): [first, end). Checkpoints written
  /// before splits existed have none: all documents.
  std::optional<std::pair<uint64_t, uint64_t>> trainDocuments;
  /// A blend's datasets (data/Blend.h) as training reads them: each one's fraction and
  /// training documents, "f,first,end;..." ("" for one dataset, which trainDocuments
  /// describes).
  std::string trainBlend;
  /// The learning-rate and weight-decay schedule (scheduleRecord; "" in checkpoints
  /// written before it was recorded, which resume with any).
  std::string schedule;
};
/// The longest blend a checkpoint records (about 25,000 datasets).
inline constexpr size_t kMaxBlendText = size_t{1} << 20;

struct CheckpointOptions {
  int keep = 0;                            // checkpoints kept after a save; 0: all
  size_t stagingBytes = size_t{256} << 20; // host memory a rank stages its reads and writes in
  bool async = false; // training goes on while the files are written (--async-save)
};

/// The kinds of state a checkpoint holds per parameter: its (master) weights under the
/// parameter's name, then Adam's moments as optimizer.exp_avg.<name> and
/// optimizer.exp_avg_sq.<name>.
constexpr int kStateKinds = 3;
std::string stateTensorName(int kind, const std::string &param);

/// One chunk of a save: a box of parameter `param`'s tensor of state `kind`, and the
/// world rank that writes it.
struct SaveChunk {
  int kind;
  int32_t param;
  Box box;
  int writer;
};

/// Who writes what: every element of every tensor exactly once, by a rank that holds
/// it; replicated state is split along its first dimension and spread over its holders
/// so that they write about equal bytes. A pure function of the plan: every rank
/// computes the same.
std::vector<SaveChunk> assignChunks(const plan::Plan &plan);

/// Collective: whether `dir` holds a checkpoint, as every rank sees it; fails if the
/// ranks disagree (a directory that is not shared).
Status findCheckpoint(const std::string &dir, Comm &comm, bool &found);

/// What a save cost.
struct SaveReport {
  int64_t step = 0;
  uint64_t bytesAllRanks = 0, bytesThisRank = 0; // the files' bytes
  double seconds = 0;        // on this rank: its write, and the commit
  double blockedSeconds = 0; // how long training waited for it
  /// This process's resident memory before the save and its peak during it (Linux's
  /// VmRSS and VmHWM, the mark reset first); -1 where they cannot be read.
  int64_t residentBefore = -1, residentPeak = -1;
};

/// Saves checkpoints; every call is collective (every rank makes it). A failure on any
/// rank once the files are being written is every rank's result; a rank that fails
/// before (a failed collective) returns at once, and its caller ends the job.
class CheckpointSaver {
public:
  CheckpointSaver(Executor &executor, const AdamW &optimizer, CheckpointOptions options);
  /// Waits for a write still in flight, which is then never committed (the job is
  /// ending on an error).
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver &) = delete;
  CheckpointSaver &operator=(const CheckpointSaver &) = delete;

  /// Completes the save in flight, then saves `state` to `dir`: synchronously, the
  /// checkpoint committed on return; asynchronously, this rank's chunks copied to host
  /// memory on return and written by a thread, to be committed by poll() or finish().
  Status save(const std::string &dir, const TrainingState &state);
  /// Commits the save in flight if every rank's write has ended (after each step).
  Status poll();
  /// Waits for the save in flight and commits it; its failure on any rank is returned.
  Status finish();
  /// The figures of the save committed last, once: false if there are none new.
  bool takeReport(SaveReport &report);

private:
  struct Pending;
  Executor &executor_;
  const AdamW &optimizer_;
  CheckpointOptions options_;
  std::unique_ptr<Pending> pending_;
  std::optional<SaveReport> report_;
};

/// `dir` is a save directory (its latest checkpoint) or one checkpoint's directory.
/// Nothing changes unless every rank read and checked all it needs, of one save. `bytesRead`, if
/// given, is what all ranks read from the files; `note`, why the save directory's marker
/// was passed over, if it was. `resumable`, if given, judges the checkpoint's training
/// state as its index gives it, before any tensor is read (a checkpoint of weights alone,
/// a Hugging Face import, has none to judge).
Status loadCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
                      TrainingState &state, const CheckpointOptions &options = {},
                      uint64_t *bytesRead = nullptr, std::string *note = nullptr,
                      const std::function<Status(const TrainingState &)> &resumable = {});

} // namespace mt

#endif
