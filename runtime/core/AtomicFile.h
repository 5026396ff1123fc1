// A file written whole or not at all: what mtc's plans, mtdata's datasets, checkpoints
// and every other output are written through. The bytes go to a hidden temporary beside
// the file, ".<name>.tmp.<pid>.<random>", created exclusively and never through a
// symbolic link (O_CREAT | O_EXCL | O_NOFOLLOW), so that nothing planted in a shared
// directory, a link to another user's file say, is written through; commit() makes the
// bytes durable (fsync), renames the temporary over the file (replacing a link there,
// not its target), and makes the rename durable (fsync of the directory). A writer that
// fails or is dropped before commit() removes its temporary; one that dies leaves it.
#ifndef MT_RUNTIME_CORE_ATOMICFILE_H
#define MT_RUNTIME_CORE_ATOMICFILE_H

#include "core/Status.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mt {

/// Opens `path` to append to it (creating it), as a regular file only and never through a
/// symbolic link: a link planted at the name fails the open rather than redirecting the
/// writes, and a FIFO cannot block it. What is appended is not atomic.
Status openForAppending(const std::string &path, std::FILE *&out);

class AtomicFile {
public:
  AtomicFile() = default;
  AtomicFile(AtomicFile &&other) noexcept;
  AtomicFile &operator=(AtomicFile &&other) noexcept;
  ~AtomicFile();

  /// Starts writing `path`; fails, naming it, where its temporary cannot be created.
  static Status create(const std::string &path, AtomicFile &out);
  /// `path` holds exactly these bytes, or is as it was.
  static Status writeWhole(const std::string &path, const void *data, size_t bytes);

  Status write(const void *data, size_t bytes);
  /// Overwrites bytes already written, from byte `offset` (a header completed last).
  Status writeAt(uint64_t offset, const void *data, size_t bytes);
  /// Makes the bytes `path`'s: sync(), then publish(). After a failure, `path` is as it
  /// was.
  Status commit();
  /// The bytes reach the disk and the file is closed; `path` is not yet changed. For
  /// files published together: sync each, then publish each.
  Status sync();
  /// Renames the synced temporary over `path`, and makes the rename durable.
  Status publish();
  /// Drops what was written; `path` is as it was.
  void discard();

  const std::string &path() const { return path_; }
  /// Where the bytes go until commit(); empty once committed or discarded.
  const std::string &temporary() const { return temporary_; }
  bool isOpen() const { return file_ != nullptr; }

private:
  Status failure(const char *doing);

  std::string path_, temporary_;
  std::FILE *file_ = nullptr;
};

} // namespace mt

#endif
