// safetensors files (Hugging Face's format: an 8-byte little-endian header length, a
// JSON header naming each tensor's dtype, shape and byte range, then the bytes). Every
// reader of one starts with readHeader, the one bound on a header's size: the sharded
// checkpoint's files (CheckpointFiles.h, which adds checksums), mtckpt's consolidated
// files and Hugging Face checkpoints (File, whole tensor by whole tensor; Shards, a
// directory of them).
#ifndef MT_RUNTIME_TRAIN_SAFETENSORS_H
#define MT_RUNTIME_TRAIN_SAFETENSORS_H

#include "core/Status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mt::safetensors {

/// A header longer than this is taken for corruption, as safetensors takes it.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
/// The JSON object that heads the safetensors file open as `fd` (of `size` bytes), and
/// where the tensors' bytes begin; a failure says why, for the caller to name the file.
Status readHeader(int fd, uint64_t size, nlohmann::json &header, uint64_t &dataStart);

struct Tensor {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t offset = 0, bytes = 0; // in the file
};

/// A file opened by its header: every tensor's dtype is one we know, its shape has no
/// empty dimension and its byte range lies in the file and fits its shape.
class File {
public:
  File() = default;
  File(File &&other) noexcept;
  File &operator=(File &&other) noexcept;
  ~File();

  static Status open(const std::string &path, File &out);
  const std::string &path() const { return path_; }
  const std::map<std::string, Tensor> &tensors() const { return tensors_; }
  /// The header's __metadata__ (an object of strings), or an empty object.
  const nlohmann::json &metadata() const { return metadata_; }
  Status read(const std::string &name, std::vector<char> &bytes) const;

private:
  std::string path_;
  int fd_ = -1;
  std::map<std::string, Tensor> tensors_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

/// The tensors of a directory in Hugging Face's layout: model.safetensors, or the shards
/// its model.safetensors.index.json maps each tensor to. Each shard is a file of that
/// directory, each tensor is in exactly the shard the map names, and none is left unnamed.
class Shards {
public:
  static Status open(const std::string &dir, Shards &out);
  /// The tensor named `name`, or null.
  const Tensor *find(const std::string &name) const;
  /// Every tensor's name, in order.
  std::vector<std::string> names() const;
  Status read(const std::string &name, std::vector<char> &bytes) const;

private:
  Status openFiles(const std::string &dir, const std::vector<std::string> &names);
  std::vector<File> files_;
  std::map<std::string, size_t> fileOf_;
};

/// A tensor to write: its name, dtype and shape; its bytes come from `produce`.
struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
};
/// Appends bytes of the tensor being written.
using Sink = std::function<Status(const void *data, size_t bytes)>;
/// Gives entry `entry`'s bytes to `sink`, in order, in as many pieces as it likes: a large
/// tensor can be streamed through a bounded buffer.
using Produce = std::function<Status(size_t entry, const Sink &sink)>;
/// Writes `entries` in their order, atomically, with `metadata` (strings) in the header;
/// each tensor must come to exactly its bytes.
Status write(const std::string &path, const std::vector<Entry> &entries,
             const std::map<std::string, std::string> &metadata, const Produce &produce);

/// The bytes of a tensor of `dtype` and `shape` (0 for a dtype we do not know).
uint64_t bytesOf(const std::string &dtype, const std::vector<int64_t> &shape);

} // namespace mt::safetensors

#endif // MT_RUNTIME_TRAIN_SAFETENSORS_H
