#include "train/Checkpoint.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace mt {
namespace {

using json = nlohmann::json;

constexpr const char *kFileName = "checkpoint.safetensors";
constexpr const char *kFormat = "mtc-checkpoint-1";

template <typename... Parts> std::string cat(const Parts &...parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

const char *safetensorsDType(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::F32:
    return "F32";
  case plan::DType::F64:
    return "F64";
  case plan::DType::BF16:
    return "BF16";
  case plan::DType::F16:
    return "F16";
  case plan::DType::I32:
    return "I32";
  case plan::DType::I64:
    return "I64";
  }
  return "?";
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> shapeOf(const TensorView &v) {
  return std::vector<int64_t>(v.shape.begin(), v.shape.begin() + v.rank);
}

using NamedTensors = std::vector<std::pair<std::string, TensorView>>;

/// Every tensor a checkpoint holds: the weights under their parameters' names, then
/// Adam's moments under optimizer.exp_avg.<name> and optimizer.exp_avg_sq.<name>.
NamedTensors checkpointTensors(Executor &executor, const AdamW &optimizer) {
  NamedTensors tensors;
  auto &params = executor.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    tensors.emplace_back(params[i].name, params[i].weight);
  for (size_t i = 0; i < params.size(); ++i)
    tensors.emplace_back("optimizer.exp_avg." + params[i].name, optimizer.expAvg()[i]);
  for (size_t i = 0; i < params.size(); ++i)
    tensors.emplace_back("optimizer.exp_avg_sq." + params[i].name, optimizer.expAvgSq()[i]);
  return tensors;
}

size_t viewBytes(const TensorView &v) { return dtypeBytes(v.dtype) * v.numel(); }

/// Writes all of `data`; a test may ask the writer to die after a number of bytes
/// (MT_CHECKPOINT_KILL_AFTER_BYTES), as a crash mid-save would.
class FileWriter {
public:
  explicit FileWriter(int fd) : fd_(fd) {
    if (const char *limit = std::getenv("MT_CHECKPOINT_KILL_AFTER_BYTES"))
      killAfter_ = std::strtoull(limit, nullptr, 10);
  }
  bool write(const void *data, size_t n) {
    const char *p = static_cast<const char *>(data);
    while (n > 0) {
      size_t chunk = n;
      if (killAfter_ && written_ + chunk > killAfter_)
        chunk = killAfter_ - written_;
      ssize_t w = ::write(fd_, p, chunk);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0)
        return false;
      written_ += static_cast<size_t>(w);
      p += w;
      n -= static_cast<size_t>(w);
      if (killAfter_ && written_ >= killAfter_)
        ::raise(SIGKILL);
    }
    return true;
  }

private:
  int fd_;
  size_t written_ = 0, killAfter_ = 0;
};

Status ensureDirectory(const std::string &dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0)
    return S_ISDIR(st.st_mode) ? Status::success()
                               : Status::failure(cat(dir, ": exists and is not a directory"));
  if (::mkdir(dir.c_str(), 0755) != 0)
    return Status::failure(cat(dir, ": cannot create save directory: ", std::strerror(errno)));
  return Status::success();
}

/// Temporary files of saves that never finished (a crash) are removed.
void removeStaleTemporaries(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  std::string prefix = std::string(".") + kFileName + ".tmp.";
  while (dirent *e = ::readdir(d))
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
      ::unlink((dir + "/" + e->d_name).c_str());
  ::closedir(d);
}

} // namespace

std::string checkpointPath(const std::string &dir) { return dir + "/" + kFileName; }

