#include "train/CheckpointFiles.h"
#include "core/DType.h"
#include "core/InputFile.h"
#include "train/Safetensors.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

namespace mt::checkpoint {
namespace {

using json = nlohmann::json;

std::string chunkName(const std::string &tensor, const Box &box) {
  std::string name = tensor + "@";
  for (size_t d = 0; d < box.offsets.size(); ++d)
    name += (d ? "," : "") + std::to_string(box.offsets[d]);
  return name;
}

std::string hex(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

uint64_t blocksOf(uint64_t bytes) { return (bytes + kBlockBytes - 1) / kBlockBytes; }

uint32_t crcOf(const void *data, size_t bytes) {
  return static_cast<uint32_t>(
      ::crc32(::crc32(0L, Z_NULL, 0), static_cast<const Bytef *>(data), static_cast<uInt>(bytes)));
}

/// The latest-iteration marker's text (a step number and a newline).
Status readMarker(const std::string &path, std::string &text) {
  return readRegularFile(path, limits::kMarkerBytes, "a checkpoint marker", text);
}

bool exists(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}


int64_t rowsOf(const Box &box) { return box.sizes.empty() ? 1 : box.sizes[0]; }

/// Rows [first, end) of `box` along its first dimension.
Box slab(const Box &box, int64_t first, int64_t end) {
  Box s = box;
  if (!s.sizes.empty()) {
    s.offsets[0] += first;
    s.sizes[0] = end - first;
  }
  return s;
}

/// Dimensions that are positive, and a tensor of them whose bytes fit in 2^62.
bool sane(const std::vector<int64_t> &shape, size_t element) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) // no plan holds more dimensions
    return false;
  int64_t bytes = static_cast<int64_t>(element);
  for (int64_t d : shape)
    if (d <= 0 || __builtin_mul_overflow(bytes, d, &bytes) || bytes > (int64_t{1} << 62))
      return false;
  return true;
}

} // namespace

bool readAt(int fd, uint64_t offset, void *data, size_t bytes) {
  char *to = static_cast<char *>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, to, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    to += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

std::string iterationName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(step));
  return name;
}

std::string rankFileName(int worldRank) {
  char name[40];
  std::snprintf(name, sizeof name, "rank_%05d.safetensors", worldRank);
  return name;
}

size_t elementBytes(const std::string &dtype) {
  if (dtype == "F64" || dtype == "I64")
    return 8;
  if (dtype == "F32" || dtype == "I32")
    return 4;
  if (dtype == "BF16" || dtype == "F16")
    return 2;
  if (dtype == "I8")
    return 1;
  return 0;
}

bool tensorBytes(const std::string &dtype, const std::vector<int64_t> &shape, uint64_t &bytes) {
  bytes = elementBytes(dtype);
  for (int64_t d : shape)
    if (d < 1 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) ||
        bytes > (uint64_t{1} << 62))
      return false;
  return bytes > 0;
}

bool holdsTable(const TensorEntry &entry, const std::vector<int64_t> &shape, int64_t vocabRows) {
  if (entry.vocabRows > 0 && vocabRows > 0 && entry.vocabRows != vocabRows)
    return false;
  const std::vector<int64_t> &held = entry.shape;
  if (held == shape)
    return true;
  return vocabRows > 0 && held.size() == shape.size() && !held.empty() && held[0] >= vocabRows &&
         std::equal(held.begin() + 1, held.end(), shape.begin() + 1);
}

Status writeIndex(const std::string &dir, const Index &index) {
  json tensors = json::object();
  for (const auto &[name, entry] : index.tensors) {
    json chunks = json::array();
    for (const Chunk &c : entry.chunks)
      chunks.push_back({{"file", c.file}, {"offsets", c.box.offsets}, {"sizes", c.box.sizes}});
    tensors[name] = {{"dtype", entry.dtype}, {"shape", entry.shape}, {"chunks", chunks}};
    if (entry.vocabRows > 0)
      tensors[name]["vocab_rows"] = entry.vocabRows;
  }
  json out = {{"format", kFormat},         {"save_id", index.saveId},
              {"iteration", index.iteration}, {"model", index.model},
              {"layout", index.layout},    {"state", index.state},
              {"block_bytes", kBlockBytes}, {"files", index.files},
              {"tensors", tensors}};
  const std::string text = out.dump(1) + "\n";
  return AtomicFile::writeWhole(dir + "/" + kIndex, text.data(), text.size());
}

