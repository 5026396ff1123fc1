#include "train/Safetensors.h"
#include "core/InputFile.h"

#include "core/AtomicFile.h"
#include "train/CheckpointFiles.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

namespace mt::safetensors {

using json = nlohmann::json;

uint64_t bytesOf(const std::string &dtype, const std::vector<int64_t> &shape) {
  uint64_t n = 0;
  return checkpoint::tensorBytes(dtype, shape, n) ? n : 0;
}

Status readHeader(int fd, uint64_t size, json &header, uint64_t &dataStart) {
  uint8_t length[8];
  if (size < 8 || !checkpoint::readAt(fd, 0, length, 8))
    return Status::failure("shorter than its header's length");
  uint64_t headerBytes = 0;
  for (int i = 0; i < 8; ++i)
    headerBytes |= static_cast<uint64_t>(length[i]) << (8 * i);
  // The length is the file's first 8 bytes: a message never repeats it (a file that is not
  // safetensors, a link to another's, would have its first bytes printed).
  if (headerBytes > kMaxHeaderBytes)
    return Status::failure(cat("an impossible header length (more than the ", kMaxHeaderBytes,
                               " bytes safetensors allows), in a file of ", size, " bytes"));
  if (headerBytes > size - 8)
    return Status::failure(cat("a header longer than the file of ", size, " bytes"));
  std::string text(headerBytes, '\0');
  if (!checkpoint::readAt(fd, 8, text.data(), headerBytes))
    return Status::failure("cannot read its header");
  header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return Status::failure("its header is not a JSON object");
  dataStart = 8 + headerBytes;
  return Status::success();
}

File::File(File &&other) noexcept { *this = std::move(other); }
File &File::operator=(File &&other) noexcept {
  std::swap(path_, other.path_);
  std::swap(fd_, other.fd_);
  std::swap(tensors_, other.tensors_);
  std::swap(metadata_, other.metadata_);
  return *this;
}
File::~File() {
  if (fd_ >= 0)
    ::close(fd_);
}

Status File::open(const std::string &path, File &out) {
  auto fail = [&](const std::string &why) { return Status::failure(cat(path, ": ", why)); };
  File file;
  file.path_ = path;
  uint64_t size = 0;
  MT_TRY(openRegularFile(path, file.fd_, size));
  json header;
  uint64_t dataStart = 0;
  if (Status s = readHeader(file.fd_, size, header, dataStart); !s.ok())
    return fail(cat("not a safetensors file: ", s.message()));
  try {
    for (const auto &[name, t] : header.items()) {
      if (name == "__metadata__") {
        if (!t.is_object())
          return fail("its __metadata__ is not an object");
        for (const auto &[key, value] : t.items())
          if (!value.is_string())
            return fail(cat("its metadata '", key, "' is not a string"));
        file.metadata_ = t;
        continue;
      }
      Tensor tensor;
      tensor.dtype = t.at("dtype").get<std::string>();
      tensor.shape = t.at("shape").get<std::vector<int64_t>>();
      const std::vector<uint64_t> range = t.at("data_offsets").get<std::vector<uint64_t>>();
      if (checkpoint::elementBytes(tensor.dtype) == 0)
        return fail(cat("tensor '", name, "' has dtype ", tensor.dtype));
      for (int64_t d : tensor.shape)
        if (d <= 0 || d > (int64_t{1} << 40))
          return fail(cat("tensor '", name, "' has a dimension of ", d,
                          " (mtc holds no empty tensors)"));
      if (!checkpoint::tensorBytes(tensor.dtype, tensor.shape, tensor.bytes))
        return fail(cat("tensor '", name, "' is larger than mtc can hold"));
      if (range.size() != 2 || range[0] > range[1] || range[1] > size - dataStart ||
          range[1] - range[0] != tensor.bytes)
        return fail(cat("tensor '", name, "' has bad data offsets"));
      tensor.offset = dataStart + range[0];
      file.tensors_[name] = std::move(tensor);
    }
  } catch (const json::exception &e) {
    return fail(cat("its header is not what safetensors describes: ", e.what()));
  }
  out = std::move(file);
  return Status::success();
}

Status File::read(const std::string &name, std::vector<char> &bytes) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    return Status::failure(cat(path_, ": holds no tensor '", name, "'"));
  bytes.resize(it->second.bytes);
  return checkpoint::readAt(fd_, it->second.offset, bytes.data(), bytes.size())
             ? Status::success()
             : Status::failure(cat(path_, ": cannot read tensor '", name, "'"));
}