Status saveCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
                      const TrainingState &state) {
  if (Status s = ensureDirectory(dir); !s.ok())
    return s;
  removeStaleTemporaries(dir);
  NamedTensors tensors = checkpointTensors(executor, optimizer);

  json header;
  size_t offset = 0;
  for (const auto &[name, view] : tensors) {
    size_t bytes = viewBytes(view);
    header[name] = {{"dtype", safetensorsDType(view.dtype)},
                    {"shape", shapeOf(view)},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", kFormat},
                            {"model", executor.plan().model()->str()},
                            {"step", std::to_string(state.step)},
                            {"data_position", std::to_string(state.dataPosition)},
                            {"seed", std::to_string(state.seed)}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // data starts 8-byte aligned
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  const std::string final = checkpointPath(dir);
  const std::string tmp = cat(dir, "/.", kFileName, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return Status::failure(cat(tmp, ": cannot write checkpoint: ", std::strerror(errno)));
  FileWriter out(fd);
  bool ok = out.write(length, 8) && out.write(text.data(), text.size());
  std::vector<char> host;
  for (const auto &entry : tensors) {
    if (!ok)
      break;
    const TensorView &view = entry.second;
    host.resize(viewBytes(view));
    executor.backend().copyToHost(host.data(), view.data, host.size());
    ok = out.write(host.data(), host.size());
  }
  ok = ok && ::fsync(fd) == 0;
  int savedErrno = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok || ::rename(tmp.c_str(), final.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return Status::failure(cat(final, ": cannot write checkpoint: ",
                               std::strerror(ok ? errno : savedErrno)));
  }
  // The rename itself must reach the disk before the save counts as done.
  if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::success();
}

Status loadCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
                      TrainingState &state) {
  const std::string path = checkpointPath(dir);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::failure(cat(path, ": cannot open checkpoint"));
  std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fail = [&](const std::string &why) { return Status::failure(cat(path, ": ", why)); };
  if (file.size() < 8)
    return fail("corrupt checkpoint: shorter than its header length");
  uint64_t headerBytes = 0;
  for (int i = 0; i < 8; ++i)
    headerBytes |= static_cast<uint64_t>(static_cast<uint8_t>(file[i])) << (8 * i);
  if (headerBytes > file.size() - 8)
    return fail(cat("corrupt checkpoint: header of ", headerBytes, " bytes in a file of ",
                    file.size()));
  json header = json::parse(file.begin() + 8, file.begin() + 8 + headerBytes, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object() || !header.contains("__metadata__"))
    return fail("corrupt checkpoint: its header is not safetensors JSON with metadata");
  const json &meta = header["__metadata__"];
  if (meta.value("format", "") != kFormat)
    return fail(cat("not an mtc checkpoint (format '", meta.value("format", ""), "')"));

  const char *data = file.data() + 8 + headerBytes;
  const size_t dataBytes = file.size() - 8 - headerBytes;
  NamedTensors tensors = checkpointTensors(executor, optimizer);
  std::set<std::string> expected;
  for (const auto &entry : tensors)
    expected.insert(entry.first);
  for (const auto &[name, entry] : header.items())
    if (name != "__metadata__" && !expected.count(name))
      return fail(cat("tensor '", name, "' is not a tensor of model '",
                      executor.plan().model()->str(), "'"));
  for (const auto &[name, view] : tensors) {
    if (!header.contains(name))
      return fail(cat("tensor '", name, "' is missing"));
    const json &entry = header[name];
    std::vector<int64_t> shape = entry.value("shape", std::vector<int64_t>{});
    if (shape != shapeOf(view))
      return fail(cat("tensor '", name, "' has shape ", shapeString(shape),
                      ", the plan expects ", shapeString(shapeOf(view))));
    if (entry.value("dtype", "") != safetensorsDType(view.dtype))
      return fail(cat("tensor '", name, "' is ", entry.value("dtype", ""),
                      ", the plan expects ", safetensorsDType(view.dtype)));
    std::vector<uint64_t> range = entry.value("data_offsets", std::vector<uint64_t>{});
    if (range.size() != 2 || range[0] > range[1] || range[1] > dataBytes ||
        range[1] - range[0] != viewBytes(view))
      return fail(cat("corrupt checkpoint: tensor '", name, "' has bad data offsets"));
  }
  TrainingState loaded;
  try {
    loaded.step = std::stoll(meta.value("step", ""));
    loaded.dataPosition = std::stoull(meta.value("data_position", ""));
    loaded.seed = std::stoull(meta.value("seed", ""));
  } catch (const std::exception &) {
    return fail("corrupt checkpoint: bad training state in its metadata");
  }
  // Only once everything checks out does anything change.
  for (const auto &[name, view] : tensors) {
    uint64_t begin = header[name]["data_offsets"][0].get<uint64_t>();
    executor.backend().copyToDevice(view.data, data + begin, viewBytes(view));
  }
  state = loaded;
  return Status::success();
}

} // namespace mt