namespace {

namespace fs = std::filesystem;

/// The step of a committed checkpoint's directory name ("iter_0000123"), or -1.
int64_t stepOfName(const std::string &name) {
  if (name.size() < 12 || name.compare(0, 5, "iter_") != 0)
    return -1;
  for (size_t i = 5; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i])))
      return -1;
  return std::strtoll(name.c_str() + 5, nullptr, 10);
}

} // namespace

Status publish(const std::string &dir, const std::string &temporary, const Index &index,
               int keep, const std::function<void(const char *)> &phase) {
  const int64_t step = index.iteration;
  phase("before-index");
  MT_TRY(writeIndex(temporary, index));
  phase("before-rename");
  const std::string final = dir + "/" + iterationName(step);
  if (::rename(temporary.c_str(), final.c_str()) != 0) {
    if (errno != ENOTEMPTY && errno != EEXIST && errno != ENOTDIR)
      return Status::failure(
          cat("cannot rename ", temporary, " to ", final, ": ", std::strerror(errno)));
    // A checkpoint of this step exists: it is swapped out in a single exchange, so that a
    // kill leaves one of the two in place (it may be the only one: the latest). A file or a
    // link in its place is swapped out alike, and removed (a link, not what it names).
    std::error_code ignored;
    if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, final.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(temporary, ignored);
    } else {
      // A file system without the exchange (NFS): remove, rename.
      fs::remove_all(final, ignored);
      if (::rename(temporary.c_str(), final.c_str()) != 0)
        return Status::failure(
            cat("cannot rename ", temporary, " to ", final, ": ", std::strerror(errno)));
    }
  }
  if (int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); fd >= 0) {
    ::fsync(fd); // the rename reaches the disk before the marker names it
    ::close(fd);
  }
  phase("before-latest");
  const std::string latest = std::to_string(step) + "\n";
  MT_TRY(AtomicFile::writeWhole(dir + "/" + kLatest, latest.data(), latest.size()));
  phase("after-latest");
  // Older checkpoints beyond the newest `keep`, by step below this one (a run resumed
  // from an older step leaves later ones alone), and the directories of saves that never
  // finished.
  std::vector<std::pair<int64_t, fs::path>> older;
  std::error_code error;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, error)) {
    const std::string name = e.path().filename().string();
    if (int64_t s = stepOfName(name); s >= 0 && s < step)
      older.emplace_back(s, e.path());
    else if (s < 0 && name.compare(0, 5, "iter_") == 0 &&
             name.find(".saving-") != std::string::npos)
      fs::remove_all(e.path(), error);
  }
  std::sort(older.rbegin(), older.rend());
  for (size_t i = 0; keep > 0 && i < older.size(); ++i)
    if (i + 1 >= static_cast<size_t>(keep))
      fs::remove_all(older[i].second, error);
  return Status::success();
}


// ---------------------------------------------------------------------------------------
// One rank's file.

std::string ShardWriter::header(bool final) const {
  json header = json::object();
  json meta = {{"format", kFormat}, {"save_id", saveId_}};
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry &e = entries_[i];
    const std::string name = chunkName(e.tensor, e.box);
    const uint64_t bytes = elementBytes(e.dtype) * static_cast<uint64_t>(e.box.numel());
    header[name] = {{"dtype", e.dtype},
                    {"shape", e.box.sizes},
                    {"data_offsets", {begins_[i], begins_[i] + bytes}}};
    std::string crcs;
    for (uint64_t b = 0; b < blocksOf(bytes); ++b)
      crcs += final ? hex(crcs_[i][b]) : "00000000"; // the same length either way
    meta["crc32." + name] = crcs;
  }
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return out + text;
}

