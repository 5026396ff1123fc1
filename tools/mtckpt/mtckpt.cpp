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
//   mtckpt import-hf HF_DIR -o DIR        a Hugging Face directory of an architecture
//                                         runtime/train/HfConfig.h lists becomes DIR's
//                                         latest checkpoint, of weights alone
//   mtckpt export-hf DIR --config config.json -o HF_DIR [--dtype bf16|fp16|fp32]
//                    [--max-shard-size BYTES]
//                                         the reverse: a directory transformers loads
//
// DIR is a save directory (its latest checkpoint) or one checkpoint's iter_N directory.
#include "HuggingFace.h"
#include "train/Safetensors.h"
#include "train/CheckpointFiles.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
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
  mtckpt import-hf HF_DIR -o DIR
  mtckpt export-hf DIR --config config.json -o HF_DIR [--dtype bf16|fp16|fp32]
                   [--max-shard-size BYTES]
DIR is a save directory (its latest checkpoint) or one checkpoint's iter_N directory.
)";

/// The format of a consolidated file: what export writes and import reads.
constexpr const char *kConsolidated = "mtc-consolidated-1";

bool isOptimizerState(const std::string &name) { return name.rfind("optimizer.", 0) == 0; }

uint64_t bytesOf(const TensorEntry &t) { return safetensors::bytesOf(t.dtype, t.shape); }

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

/// What a whole tensor is read through at most, so that no tensor, however large, is held
/// whole in memory.
constexpr uint64_t kStreamBytes = uint64_t{4} << 20;

/// Calls `body` with each block of whole rows (along the first dimension) of a tensor of
/// `t`'s shape, about kStreamBytes each (at least one row), in order: the block's box and
/// its bytes.
Status forEachRowBlock(const TensorEntry &t,
                       const std::function<Status(const Box &, uint64_t)> &body) {
  const Box whole = wholeBox(t.shape);
  if (t.shape.empty())
    return body(whole, bytesOf(t));
  const uint64_t rowBytes = bytesOf(t) / static_cast<uint64_t>(t.shape[0]);
  const int64_t step = static_cast<int64_t>(std::max<uint64_t>(1, kStreamBytes / rowBytes));
  for (int64_t first = 0; first < t.shape[0]; first += step) {
    Box rows = whole;
    rows.offsets[0] = first;
    rows.sizes[0] = std::min(step, t.shape[0] - first);
    MT_TRY(body(rows, rowBytes * static_cast<uint64_t>(rows.sizes[0])));
  }
  return Status::success();
}

/// Tensor `name` into `sink`, block by block through `buffer`.
Status streamTensor(CheckpointReader &reader, const std::string &name, std::vector<char> &buffer,
                    const safetensors::Sink &sink) {
  return forEachRowBlock(reader.index().tensors.at(name), [&](const Box &rows, uint64_t bytes) {
    buffer.resize(bytes);
    MT_TRY(reader.read(name, rows, buffer.data()));
    return sink(buffer.data(), bytes);
  });
}

