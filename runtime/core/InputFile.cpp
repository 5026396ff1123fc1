#include "core/InputFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mt {
namespace {

const char *kindOf(mode_t mode) {
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISDIR(mode))
    return "a directory";
  return "another kind";
}

} // namespace

Status openRegularFile(const std::string &path, int &fd, uint64_t &bytes) {
  fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    struct stat info; // a socket cannot be opened at all: name it
    if (error == ENXIO && ::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
      return Status::failure(cat(path, ": not a regular file (", kindOf(info.st_mode), ")"));
    return Status::failure(cat(path, ": cannot open: ", std::strerror(error)));
  }
  struct stat info;
  Status failed = Status::success();
  if (::fstat(fd, &info) != 0)
    failed = Status::failure(cat(path, ": cannot stat: ", std::strerror(errno)));
  else if (!S_ISREG(info.st_mode))
    failed = Status::failure(cat(path, ": not a regular file (", kindOf(info.st_mode), ")"));
  else if (const int flags = ::fcntl(fd, F_GETFL);
           flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    failed = Status::failure(cat(path, ": cannot open: ", std::strerror(errno)));
  if (!failed.ok()) {
    ::close(fd);
    fd = -1;
    return failed;
  }
  bytes = static_cast<uint64_t>(info.st_size);
  return Status::success();
}

namespace {

/// readRegularFile into a string or a byte vector.
template <typename Bytes>
Status readInto(const std::string &path, uint64_t limit, const char *what, Bytes &out) {
  int fd = -1;
  uint64_t bytes = 0;
  MT_TRY(openRegularFile(path, fd, bytes));
  auto tooLarge = [&](uint64_t seen) {
    return Status::failure(
        cat(path, ": ", seen, " bytes, more than the ", limit, " bytes ", what, " can hold"));
  };
  if (bytes > limit) {
    ::close(fd);
    return tooLarge(bytes);
  }
  // The size may change while it is read: read to the end, never past the limit.
  out.assign(static_cast<size_t>(bytes), 0);
  uint64_t done = 0;
  for (;;) {
    if (done == out.size())
      out.resize(static_cast<size_t>(std::min<uint64_t>(limit + 1, done + 65536)));
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      Status failed = Status::failure(cat(path, ": cannot read: ", std::strerror(errno)));
      ::close(fd);
      return failed;
    }
    if (n == 0)
      break;
    done += static_cast<uint64_t>(n);
    if (done > limit) {
      ::close(fd);
      return tooLarge(done);
    }
  }
  ::close(fd);
  out.resize(static_cast<size_t>(done));
  return Status::success();
}

} // namespace

Status readRegularFile(const std::string &path, uint64_t limit, const char *what,
                       std::string &out) {
  return readInto(path, limit, what, out);
}

Status readRegularFile(const std::string &path, uint64_t limit, const char *what,
                       std::vector<uint8_t> &out) {
  return readInto(path, limit, what, out);
}

} // namespace mt