Status ShardWriter::create(const std::string &path, const std::string &saveId,
                           std::vector<Entry> entries, ShardWriter &out) {
  ShardWriter w;
  w.saveId_ = saveId;
  w.entries_ = std::move(entries);
  for (const Entry &e : w.entries_) {
    if (elementBytes(e.dtype) == 0)
      return Status::failure(cat(path, ": no element type ", e.dtype));
    w.begins_.push_back(w.dataBytes_);
    w.dataBytes_ += elementBytes(e.dtype) * static_cast<uint64_t>(e.box.numel());
    w.crcs_.emplace_back();
  }
  MT_TRY(AtomicFile::create(path, w.file_));
  const std::string placeholder = w.header(false);
  w.headerBytes_ = placeholder.size();
  MT_TRY(w.file_.write(placeholder.data(), placeholder.size()));
  out = std::move(w);
  return Status::success();
}

Status ShardWriter::append(const void *data, size_t bytes) {
  if (written_ + bytes > dataBytes_)
    return Status::failure(cat(file_.path(), ": more bytes than its chunks hold"));
  if (killAfter_ && headerBytes_ + written_ + bytes >= killAfter_) {
    // A test's crash in the middle of a save.
    (void)file_.write(data, std::min<uint64_t>(bytes, killAfter_ - headerBytes_ - written_));
    (void)file_.sync();
    std::raise(SIGKILL);
  }
  MT_TRY(file_.write(data, bytes));
  // The checksums of the blocks these bytes fall in, chunk by chunk.
  const char *p = static_cast<const char *>(data);
  uint64_t at = written_;
  while (bytes > 0) {
    const size_t e = static_cast<size_t>(
        std::upper_bound(begins_.begin(), begins_.end(), at) - begins_.begin() - 1);
    const uint64_t inChunk = at - begins_[e];
    const uint64_t chunkBytes =
        (e + 1 < begins_.size() ? begins_[e + 1] : dataBytes_) - begins_[e];
    const uint64_t blockEnd = std::min(chunkBytes, (inChunk / kBlockBytes + 1) * kBlockBytes);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes, blockEnd - inChunk));
    std::vector<uint32_t> &crcs = crcs_[e];
    if (inChunk % kBlockBytes == 0)
      crcs.push_back(crcOf(p, n));
    else
      crcs.back() = static_cast<uint32_t>(
          ::crc32(crcs.back(), reinterpret_cast<const Bytef *>(p), static_cast<uInt>(n)));
    p += n;
    at += n;
    bytes -= n;
  }
  written_ = at;
  return Status::success();
}

Status ShardWriter::commit() {
  if (written_ != dataBytes_)
    return Status::failure(cat(file_.path(), ": ", written_, " of its chunks' ", dataBytes_,
                               " bytes were written"));
  const std::string final = header(true);
  if (final.size() != headerBytes_)
    return Status::failure(cat(file_.path(), ": its header changed length"));
  MT_TRY(file_.writeAt(0, final.data(), final.size()));
  return file_.commit();
}

// ---------------------------------------------------------------------------------------
// Reading.

