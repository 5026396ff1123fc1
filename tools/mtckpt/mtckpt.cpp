// mtckpt: inspects, verifies, exports and imports mtc's sharded checkpoints.
//
//   mtckpt inspect DIR [--tensors]        step, model, layout, files, tensors
//   mtckpt verify DIR                     reads every chunk, checking every checksum
//   mtckpt export DIR -o FILE [--optimizer]
//                                         one safetensors file of the whole weights
//                                         (and Adam's moments), for use elsewhere
//   mtckpt import FILE -o DIR             the reverse: such a file becomes DIR's latest
//                                         checkpoint, which mtrun --load reads
//   mtckpt diff DIR DIR                   whether two checkpoints hold the same state
//                                         bit for bit, whatever layouts saved them
//
// DIR is a save directory (its latest checkpoint) or one checkpoint's iter_N directory.
#include "train/CheckpointFiles.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace mt;
using namespace mt::checkpoint;
using json = nlohmann::json;

constexpr const char *kUsage = R"(usage:
  mtckpt inspect DIR [--tensors]
  mtckpt verify DIR
  mtckpt export DIR -o FILE.safetensors [--optimizer]
  mtckpt import FILE.safetensors -o DIR
  mtckpt diff DIR DIR
DIR is a save directory (its latest checkpoint) or one checkpoint's iter_N directory.
)";

/// The format of a consolidated file: what export writes and import reads.
constexpr const char *kConsolidated = "mtc-consolidated-1";

bool isOptimizerState(const std::string &name) { return name.rfind("optimizer.", 0) == 0; }

uint64_t bytesOf(const TensorEntry &t) {
  uint64_t n = elementBytes(t.dtype);
  for (int64_t d : t.shape)
    n *= static_cast<uint64_t>(d);
  return n;
}

int inspect(const std::string &dir, bool tensors) {
  CheckpointReader reader;
  if (Status s = CheckpointReader::open(dir, reader); !s.ok()) {
    std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
    return 1;
  }
  const Index &index = reader.index();
  std::printf("checkpoint %s\n", reader.directory().c_str());
  std::printf("model %s, step %" PRId64 ", save %s\n", index.model.c_str(), index.iteration,
              index.saveId.c_str());
  std::printf("layout:");
  for (const auto &[key, value] : index.layout)
    std::printf(" %s %s", key.c_str(), value.c_str());
  std::printf("\nstate:");
  for (const auto &[key, value] : index.state)
    std::printf(" %s %s", key.c_str(), value.c_str());
  uint64_t fileBytes = 0;
  for (const std::string &f : index.files) {
    struct stat info;
    if (::stat((reader.directory() + "/" + f).c_str(), &info) == 0)
      fileBytes += static_cast<uint64_t>(info.st_size);
  }
  uint64_t weights = 0, optimizer = 0, chunks = 0;
  for (const auto &[name, t] : index.tensors) {
    (isOptimizerState(name) ? optimizer : weights) += bytesOf(t);
    chunks += t.chunks.size();
  }
  std::printf("\n%zu files, %" PRIu64 " bytes\n", index.files.size(), fileBytes);
  std::printf("%zu tensors in %" PRIu64 " chunks: %" PRIu64 " bytes of weights, %" PRIu64
              " of optimizer state\n",
              index.tensors.size(), chunks, weights, optimizer);
  if (tensors)
    for (const auto &[name, t] : index.tensors) {
      std::string shape;
      for (int64_t d : t.shape)
        shape += (shape.empty() ? "" : "x") + std::to_string(d);
      std::printf("  %-48s %-4s %-16s %zu chunks\n", name.c_str(), t.dtype.c_str(),
                  shape.c_str(), t.chunks.size());
    }
  return 0;
}

