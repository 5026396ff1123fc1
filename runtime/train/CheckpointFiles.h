// The files of a sharded checkpoint, apart from any executor: what mtrun's save and
// load and the mtckpt tool read and write. A save directory holds
//
//   latest_checkpointed_iteration.txt    the step of the newest complete checkpoint
//   iter_0000123/index.json              what that checkpoint holds, and where
//   iter_0000123/rank_00017.safetensors  the chunks world rank 17 wrote
//
// A chunk is a box (Boxes.h) of one global tensor. In its rank's file it is a
// safetensors tensor named "<tensor>@<offsets>", whose shape is the box's sizes; the
// file's metadata names the save (save_id, as the index does) and, per chunk, the CRC-32
// of every block of kBlockBytes of its bytes, so a reader checks exactly what it reads.
// The README documents the index's keys.
#ifndef MT_RUNTIME_TRAIN_CHECKPOINTFILES_H
#define MT_RUNTIME_TRAIN_CHECKPOINTFILES_H

#include "core/AtomicFile.h"
#include "core/Status.h"
#include "train/Boxes.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mt::checkpoint {

constexpr const char *kFormat = "mtc-checkpoint-2";
constexpr const char *kLatest = "latest_checkpointed_iteration.txt";
constexpr const char *kIndex = "index.json";
constexpr uint64_t kBlockBytes = uint64_t{1} << 20;

/// "iter_0000123".
std::string iterationName(int64_t step);
/// "rank_00017.safetensors".
std::string rankFileName(int worldRank);
/// Reads `bytes` at `offset` of file `fd` (positioned reads, retried); false at the
/// end of the file or on an error.
bool readAt(int fd, uint64_t offset, void *data, size_t bytes);
/// Bytes per element of a safetensors dtype ("F32", "BF16", ...); 0 for one we do not know.
size_t elementBytes(const std::string &dtype);
/// The bytes of a tensor of `dtype` and `shape`; false for a dtype we do not know, a
/// dimension below 1, or a size past 2^62 (a product that would wrap).
bool tensorBytes(const std::string &dtype, const std::vector<int64_t> &shape, uint64_t &bytes);

struct Chunk {
  int file; // in Index::files
  Box box;
};

struct TensorEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<Chunk> chunks;
  /// A vocabulary table's rows that are the model's (the plan's Param.vocab_rows); the
  /// rest is padding. 0: not a table, or a checkpoint that does not say.
  int64_t vocabRows = 0;
};

/// Whether a checkpoint's tensor can stand for one of `shape` whose first `vocabRows`
/// rows are a vocabulary (0: not a vocabulary table): the same shape, or, for a table,
/// any number of rows that holds the vocabulary (the padding differs with
/// --make-vocab-size-divisible-by and tp, and a Hugging Face import has none), where the
/// checkpoint's table, if it says, is of the same vocabulary. Padding rows carry
/// nothing: no token reads them and no loss counts them.
bool holdsTable(const TensorEntry &entry, const std::vector<int64_t> &shape, int64_t vocabRows);

struct Index {
  std::string saveId;
  int64_t iteration = 0;
  std::string model;
  std::map<std::string, std::string> layout; // the saving run's (informational)
  std::map<std::string, std::string> state;  // the training state, as text
  std::vector<std::string> files;
  std::map<std::string, TensorEntry> tensors;
};

/// Writes `index` as DIR/index.json, atomically.
Status writeIndex(const std::string &dir, const Index &index);

/// Makes the checkpoint whose files are durable in `temporary` (inside the save
/// directory `dir`) the latest: writes its index, renames the directory to
/// iter_<index.iteration> (replacing one of that step in a single exchange), makes
/// the rename durable, then moves the latest marker. Afterwards removes checkpoints
/// beyond the newest `keep` (0: none) and directories of saves that never finished.
/// `phase` is called between the steps (a test's crash points).
Status publish(const std::string &dir, const std::string &temporary, const Index &index,
               int keep, const std::function<void(const char *)> &phase = [](const char *) {});

/// One rank's file: the chunks `entries` names, their bytes appended in that order.
class ShardWriter {
public:
  struct Entry {
    std::string tensor, dtype;
    Box box;
  };
  /// Starts `path`; the header is completed (with the checksums) by commit().
  static Status create(const std::string &path, const std::string &saveId,
                       std::vector<Entry> entries, ShardWriter &out);
  Status append(const void *data, size_t bytes);
  /// Every entry's bytes were appended: completes the header, makes the file durable.
  Status commit();
  uint64_t bytes() const { return headerBytes_ + written_; }
  /// A test's crash: the process kills itself once the file holds `bytes` (0: never).
  void killAfter(uint64_t bytes) { killAfter_ = bytes; }

private:
  std::string header(bool final) const;

  AtomicFile file_;
  std::string saveId_;
  std::vector<Entry> entries_;
  std::vector<uint64_t> begins_; // each entry's first byte, in the data
  std::vector<std::vector<uint32_t>> crcs_;
  uint64_t headerBytes_ = 0, written_ = 0, dataBytes_ = 0, killAfter_ = 0;
};

/// Reads a checkpoint: its index, then any box of any tensor straight from the chunks
/// that hold it, checking the blocks it reads against their checksums. Every failure
/// names the file and, where there is one, the tensor.
class CheckpointReader {
public:
  CheckpointReader();
  ~CheckpointReader();
  CheckpointReader(CheckpointReader &&) noexcept;
  CheckpointReader &operator=(CheckpointReader &&) noexcept;

  /// `dir` is a save directory (its latest checkpoint) or one checkpoint's directory.
  /// Checks the index whole: every tensor's chunks tile it, every file named exists.
  static Status open(const std::string &dir, CheckpointReader &out);
  const Index &index() const;
  /// The checkpoint's own directory (iter_NNNNNNN).
  const std::string &directory() const;
  /// Why the save directory's marker was passed over, if it was (latestCheckpoint).
  const std::string &note() const;
  /// Copies elements `box` of `tensor` into `target` (row-major over the box), reading
  /// at most about `stagingBytes` at a time.
  Status read(const std::string &tensor, const Box &box, void *target,
              size_t stagingBytes = size_t{256} << 20);
  /// Bytes read from the files so far.
  uint64_t bytesRead() const;
  /// Every chunk the index names is in its file, of the index's dtype and shape, its bytes
  /// there: what a reader of whole tensors checks before it allocates any (an index alone
  /// can declare any shape).
  Status checkChunks();
  /// Reads every chunk of every file whole: what `mtckpt verify` does.
  Status verifyAll(size_t stagingBytes = size_t{256} << 20);

private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Fills `bytes` with the whole of tensor `name`.
using Produce = std::function<Status(const std::string &name, std::vector<char> &bytes)>;
/// Writes a checkpoint of one file into save directory `dir`: `index`'s tensors whole,
/// one chunk each, their bytes made by `produce` in the index's order. It becomes the
/// latest only once it reads back whole; `written` names its directory.
Status writeWholeCheckpoint(const std::string &dir, Index index, const Produce &produce,
                            std::string &written);

/// The checkpoint `dir` names: itself (a checkpoint's directory), else the one its latest
/// marker names; where the marker is missing, a link to nothing, or names a checkpoint
/// that is gone, the newest complete one, and `note` says so. A marker that is not a step
/// number, or names a folder without its index, is refused.
Status latestCheckpoint(const std::string &dir, std::string &path, std::string &note);

/// Whether `dir` holds a complete checkpoint: a save directory whose latest marker
/// exists, or a checkpoint directory with its index.
bool holdsCheckpoint(const std::string &dir);

} // namespace mt::checkpoint

#endif
