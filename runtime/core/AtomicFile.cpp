#include "core/AtomicFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

namespace mt {
namespace {

/// `path` split at its last '/': the directory ("." when none) and the name.
std::pair<std::string, std::string> splitPath(const std::string &path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

} // namespace

AtomicFile::AtomicFile(AtomicFile &&other) noexcept { *this = std::move(other); }

AtomicFile &AtomicFile::operator=(AtomicFile &&other) noexcept {
  if (this != &other) {
    discard();
    path_ = std::move(other.path_);
    temporary_ = std::move(other.temporary_);
    file_ = std::exchange(other.file_, nullptr);
    other.temporary_.clear();
  }
  return *this;
}

AtomicFile::~AtomicFile() { discard(); }

Status openForAppending(const std::string &path, std::FILE *&out) {
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::failure(cat("cannot write ", path, ": ",
                               errno == ELOOP ? "it is a symbolic link" : std::strerror(errno)));
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) ||
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 || !(out = ::fdopen(fd, "a"))) {
    ::close(fd);
    return Status::failure(cat("cannot write ", path, ": not a regular file"));
  }
  return Status::success();
}

Status AtomicFile::create(const std::string &path, AtomicFile &out) {
  const auto [dir, name] = splitPath(path);
  std::random_device entropy;
  AtomicFile file;
  file.path_ = path;
  // A name no one can guess, and a file no one can have made first: O_EXCL fails on
  // anything already there (a planted link included), and then another name is tried.
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    const uint64_t random = (uint64_t{entropy()} << 32) ^ entropy();
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(random));
    file.temporary_ = cat(dir, "/.", name, ".tmp.", ::getpid(), ".", suffix);
    fd =
        ::open(file.temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  if (fd >= 0)
    file.file_ = ::fdopen(fd, "wb");
  if (!file.file_) {
    Status failed = Status::failure(cat("cannot create ", path, ": ", std::strerror(errno)));
    if (fd >= 0) {
      ::close(fd);
      ::unlink(file.temporary_.c_str());
    }
    file.temporary_.clear(); // nothing to remove
    return failed;
  }
  out = std::move(file);
  return Status::success();
}

Status AtomicFile::writeWhole(const std::string &path, const void *data, size_t bytes) {
  AtomicFile file;
  MT_TRY(create(path, file));
  MT_TRY(file.write(data, bytes));
  return file.commit();
}

Status AtomicFile::failure(const char *doing) {
  Status failed = Status::failure(cat("cannot ", doing, " ", path_, ": ", std::strerror(errno)));
  discard();
  return failed;
}

Status AtomicFile::write(const void *data, size_t bytes) {
  if (!file_)
    return Status::failure(cat(path_, ": not open for writing"));
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes)
    return failure("write");
  return Status::success();
}

Status AtomicFile::writeAt(uint64_t offset, const void *data, size_t bytes) {
  if (!file_)
    return Status::failure(cat(path_, ": not open for writing"));
  if (std::fflush(file_) != 0)
    return failure("write");
  const char *from = static_cast<const char *>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(::fileno(file_), from, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return failure("write");
    from += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::success();
}

Status AtomicFile::commit() {
  MT_TRY(sync());
  return publish();
}

Status AtomicFile::sync() {
  if (!file_)
    return Status::failure(cat(path_, ": not open for writing"));
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    return failure("write");
  if (std::fclose(std::exchange(file_, nullptr)) != 0)
    return failure("write");
  return Status::success();
}

Status AtomicFile::publish() {
  if (file_ || temporary_.empty())
    return Status::failure(cat(path_, ": publish() needs a synced file"));
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0)
    return failure("write");
  temporary_.clear();
  // The rename itself must reach the disk before the file counts as written.
  if (int dir = ::open(splitPath(path_).first.c_str(), O_RDONLY | O_DIRECTORY); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return Status::success();
}

void AtomicFile::discard() {
  if (file_)
    std::fclose(std::exchange(file_, nullptr));
  if (!temporary_.empty())
    ::unlink(temporary_.c_str());
  temporary_.clear();
}

} // namespace mt