namespace {

struct StoredChunk {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; // in the file's data
  std::vector<uint32_t> crcs;
};

struct OpenFile {
  bool opened = false;
  Status status = Status::success();
  int fd = -1;
  uint64_t dataStart = 0;
  std::map<std::string, StoredChunk> chunks;
};

Status parseIndex(const std::string &path, const std::string &text, Index &index) {
  auto fail = [&](const std::string &why) {
    return Status::failure(cat(path, ": corrupt checkpoint index: ", why));
  };
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return fail("not JSON");
  const std::string format =
      j.contains("format") && j["format"].is_string() ? j["format"].get<std::string>() : "";
  if (format != kFormat)
    return Status::failure(cat(path, ": not an mtc checkpoint index (format '", format,
                               "', this reads '", kFormat, "')"));
  try {
    index.saveId = j.at("save_id").get<std::string>();
    index.iteration = j.at("iteration").get<int64_t>();
    index.model = j.at("model").get<std::string>();
    index.layout = j.at("layout").get<std::map<std::string, std::string>>();
    index.state = j.at("state").get<std::map<std::string, std::string>>();
    if (j.at("block_bytes").get<uint64_t>() != kBlockBytes)
      return fail(cat("block_bytes is ", j.at("block_bytes").dump(), ", not ", kBlockBytes));
    index.files = j.at("files").get<std::vector<std::string>>();
    for (const std::string &f : index.files)
      if (f.empty() || f.find('/') != std::string::npos || f[0] == '.')
        return fail(cat("file name '", f, "' is not a plain name"));
    for (const auto &[name, t] : j.at("tensors").items()) {
      TensorEntry entry;
      entry.dtype = t.at("dtype").get<std::string>();
      entry.shape = t.at("shape").get<std::vector<int64_t>>();
      if (elementBytes(entry.dtype) == 0)
        return fail(cat("tensor '", name, "' has unknown dtype '", entry.dtype, "'"));
      if (!sane(entry.shape, elementBytes(entry.dtype)))
        return fail(cat("tensor '", name, "' has an impossible shape"));
      entry.vocabRows = t.value("vocab_rows", int64_t{0});
      if (entry.vocabRows < 0 || (entry.vocabRows > 0 && (entry.shape.empty() ||
                                                          entry.vocabRows > entry.shape[0])))
        return fail(cat("tensor '", name, "' has vocab_rows ", entry.vocabRows,
                        " outside its rows"));
      for (const json &c : t.at("chunks")) {
        Chunk chunk{c.at("file").get<int>(),
                    {c.at("offsets").get<std::vector<int64_t>>(),
                     c.at("sizes").get<std::vector<int64_t>>()}};
        if (chunk.file < 0 || chunk.file >= static_cast<int>(index.files.size()))
          return fail(cat("tensor '", name, "' names file ", chunk.file, " of ",
                          index.files.size()));
        if (chunk.box.offsets.size() != entry.shape.size() ||
            chunk.box.sizes.size() != entry.shape.size())
          return fail(cat("tensor '", name, "' has a chunk of another rank than its shape's"));
        for (size_t d = 0; d < entry.shape.size(); ++d)
          if (chunk.box.offsets[d] < 0 || chunk.box.offsets[d] >= entry.shape[d] ||
              chunk.box.sizes[d] < 1 || chunk.box.sizes[d] > entry.shape[d] - chunk.box.offsets[d])
            return fail(cat("tensor '", name, "' has a chunk outside its shape"));
        entry.chunks.push_back(std::move(chunk));
      }
      std::vector<Box> boxes;
      for (const Chunk &c : entry.chunks)
        boxes.push_back(c.box);
      std::string problem;
      if (!tilesExactly(boxes, entry.shape, problem))
        return fail(cat("tensor '", name, "': ", problem));
      index.tensors[name] = std::move(entry);
    }
  } catch (const json::exception &e) {
    return fail(e.what());
  }
  return Status::success();
}

} // namespace

struct CheckpointReader::State {
  std::string dir, note;
  Index index;
  std::vector<OpenFile> files;
  std::vector<char> staging;
  uint64_t bytesRead = 0;
  static constexpr int kOpenFiles = 64;
  int openFiles = 0;

  ~State() {
    for (OpenFile &f : files)
      if (f.fd >= 0)
        ::close(f.fd);
  }

  std::string pathOf(int file) const { return dir + "/" + index.files[file]; }

