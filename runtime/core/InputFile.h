// Every file mtc reads may come from someone else: a shared filesystem, another user, the
// internet. Its readers open them through here, so that what is not a file is refused
// before it is read (a FIFO would block the reader forever, /dev/zero never ends) and
// what is read whole is bounded by what it can legitimately hold.
#ifndef MT_RUNTIME_CORE_INPUTFILE_H
#define MT_RUNTIME_CORE_INPUTFILE_H

#include "core/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

/// Opens `path` for reading, as a regular file only: the open does not wait (O_NONBLOCK,
/// so a FIFO without a writer cannot block it), then anything but a regular file — a
/// FIFO, a device such as /dev/zero, a socket, a directory — is refused by name. `fd` is
/// then a blocking, close-on-exec descriptor the caller closes; `bytes` the file's size.
/// A symbolic link is followed: the file it names is checked.
Status openRegularFile(const std::string &path, int &fd, uint64_t &bytes);

/// The whole of regular file `path`, refused where it holds more than `limit` bytes:
/// "<path>: <bytes> bytes, more than the <limit> bytes <what> can hold".
Status readRegularFile(const std::string &path, uint64_t limit, const char *what,
                       std::string &out);
Status readRegularFile(const std::string &path, uint64_t limit, const char *what,
                       std::vector<uint8_t> &out);

/// The limits of what is read whole, each derived from what such a file holds.
namespace limits {
/// A flatbuffer addresses itself with 32-bit offsets: a plan is under 2 GiB.
constexpr uint64_t kPlanBytes = (uint64_t{1} << 31) - 1;
/// A Hugging Face config.json or tokenizer_config.json is a few kilobytes; the chat
/// templates some carry, tens.
constexpr uint64_t kConfigBytes = uint64_t{16} << 20;
/// A tokenizer (tokenizer.json, a tiktoken file, a SentencePiece model): the largest in
/// use (Gemma's 256K-token tokenizer.json) is ~34 MB.
constexpr uint64_t kTokenizerBytes = uint64_t{512} << 20;
/// A checkpoint's or a Hugging Face model's JSON index lists each chunk (tensor) in a
/// few hundred bytes: 1 GiB is millions of them.
constexpr uint64_t kIndexBytes = uint64_t{1} << 30;
/// A model file describes the architecture, not the weights: kilobytes.
constexpr uint64_t kModelBytes = uint64_t{64} << 20;
/// A list of datasets and their weights (mtrun --data-args-path): a few hundred bytes
/// each, and a checkpoint records at most a megabyte of a blend.
constexpr uint64_t kDataArgsBytes = uint64_t{64} << 20;
/// A small text file (a checkpoint's latest-iteration marker): a number.
constexpr uint64_t kMarkerBytes = 4096;
} // namespace limits

} // namespace mt

#endif