int exportFile(const std::string &dir, const std::string &out, bool withOptimizer) {
  CheckpointReader reader;
  if (Status s = CheckpointReader::open(dir, reader); !s.ok() || !(s = reader.checkChunks()).ok()) {
    std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
    return 1;
  }
  const Index &index = reader.index();
  std::map<std::string, std::string> meta = {{"format", kConsolidated}, {"model", index.model}};
  for (const auto &[key, value] : index.state)
    meta[key] = value;
  std::vector<safetensors::Entry> entries;
  for (const auto &[name, t] : index.tensors)
    if (withOptimizer || !isOptimizerState(name))
      entries.push_back({name, t.dtype, t.shape});
  // Each tensor streams through a buffer of at most kStreamBytes (or one row), whatever
  // its size.
  std::vector<char> buffer;
  if (Status s = safetensors::write(out, entries, meta,
                                    [&](size_t i, const safetensors::Sink &sink) {
                                      return streamTensor(reader, entries[i].name, buffer, sink);
                                    });
      !s.ok()) {
    std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("wrote %s: %zu tensors of %s at step %" PRId64 "\n", out.c_str(), entries.size(),
              index.model.c_str(), index.iteration);
  return 0;
}

/// Every tensor and the training state, bit for bit; the first difference is named.
int diff(const std::string &a, const std::string &b) {
  CheckpointReader readers[2];
  for (int i = 0; i < 2; ++i)
    if (Status s = CheckpointReader::open(i ? b : a, readers[i]);
        !s.ok() || !(s = readers[i].checkChunks()).ok()) {
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
    // Block by block, so that no tensor is held whole.
    uint64_t before = 0, firstDifference = UINT64_MAX;
    Status read = forEachRowBlock(t, [&](const Box &rows, uint64_t bytes) {
      for (int i = 0; i < 2; ++i) {
        data[i].resize(bytes);
        MT_TRY(readers[i].read(name, rows, data[i].data()));
      }
      if (data[0] != data[1] && firstDifference == UINT64_MAX) {
        size_t at = 0;
        while (data[0][at] == data[1][at])
          ++at;
        firstDifference = before + at;
      }
      before += bytes;
      return Status::success();
    });
    if (!read.ok()) {
      std::fprintf(stderr, "mtckpt: %s\n", read.message().c_str());
      return 2;
    }
    if (firstDifference != UINT64_MAX)
      return differ(
          cat("tensor '", name, "', first at element ", firstDifference / elementBytes(t.dtype)));
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
  safetensors::File file;
  MT_TRY(safetensors::File::open(in, file));
  const json &meta = file.metadata();
  if (meta.value("format", "") != kConsolidated)
    return fail(cat("format '", meta.value("format", ""), "', not ", kConsolidated));
  Index index;
  for (const auto &[key, value] : meta.items())
    if (key != "format" && key != "model")
      index.state[key] = value.get<std::string>();
  index.model = meta.value("model", "");
  const std::string step = index.state.count("step") ? index.state["step"] : "";
  if (step.empty() || step.size() > 12 || step.find_first_not_of("0123456789") != std::string::npos)
    return fail("its metadata has no step");
  index.iteration = std::stoll(step);
  for (const auto &[name, t] : file.tensors())
    index.tensors[name] = {t.dtype, t.shape, {}};
  index.layout = {{"imported_from", in}};
  return writeWholeCheckpoint(
      dir, index,
      [&](const std::string &name, std::vector<char> &data) { return file.read(name, data); },
      written);
}

} // namespace

int run(int argc, char **argv) {
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
  const bool writes = command == "export" || command == "import" || command == "import-hf" ||
                      command == "export-hf";
  const bool hasOut = writes && option("-o", out);
  hf::ExportOptions hfOptions;
  std::string dtype, shardBytes;
  const bool hasConfig = command == "export-hf" && option("--config", hfOptions.config);
  if (command == "export-hf" && option("--dtype", dtype)) {
    hfOptions.dtype = dtype == "bf16" ? "BF16" : dtype == "fp16" ? "F16" : dtype == "fp32" ? "F32" : "";
    if (hfOptions.dtype.empty()) {
      std::fprintf(stderr, "mtckpt: --dtype must be bf16, fp16 or fp32, got '%s'\n", dtype.c_str());
      return 2;
    }
  }
  if (command == "export-hf" && option("--max-shard-size", shardBytes)) {
    char *end = nullptr;
    hfOptions.maxShardBytes = std::strtoull(shardBytes.c_str(), &end, 10);
    if (shardBytes.empty() || !std::isdigit(static_cast<unsigned char>(shardBytes[0])) || *end ||
        hfOptions.maxShardBytes == 0) {
      std::fprintf(stderr, "mtckpt: --max-shard-size must be a positive number of bytes, got "
                           "'%s'\n", shardBytes.c_str());
      return 2;
    }
  }
  if (command == "diff") {
    if (args.size() != 2) {
      std::fprintf(stderr, "mtckpt: diff takes two checkpoints\n%s", kUsage);
      return 2;
    }
    return diff(args[0], args[1]);
  }
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-' ||
      (writes && !hasOut) || (command == "export-hf" && !hasConfig)) {
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
  if (command == "import-hf" || command == "export-hf") {
    std::string report;
    Status s = command == "import-hf" ? hf::importDirectory(args[0], out, report)
                                      : hf::exportDirectory(args[0], out, hfOptions, report);
    if (!s.ok()) {
      std::fprintf(stderr, "mtckpt: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("%s\n", report.c_str());
    return 0;
  }
  std::fprintf(stderr, "mtckpt: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) { // a reader's check missed a malformed input
    std::fprintf(stderr, "mtckpt: %s\n", e.what());
    return 1;
  }
}