  /// Opens file `i` and reads its header, once; keeps at most kOpenFiles descriptors.
  Status open(int i) {
    OpenFile &f = files[i];
    if (!f.opened) {
      f.opened = true;
      f.status = parseHeader(i);
      ++openFiles;
    } else if (f.status.ok() && f.fd < 0) {
      uint64_t size = 0;
      MT_TRY(openRegularFile(pathOf(i), f.fd, size));
      ++openFiles;
    }
    if (openFiles > kOpenFiles) // many ranks' files: close the others
      for (size_t j = 0; j < files.size(); ++j)
        if (static_cast<int>(j) != i && files[j].fd >= 0) {
          ::close(std::exchange(files[j].fd, -1));
          --openFiles;
        }
    return f.status;
  }

  Status parseHeader(int i) {
    OpenFile &f = files[i];
    const std::string path = pathOf(i);
    auto fail = [&](const std::string &why) {
      return Status::failure(cat(path, ": corrupt checkpoint file: ", why));
    };
    uint64_t size = 0;
    if (Status s = openRegularFile(path, f.fd, size); !s.ok())
      return Status::failure(cat(s.message(), " (the index names it)"));
    json header;
    if (Status s = safetensors::readHeader(f.fd, size, header, f.dataStart); !s.ok())
      return fail(s.message());
    if (!header.contains("__metadata__"))
      return fail("its header has no metadata");
    try {
      const json &meta = header.at("__metadata__");
      if (meta.value("format", "") != kFormat)
        return fail(cat("format '", meta.value("format", ""), "'"));
      if (meta.value("save_id", "") != index.saveId)
        return Status::failure(cat(path, ": belongs to another save (id ",
                                   meta.value("save_id", ""), "; the index's is ",
                                   index.saveId, "): files of two checkpoints are mixed"));
      uint64_t dataEnd = 0;
      for (const auto &[name, t] : header.items()) {
        if (name == "__metadata__")
          continue;
        StoredChunk c;
        c.dtype = t.at("dtype").get<std::string>();
        c.shape = t.at("shape").get<std::vector<int64_t>>();
        std::vector<uint64_t> range = t.at("data_offsets").get<std::vector<uint64_t>>();
        if (range.size() != 2 || range[0] > range[1])
          return fail(cat("chunk ", name, " has bad data offsets"));
        c.begin = range[0];
        c.end = range[1];
        dataEnd = std::max(dataEnd, c.end);
        const std::string crcs = meta.value("crc32." + name, "");
        if (crcs.size() != 8 * blocksOf(c.end - c.begin))
          return fail(cat("chunk ", name, " has ", crcs.size() / 8, " block checksums for ",
                          blocksOf(c.end - c.begin), " blocks"));
        for (size_t b = 0; b < crcs.size(); b += 8)
          c.crcs.push_back(static_cast<uint32_t>(std::stoul(crcs.substr(b, 8), nullptr, 16)));
        f.chunks[name] = std::move(c);
      }
      if (size != f.dataStart + dataEnd)
        return fail(cat(size, " bytes where its header describes ", f.dataStart + dataEnd,
                        size < f.dataStart + dataEnd ? " (truncated)" : ""));
    } catch (const std::exception &e) { // JSON of the wrong shape, a checksum not hex
      return fail(e.what());
    }
    return Status::success();
  }

  /// Rows [first, end) of chunk `c` of `tensor`, read and checked against their blocks'
  /// checksums; `data` points at them in the staging buffer.
  /// Chunk `c` of `tensor` as its file stores it, checked against the index: there, of
  /// the index's dtype and shape, its bytes inside the file.
  Status storedChunk(const std::string &tensor, const TensorEntry &entry, const Chunk &c,
                     const StoredChunk *&out) {
    MT_TRY(open(c.file));
    const std::string name = chunkName(tensor, c.box);
    auto it = files[c.file].chunks.find(name);
    if (it == files[c.file].chunks.end())
      return Status::failure(cat(pathOf(c.file), ": holds no chunk ", name, " of tensor '", tensor,
                                 "' (the index says it does)"));
    const StoredChunk &stored = it->second;
    const uint64_t rowBytes =
        elementBytes(entry.dtype) * static_cast<uint64_t>(c.box.numel() / rowsOf(c.box));
    if (stored.dtype != entry.dtype || stored.shape != c.box.sizes ||
        stored.end - stored.begin != rowBytes * rowsOf(c.box))
      return Status::failure(cat(pathOf(c.file), ": chunk ", name, " of tensor '", tensor,
                                 "' is not the dtype and shape the index gives"));
    out = &stored;
    return Status::success();
  }