int verify(const std::string &dir) {
  CheckpointReader reader;
  Status s = CheckpointReader::open(dir, reader);
  if (s.ok())
    s = reader.verifyAll();
  if (!s.ok()) {
    std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("%s: %zu files, %zu tensors: every chunk reads back and matches its checksums\n",
              reader.directory().c_str(), reader.index().files.size(),
              reader.index().tensors.size());
  return 0;
}

int exportFile(const std::string &dir, const std::string &out, bool withOptimizer) {
  CheckpointReader reader;
  if (Status s = CheckpointReader::open(dir, reader); !s.ok()) {
    std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
    return 1;
  }
  Status s = Status::success();
  const Index &index = reader.index();
  json header = json::object();
  json meta = {{"format", kConsolidated}, {"model", index.model}};
  std::vector<std::string> names; // in the file's order: the header's (sorted)
  if (s.ok()) {
    for (const auto &[key, value] : index.state)
      meta[key] = value;
    uint64_t offset = 0;
    for (const auto &[name, t] : index.tensors) {
      if (isOptimizerState(name) && !withOptimizer)
        continue;
      header[name] = {{"dtype", t.dtype}, {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytesOf(t)}}};
      offset += bytesOf(t);
      names.push_back(name);
    }
    header["__metadata__"] = meta;
  }
  AtomicFile file;
  if (s.ok())
    s = AtomicFile::create(out, file);
  if (s.ok()) {
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    uint8_t length[8];
    for (int i = 0; i < 8; ++i)
      length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    s = file.write(length, 8);
    if (s.ok())
      s = file.write(text.data(), text.size());
  }
  std::vector<char> data;
  for (size_t i = 0; s.ok() && i < names.size(); ++i) {
    const TensorEntry &t = index.tensors.at(names[i]);
    data.resize(bytesOf(t));
    s = reader.read(names[i], wholeBox(t.shape), data.data());
    if (s.ok())
      s = file.write(data.data(), data.size());
  }
  if (s.ok())
    s = file.commit();
  if (!s.ok()) {
    std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("wrote %s: %zu tensors of %s at step %" PRId64 "\n", out.c_str(), names.size(),
              index.model.c_str(), index.iteration);
  return 0;
}

/// Every tensor and the training state, bit for bit; the first difference is named.
int diff(const std::string &a, const std::string &b) {
  CheckpointReader readers[2];
  for (int i = 0; i < 2; ++i)
    if (Status s = CheckpointReader::open(i ? b : a, readers[i]); !s.ok()) {
      std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
      return 2;
    }
  const Index &x = readers[0].index(), &y = readers[1].index();
  auto differ = [&](const std::string &what) {
    std::printf("%s and %s differ: %s\n", readers[0].directory().c_str(),
                readers[1].directory().c_str(), what.c_str());
    return 1;
  };
  if (x.model != y.model)
    return differ(cat("model ", x.model, " against ", y.model));
  if (x.state != y.state)
    for (const auto &[key, value] : x.state)
      if (!y.state.count(key) || y.state.at(key) != value)
        return differ(cat("training state '", key, "': ", value, " against ",
                          y.state.count(key) ? y.state.at(key) : "none"));
  if (x.state != y.state)
    return differ("the training state has other keys");
  std::vector<char> data[2];
  for (const auto &[name, t] : x.tensors) {
    auto other = y.tensors.find(name);
    if (other == y.tensors.end())
      return differ(cat("tensor '", name, "' is only in the first"));
    if (other->second.dtype != t.dtype || other->second.shape != t.shape)
      return differ(cat("tensor '", name, "' has another dtype or shape"));
    for (int i = 0; i < 2; ++i) {
      data[i].resize(bytesOf(t));
      if (Status s = readers[i].read(name, wholeBox(t.shape), data[i].data()); !s.ok()) {
        std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
        return 2;
      }
    }
    if (data[0] != data[1]) {
      size_t at = 0;
      while (data[0][at] == data[1][at])
        ++at;
      return differ(cat("tensor '", name, "', first at element ", at / elementBytes(t.dtype)));
    }
  }
  for (const auto &[name, t] : y.tensors)
    if (!x.tensors.count(name))
      return differ(cat("tensor '", name, "' is only in the second"));
  std::printf("%s and %s hold the same state: %zu tensors, step %" PRId64 "\n",
              readers[0].directory().c_str(), readers[1].directory().c_str(), x.tensors.size(),
              x.iteration);
  return 0;
}


Status importFile(const std::string &in, const std::string &dir, std::string &written) {
  auto fail = [&](const std::string &why) { return Status::failure(cat(in, ": ", why)); };
  int fd = ::open(in.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(cat("cannot open: ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info;
  ::fstat(fd, &info);
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  uint8_t length[8];
  if (size < 8 || !readAt(fd, 0, length, 8))
    return fail("not a safetensors file (shorter than its header length)");
  uint64_t headerBytes = 0;
  for (int i = 0; i < 8; ++i)
    headerBytes |= static_cast<uint64_t>(length[i]) << (8 * i);
  if (headerBytes > size - 8 || headerBytes > (uint64_t{100} << 20))
    return fail("not a safetensors file (its header is longer than the file)");
  std::string text(headerBytes, '\0');
  if (!readAt(fd, 8, text.data(), headerBytes))
    return fail("cannot read its header");
  json header = json::parse(text, nullptr, false);
  if (header.is_discarded() || !header.is_object() || !header.contains("__metadata__"))
    return fail("its header is not safetensors JSON with metadata");
  Index index;
  std::vector<ShardWriter::Entry> entries;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  try {
    const json &meta = header.at("__metadata__");
    if (meta.value("format", "") != kConsolidated)
      return fail(cat("format '", meta.value("format", ""), "', not ", kConsolidated));
    for (const auto &[key, value] : meta.items())
      if (key != "format" && key != "model")
        index.state[key] = value.get<std::string>();
    index.model = meta.at("model").get<std::string>();
    const std::string step = index.state.count("step") ? index.state["step"] : "";
    if (step.empty() || step.size() > 12 ||
        step.find_first_not_of("0123456789") != std::string::npos)
      return fail("its metadata has no step");
    index.iteration = std::stoll(step);
    for (const auto &[name, t] : header.items()) {
      if (name == "__metadata__")
        continue;
      TensorEntry entry;
      entry.dtype = t.at("dtype").get<std::string>();
      entry.shape = t.at("shape").get<std::vector<int64_t>>();
      std::vector<uint64_t> range = t.at("data_offsets").get<std::vector<uint64_t>>();
      if (elementBytes(entry.dtype) == 0)
        return fail(cat("tensor '", name, "' has dtype ", entry.dtype));
      for (int64_t d : entry.shape)
        if (d <= 0 || d > (int64_t{1} << 40))
          return fail(cat("tensor '", name, "' has a dimension of ", d,
                          " (a checkpoint holds no empty tensors)"));
      if (range.size() != 2 || range[0] > range[1] || range[1] > size - 8 - headerBytes ||
          range[1] - range[0] != bytesOf(entry))
        return fail(cat("tensor '", name, "' has bad data offsets"));
      entry.chunks.push_back({0, wholeBox(entry.shape)});
      entries.push_back({name, entry.dtype, wholeBox(entry.shape)});
      ranges.push_back({8 + headerBytes + range[0], range[1] - range[0]});
      index.tensors[name] = std::move(entry);
    }
  } catch (const json::exception &e) {
    return fail(cat("its header is not what safetensors describes: ", e.what()));
  }
  std::random_device device;
  char id[24];
  std::snprintf(id, sizeof id, "%08x%05x", device(), device() & 0xfffff);
  index.saveId = id;
  index.layout = {{"imported_from", in}};
  index.files = {rankFileName(0)};
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::failure(cat(dir, ": cannot create: ", std::strerror(errno)));
  const std::string temporary = cat(dir, "/", iterationName(index.iteration), ".saving-", id);
  if (::mkdir(temporary.c_str(), 0755) != 0)
    return Status::failure(cat(temporary, ": cannot create: ", std::strerror(errno)));
  ShardWriter writer;
  MT_TRY(ShardWriter::create(temporary + "/" + rankFileName(0), index.saveId, entries, writer));
  std::vector<char> data;
  for (const auto &[offset, bytes] : ranges) {
    data.resize(bytes);
    if (!readAt(fd, offset, data.data(), bytes))
      return fail("cannot read its data");
    MT_TRY(writer.append(data.data(), bytes));
  }
  MT_TRY(writer.commit());
  MT_TRY(writeIndex(temporary, index));
  // Only a checkpoint that reads back whole becomes the latest.
  CheckpointReader check;
  Status readable = CheckpointReader::open(temporary, check);
  if (readable.ok())
    readable = check.verifyAll();
  if (!readable.ok()) {
    std::error_code ignored;
    std::filesystem::remove_all(temporary, ignored);
    return readable;
  }
  MT_TRY(publish(dir, temporary, index, 0));
  written = cat(dir, "/", iterationName(index.iteration));
  return Status::success();
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto flag = [&](const std::string &name) {
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i] == name) {
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
      }
    return false;
  };
  auto option = [&](const std::string &name, std::string &value) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == name) {
        value = args[i + 1];
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
                   args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
        return true;
      }
    return false;
  };
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  std::string out;
  const bool tensors = command == "inspect" && flag("--tensors");
  const bool optimizer = command == "export" && flag("--optimizer");
  const bool hasOut = (command == "export" || command == "import") && option("-o", out);
  if (command == "diff") {
    if (args.size() != 2) {
      std::fprintf(stderr, "mtckpt: diff takes two checkpoints\n%s", kUsage);
      return 2;
    }
    return diff(args[0], args[1]);
  }
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-' ||
      ((command == "export" || command == "import") && !hasOut)) {
    std::fprintf(stderr, "mtckpt: bad arguments for '%s'\n%s", command.c_str(), kUsage);
    return 2;
  }
  if (command == "inspect")
    return inspect(args[0], tensors);
  if (command == "verify")
    return verify(args[0]);
  if (command == "export")
    return exportFile(args[0], out, optimizer);
  if (command == "import") {
    std::string written;
    if (Status s = importFile(args[0], out, written); !s.ok()) {
      std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("wrote %s\n", written.c_str());
    return 0;
  }
  std::fprintf(stderr, "mtckpt: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}