Status Shards::open(const std::string &dir, Shards &out) {
  out = Shards();
  const std::string index = dir + "/model.safetensors.index.json";
  struct stat info;
  const bool single = ::stat((dir + "/model.safetensors").c_str(), &info) == 0;
  if (::stat(index.c_str(), &info) != 0) {
    if (!single)
      return Status::failure(cat(dir, ": holds neither model.safetensors nor "
                                      "model.safetensors.index.json"));
    return out.openFiles(dir, {"model.safetensors"});
  }
  if (single)
    return Status::failure(cat(dir, ": holds both model.safetensors and "
                                    "model.safetensors.index.json; remove the stale one"));
  std::string text;
  MT_TRY(readRegularFile(index, limits::kIndexBytes, "a model.safetensors.index.json", text));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return Status::failure(cat(index, ": not JSON with a weight_map"));
  std::map<std::string, std::string> shardOf;
  std::vector<std::string> names; // each shard once, in the order the map first names it
  std::set<std::string> seen;
  for (const auto &[tensor, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      return Status::failure(cat(index, ": tensor '", tensor, "' has a bad file"));
    const std::string &shard = shardOf[tensor] = file.get<std::string>();
    if (seen.insert(shard).second)
      names.push_back(shard);
  }
  MT_TRY(out.openFiles(dir, names));
  for (const auto &[tensor, shard] : shardOf) {
    auto it = out.fileOf_.find(tensor);
    if (it == out.fileOf_.end() || out.files_[it->second].path() != dir + "/" + shard)
      return Status::failure(cat(index, ": tensor '", tensor, "' is not in ", shard));
  }
  if (out.fileOf_.size() != shardOf.size())
    return Status::failure(cat(index, ": the shards hold tensors its weight_map does not name"));
  return Status::success();
}

Status Shards::openFiles(const std::string &dir, const std::vector<std::string> &names) {
  for (const std::string &name : names) {
    File file;
    MT_TRY(File::open(dir + "/" + name, file));
    for (const auto &[tensor, t] : file.tensors())
      if (!fileOf_.emplace(tensor, files_.size()).second)
        return Status::failure(cat(dir, ": tensor '", tensor, "' is in two files"));
    files_.push_back(std::move(file));
  }
  return Status::success();
}

const Tensor *Shards::find(const std::string &name) const {
  auto it = fileOf_.find(name);
  return it == fileOf_.end() ? nullptr : &files_[it->second].tensors().at(name);
}

std::vector<std::string> Shards::names() const {
  std::vector<std::string> out;
  for (const auto &[name, file] : fileOf_)
    out.push_back(name);
  return out;
}

Status Shards::read(const std::string &name, std::vector<char> &bytes) const {
  auto it = fileOf_.find(name);
  if (it == fileOf_.end())
    return Status::failure(cat("no shard holds tensor '", name, "'"));
  return files_[it->second].read(name, bytes);
}

Status write(const std::string &path, const std::vector<Entry> &entries,
             const std::map<std::string, std::string> &metadata, const Produce &produce) {
  json header = json::object();
  uint64_t offset = 0;
  for (const Entry &e : entries) {
    const uint64_t bytes = bytesOf(e.dtype, e.shape);
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  AtomicFile file;
  MT_TRY(AtomicFile::create(path, file));
  MT_TRY(file.write(length, 8));
  MT_TRY(file.write(text.data(), text.size()));
  for (size_t i = 0; i < entries.size(); ++i) {
    const uint64_t expected = bytesOf(entries[i].dtype, entries[i].shape);
    uint64_t written = 0;
    MT_TRY(produce(i, [&](const void *data, size_t bytes) {
      if ((written += bytes) > expected)
        return Status::failure(cat(path, ": tensor '", entries[i].name, "' came out at more than ",
                                   expected, " bytes"));
      return file.write(data, bytes);
    }));
    if (written != expected)
      return Status::failure(cat(path, ": tensor '", entries[i].name, "' came out at ", written,
                                 " bytes, not ", expected));
  }
  return file.commit();
}

} // namespace mt::safetensors