  Status readRows(const std::string &tensor, const TensorEntry &entry, const Chunk &c,
                  int64_t first, int64_t end, const char *&data) {
    const StoredChunk *found = nullptr;
    MT_TRY(storedChunk(tensor, entry, c, found));
    const StoredChunk &stored = *found;
    const std::string path = pathOf(c.file);
    const std::string name = chunkName(tensor, c.box);
    const uint64_t rowBytes =
        elementBytes(entry.dtype) * static_cast<uint64_t>(c.box.numel() / rowsOf(c.box));
    const uint64_t from = rowBytes * first, to = rowBytes * end;
    const uint64_t blockFirst = from / kBlockBytes;
    const uint64_t readFrom = blockFirst * kBlockBytes;
    const uint64_t readTo = std::min(stored.end - stored.begin, blocksOf(to) * kBlockBytes);
    if (staging.size() < readTo - readFrom)
      staging.resize(readTo - readFrom);
    errno = 0;
    if (!readAt(files[c.file].fd, files[c.file].dataStart + stored.begin + readFrom,
                staging.data(), readTo - readFrom))
      return Status::failure(cat(path, ": cannot read chunk ", name, " of tensor '", tensor,
                                 "': ", errno ? std::strerror(errno) : "end of file"));
    bytesRead += readTo - readFrom;
    for (uint64_t at = readFrom; at < readTo; at += kBlockBytes) {
      const uint64_t n = std::min(kBlockBytes, readTo - at);
      if (crcOf(staging.data() + (at - readFrom), n) != stored.crcs[at / kBlockBytes])
        return Status::failure(cat(path, ": chunk ", name, " of tensor '", tensor,
                                   "': block ", at / kBlockBytes, " fails its checksum"));
    }
    data = staging.data() + (from - readFrom);
    return Status::success();
  }
};

CheckpointReader::CheckpointReader() = default;
CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader &&) noexcept = default;
CheckpointReader &CheckpointReader::operator=(CheckpointReader &&) noexcept = default;

namespace {

/// The newest complete checkpoint in save directory `dir` (an iter_* folder with an
/// index): its path, or empty.
std::string newestComplete(const std::string &dir) {
  int64_t newest = -1;
  std::string path;
  std::error_code error;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, error)) {
    const int64_t s = stepOfName(e.path().filename().string());
    if (s > newest && exists(e.path().string() + "/" + kIndex)) {
      newest = s;
      path = e.path().string();
    }
  }
  return path;
}

/// The step numbers a checkpoint carries (its folder's name, the index's iteration,
/// the training state's step) must agree: a resume would otherwise start at one while
/// reports name another.
Status checkStepNumbers(const std::string &dir, const Index &index) {
  const std::string folder = fs::path(dir).filename().string();
  const int64_t named = stepOfName(folder);
  // (A step that is not a number is the training state's reader's to refuse.)
  auto state = index.state.find("step");
  if (state != index.state.end() && (state->second.empty() || state->second.size() > 18 ||
                                     !std::all_of(state->second.begin(), state->second.end(),
                                                  [](unsigned char c) { return std::isdigit(c); })))
    state = index.state.end();
  const bool stateDisagrees = state != index.state.end() &&
                              std::stoll(state->second) != static_cast<long long>(index.iteration);
  if ((named >= 0 && named != index.iteration) || stateDisagrees)
    return Status::failure(cat(
        dir, "/", kIndex, ": the checkpoint's step numbers disagree: ",
        named >= 0 ? cat("folder ", folder, ", ") : std::string(), "index iteration ",
        index.iteration,
        state != index.state.end() ? cat(", training state step ", state->second) : std::string()));
  return Status::success();
}

} // namespace

Status latestCheckpoint(const std::string &dir, std::string &path, std::string &note) {
  note.clear();
  if (exists(dir + "/" + kIndex)) {
    path = dir;
    return Status::success();
  }
  const std::string marker = dir + "/" + kLatest;
  path.clear();
  if (exists(marker)) {
    std::string text;
    MT_TRY(readMarker(marker, text));
    char *end = nullptr;
    const long long step = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end == text.c_str() || (*end && std::strcmp(end, "\n") != 0) || step < 0 ||
        !std::isdigit(static_cast<unsigned char>(text[0])))
      return Status::failure(cat(marker, ": corrupt: not a step number"));
    path = dir + "/" + iterationName(step);
    // A folder without its index is a corrupt checkpoint, not a missing one.
    if (exists(path) && !exists(path + "/" + kIndex))
      return Status::failure(cat(marker, " names ", iterationName(step), ", which holds no ",
                                 kIndex, ": an incomplete checkpoint"));
  }
  const std::string named = path;
  if (path.empty() || !exists(path)) {
    path = newestComplete(dir);
    if (!path.empty())
      note = cat(
          marker,
          named.empty() ? " is missing"
                        : cat(" names ", fs::path(named).filename().string(), ", which is gone"),
          ": the newest complete checkpoint, ", fs::path(path).filename().string(), ", stands in");
  }
  if (path.empty())
    return Status::failure(cat(
        dir, ": holds no checkpoint (no ", named.empty() ? cat(kLatest, ", ") : "", kIndex,
        " or complete iter_* folder",
        named.empty()
            ? ""
            : cat("; ", kLatest, " names ", fs::path(named).filename().string(), ", which is gone"),
        ")"));
  return Status::success();
}

bool holdsCheckpoint(const std::string &dir) {
  return exists(dir + "/" + kLatest) || exists(dir + "/" + kIndex) || !newestComplete(dir).empty();
}

Status CheckpointReader::open(const std::string &dir, CheckpointReader &out) {
  auto state = std::make_unique<State>();
  state->dir = dir;
  MT_TRY(latestCheckpoint(dir, state->dir, state->note));
  const std::string path = state->dir + "/" + kIndex;
  std::string text;
  MT_TRY(readRegularFile(path, limits::kIndexBytes, "a checkpoint index", text));
  MT_TRY(parseIndex(path, text, state->index));
  MT_TRY(checkStepNumbers(state->dir, state->index));
  state->files.resize(state->index.files.size());
  out.state_ = std::move(state);
  return Status::success();
}

const Index &CheckpointReader::index() const { return state_->index; }
const std::string &CheckpointReader::directory() const { return state_->dir; }
uint64_t CheckpointReader::bytesRead() const { return state_->bytesRead; }

Status CheckpointReader::read(const std::string &tensor, const Box &box, void *target,
                              size_t stagingBytes) {
  auto it = state_->index.tensors.find(tensor);
  if (it == state_->index.tensors.end())
    return Status::failure(cat(state_->dir, ": the checkpoint has no tensor '", tensor, "'"));
  const TensorEntry &entry = it->second;
  std::optional<Box> inside = intersect(box, wholeBox(entry.shape));
  if (box.offsets.size() != entry.shape.size() || !inside || !(*inside == box))
    return Status::failure(cat(state_->dir, ": tensor '", tensor, "' does not hold the box asked for"));
  const size_t element = elementBytes(entry.dtype);
  for (const Chunk &c : entry.chunks) {
    std::optional<Box> region = intersect(c.box, box);
    if (!region)
      continue;
    const int64_t rowBytes = static_cast<int64_t>(element) * (c.box.numel() / rowsOf(c.box));
    const int64_t rowsPerRead = std::max<int64_t>(1, static_cast<int64_t>(stagingBytes) / rowBytes);
    const int64_t first = region->sizes.empty() ? 0 : region->offsets[0] - c.box.offsets[0];
    const int64_t end = first + rowsOf(*region);
    for (int64_t a = first; a < end; a += rowsPerRead) {
      const int64_t b = std::min(end, a + rowsPerRead);
      const char *data = nullptr;
      MT_TRY(state_->readRows(tensor, entry, c, a, b, data));
      const Box rows = slab(c.box, a, b);
      copyRegion(*intersect(rows, *region), rows, data, box, target, element);
    }
  }
  return Status::success();
}

const std::string &CheckpointReader::note() const { return state_->note; }

Status CheckpointReader::checkChunks() {
  for (const auto &[tensor, entry] : state_->index.tensors)
    for (const Chunk &c : entry.chunks) {
      const StoredChunk *stored = nullptr;
      MT_TRY(state_->storedChunk(tensor, entry, c, stored));
    }
  return Status::success();
}

Status CheckpointReader::verifyAll(size_t stagingBytes) {
  for (const auto &[tensor, entry] : state_->index.tensors)
    for (const Chunk &c : entry.chunks) {
      const int64_t rowBytes =
          static_cast<int64_t>(elementBytes(entry.dtype)) * (c.box.numel() / rowsOf(c.box));
      const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(stagingBytes) / rowBytes);
      for (int64_t a = 0; a < rowsOf(c.box); a += step) {
        const char *data = nullptr;
        MT_TRY(state_->readRows(tensor, entry, c, a, std::min(rowsOf(c.box), a + step), data));
      }
    }
  return Status::success();
}

Status writeWholeCheckpoint(const std::string &dir, Index index, const Produce &produce,
                            std::string &written) {
  std::random_device device;
  char id[24];
  std::snprintf(id, sizeof id, "%08x%05x", device(), device() & 0xfffff);
  index.saveId = id;
  index.files = {rankFileName(0)};
  std::vector<ShardWriter::Entry> entries;
  for (auto &[name, entry] : index.tensors) {
    entry.chunks = {{0, wholeBox(entry.shape)}};
    entries.push_back({name, entry.dtype, wholeBox(entry.shape)});
  }
  if (holdsCheckpoint(dir))
    return Status::failure(cat(dir, ": already holds a checkpoint (its latest would become "
                                    "this one); write to a new directory"));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::failure(cat(dir, ": cannot create: ", std::strerror(errno)));
  const std::string temporary = cat(dir, "/", iterationName(index.iteration), ".saving-", id);
  if (::mkdir(temporary.c_str(), 0755) != 0)
    return Status::failure(cat(temporary, ": cannot create: ", std::strerror(errno)));
  auto abandon = [&](Status s) {
    std::error_code ignored;
    std::filesystem::remove_all(temporary, ignored);
    return s;
  };
  ShardWriter writer;
  Status s = ShardWriter::create(temporary + "/" + rankFileName(0), index.saveId, entries, writer);
  std::vector<char> data;
  for (const auto &[name, entry] : index.tensors) {
    if (!s.ok())
      break;
    uint64_t bytes = 0;
    if (!tensorBytes(entry.dtype, entry.shape, bytes)) {
      s = Status::failure(cat("tensor '", name, "' has no size mtc can hold"));
      break;
    }
    data.clear();
    s = produce(name, data);
    if (s.ok() && data.size() != bytes)
      s = Status::failure(cat("tensor '", name, "': ", data.size(), " bytes made, ", bytes,
                              " expected"));
    if (s.ok())
      s = writer.append(data.data(), data.size());
  }
  if (s.ok())
    s = writer.commit();
  if (s.ok())
    s = writeIndex(temporary, index);
  // Only a checkpoint that reads back whole becomes the latest.
  CheckpointReader check;
  if (s.ok())
    s = CheckpointReader::open(temporary, check);
  if (s.ok())
    s = check.verifyAll();
  if (!s.ok())
    return abandon(s);
  MT_TRY(publish(dir, temporary, index, 0));
  written = cat(dir, "/", iterationName(index.iteration));
  return Status::success();
}

} // namespace mt::checkpoint
