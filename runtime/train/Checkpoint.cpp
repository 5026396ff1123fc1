#include "train/Checkpoint.h"
#include "train/CheckpointFiles.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sys/stat.h>
#include <thread>
#include <tuple>
#include <utility>

namespace mt {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointReader;
using checkpoint::ShardWriter;

/// A double as text that reads back to the same value.
std::string roundTrip(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
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
  case plan::DType::I8:
    return "I8";
  }
  return "?";
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> globalShape(const plan::Param &p) {
  return std::vector<int64_t>(p.global_shape()->begin(), p.global_shape()->end());
}

/// The weights, gradients and moments of a plan are kept in its accumulator type.
plan::DType storeType(const plan::Plan &plan) { return accumulatorType(plan.precision()); }

/// Whether the plan keeps state `kind` in data-parallel shares (the distributed
/// optimizer's moments, and its master weights under mixed precision).
bool shardedKind(const plan::Plan &plan, int kind) {
  if (!plan.distributed_optimizer() || dataParts(plan) == 1)
    return false;
  return kind != 0 || storeType(plan) != plan.precision();
}

/// The box of the global tensor that the rank at (tpRank, dataRank) holds: its tensor-
/// parallel block, or of an expert's weight its expert rank's (Group::Expert: ep
/// consecutive data ranks).
Box tensorParallelBox(const plan::Plan &plan, const plan::Param &spec, int tpRank, int dataRank) {
  Box box{std::vector<int64_t>(spec.shape()->size(), 0),
          std::vector<int64_t>(spec.shape()->begin(), spec.shape()->end())};
  const int block = spec.expert_parallel() ? dataRank % plan.grid()->ep() : tpRank;
  if (spec.shard_dim() >= 0)
    box.offsets[spec.shard_dim()] = block * box.sizes[spec.shard_dim()];
  return box;
}

/// The boxes of `slot`'s tensor of state `kind` that the rank at (tpRank, dataRank) of
/// the stage with `layout` holds; each is a contiguous run of its local tensor.
std::vector<Box> heldBoxes(const plan::Plan &plan, const FlatLayout &layout,
                           const FlatLayout::Slot &slot, int kind, int tpRank, int dataRank) {
  const plan::Param &spec = *plan.params()->Get(slot.index);
  Box local = tensorParallelBox(plan, spec, tpRank, dataRank);
  if (!shardedKind(plan, kind))
    return {local};
  std::vector<Box> boxes;
  layout.shareOf(dataRank).forEachIn(
      slot.offset, slot.offset + slot.numel, [&](int64_t begin, int64_t end) {
        for (Box &b : boxesOfRange(local.sizes, begin - slot.offset, end - slot.offset)) {
          for (size_t d = 0; d < b.offsets.size(); ++d)
            b.offsets[d] += local.offsets[d];
          boxes.push_back(std::move(b));
        }
      });
  return boxes;
}

/// The row-major index, in the local tensor held as box `local`, of `box`'s first element.
int64_t localIndex(const Box &box, const Box &local) {
  int64_t index = 0, stride = 1;
  for (size_t d = box.offsets.size(); d-- > 0;) {
    index += (box.offsets[d] - local.offsets[d]) * stride;
    stride *= local.sizes[d];
  }
  return index;
}

struct BoxOrder {
  bool operator()(const Box &a, const Box &b) const {
    return std::tie(a.offsets, a.sizes) < std::tie(b.offsets, b.sizes);
  }
};

/// Replicated state smaller than this is not split between its holders.
constexpr uint64_t kSplitBytes = uint64_t{1} << 20;

/// A test's fault at a chosen point of a save: MT_CHECKPOINT_FAULT=RANK:POINT kills the
/// rank at a phase (POINT its name) or a number of bytes into its file, or, with POINT
/// `fail`, makes its write fail.
bool killRequested(int worldRank, const std::string &point) {
  const char *spec = std::getenv("MT_CHECKPOINT_FAULT");
  return spec && std::string(spec) == std::to_string(worldRank) + ":" + point;
}
void killPoint(int worldRank, const char *phase) {
  if (killRequested(worldRank, phase))
    std::raise(SIGKILL);
}
uint64_t killAfterBytes(int worldRank) {
  const char *spec = std::getenv("MT_CHECKPOINT_FAULT");
  const std::string prefix = std::to_string(worldRank) + ":";
  if (!spec || std::strncmp(spec, prefix.c_str(), prefix.size()) != 0 ||
      !std::isdigit(static_cast<unsigned char>(spec[prefix.size()])))
    return 0;
  return std::strtoull(spec + prefix.size(), nullptr, 10);
}

/// Every rank ends with the same verdict: a failure anywhere is a failure everywhere.
/// Only where every rank arrives: a rank that fails before returns its failure at
/// once, and mtrun takes the job down with it rather than leave the others waiting.
Status agree(Comm &comm, const Status &status, const char *what) {
  double failures = status.ok() ? 0.0 : 1.0;
  const Status reduced = comm.allReduceSumWorld(failures);
  if (!status.ok())
    return status; // this rank's own failure first
  if (!reduced.ok())
    return reduced;
  if (failures == 0)
    return status;
  return Status::failure(cat("another rank failed to ", what, " the checkpoint"));
}

/// World rank 0's number, on every rank.
Status shareFromRankZero(Comm &comm, double &value) {
  if (comm.position().worldRank() != 0)
    value = 0;
  MT_TRY(comm.allReduceSumWorld(value));
  return Status::success();
}

Status ensureDirectory(const std::string &dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0)
    return S_ISDIR(st.st_mode) ? Status::success()
                               : Status::failure(cat(dir, ": exists and is not a directory"));
  if (::mkdir(dir.c_str(), 0755) != 0)
    return Status::failure(cat(dir, ": cannot create save directory: ", std::strerror(errno)));
  return Status::success();
}

std::map<std::string, std::string> stateText(const plan::Plan &plan, const TrainingState &state) {
  std::map<std::string, std::string> meta = {{"step", std::to_string(state.step)},
                                             {"data_position", std::to_string(state.dataPosition)},
                                             {"seed", std::to_string(state.seed)}};
  if (state.trainDocuments)
    meta["train_documents"] = cat(state.trainDocuments->first, ",", state.trainDocuments->second);
  if (!state.trainBlend.empty())
    meta["train_blend"] = state.trainBlend;
  if (!state.schedule.empty())
    meta["schedule"] = state.schedule;
  if (plan.precision() == plan::DType::F16) { // the loss scaler's state
    meta["loss_scale"] = roundTrip(state.lossScaler.scale);
    meta["loss_scale_good_steps"] = std::to_string(state.lossScaler.goodSteps);
    meta["loss_scale_hysteresis_left"] = std::to_string(state.lossScaler.hysteresisLeft);
    meta["skipped_steps"] = std::to_string(state.skippedSteps);
  }
  return meta;
}

Status parseState(const std::string &where, const std::map<std::string, std::string> &meta,
                  TrainingState &loaded) {
  auto fail = [&](const std::string &why) {
    return Status::failure(cat(where, ": corrupt checkpoint: ", why));
  };
  auto number = [&](const char *key, uint64_t &out) {
    auto it = meta.find(key);
    const std::string text = it == meta.end() ? "" : it->second;
    size_t used = 0;
    try {
      out = std::stoull(text, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    return !text.empty() && std::isdigit(static_cast<unsigned char>(text[0])) &&
           used == text.size();
  };
  uint64_t step = 0;
  if (!number("step", step) || !number("data_position", loaded.dataPosition) ||
      !number("seed", loaded.seed) || step > (uint64_t{1} << 40))
    return fail("bad training state in its index");
  loaded.step = static_cast<int64_t>(step);
  loaded.trainDocuments.reset(); // none recorded: all documents
  if (auto it = meta.find("train_documents"); it != meta.end()) {
    const std::string &text = it->second;
    const size_t comma = text.find(',');
    auto count = [&](const std::string &digits) { // at most 18 digits: no overflow
      const bool ok = !digits.empty() && digits.size() <= 18 &&
                      std::all_of(digits.begin(), digits.end(),
                                  [](unsigned char c) { return std::isdigit(c); });
      return ok ? std::optional<uint64_t>(std::stoull(digits)) : std::nullopt;
    };
    const auto first = count(text.substr(0, comma));
    const auto end = comma == std::string::npos ? std::nullopt : count(text.substr(comma + 1));
    if (!first || !end || *first > *end)
      return fail("bad training documents '" + text.substr(0, 40) + "' in its index");
    loaded.trainDocuments = {*first, *end};
  }
  // Compared whole with the resuming run's: printable and bounded.
  for (auto [key, out, what] : {std::tuple{"train_blend", &loaded.trainBlend, "training blend"},
                                std::tuple{"schedule", &loaded.schedule, "schedule"}}) {
    out->clear();
    if (auto it = meta.find(key); it != meta.end()) {
      const std::string &text = it->second;
      if (text.empty() || text.size() > kMaxBlendText ||
          !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isprint(c); }))
        return fail(cat("bad ", what, " in its index"));
      *out = text;
    }
  }
  // fp16's loss scaler (only fp16 runs write it; otherwise this run's settings stand).
  if (auto it = meta.find("loss_scale"); it != meta.end()) {
    uint64_t good = 0, hysteresis = 0, skipped = 0;
    char *end = nullptr;
    const std::string &scale = it->second;
    loaded.lossScaler.scale = std::strtod(scale.c_str(), &end);
    if (scale.empty() || *end || !(loaded.lossScaler.scale > 0) ||
        !std::isfinite(loaded.lossScaler.scale) || !number("loss_scale_good_steps", good) ||
        !number("loss_scale_hysteresis_left", hysteresis) ||
        !number("skipped_steps", skipped) || good > (uint64_t{1} << 40) ||
        hysteresis > (uint64_t{1} << 40) || skipped > step)
      return fail("bad loss-scaler state in its index");
    loaded.lossScaler.goodSteps = static_cast<int64_t>(good);
    loaded.lossScaler.hysteresisLeft = static_cast<int64_t>(hysteresis);
    loaded.skippedSteps = static_cast<int64_t>(skipped);
  }
  return Status::success();
}

/// The store holding this rank's state of `kind` (device memory) and the flat elements
/// it holds.
void storeOf(Executor &executor, const AdamW &optimizer, int kind, TensorView &store,
             FlatShare &held) {
  store = kind == 0 ? executor.flatWeights() : kind == 1 ? optimizer.expAvg() : optimizer.expAvgSq();
  held = kind == 0 ? executor.masterShare() : optimizer.share();
}

/// A line of /proc/self/status ("VmRSS", "VmHWM") in bytes, or -1.
int64_t processMemory(const char *key) {
  std::FILE *f = std::fopen("/proc/self/status", "r");
  if (!f)
    return -1;
  char line[256];
  int64_t kib = -1;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0 && line[n] == ':')
      kib = std::strtoll(line + n + 1, nullptr, 10);
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

/// Resets the peak resident memory (VmHWM) to the current; false where Linux will not.
bool resetMemoryPeak() {
  std::FILE *f = std::fopen("/proc/self/clear_refs", "w");
  if (!f)
    return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

/// Where chunk `c`'s bytes lie in this rank's (device) memory: a contiguous run.
const char *chunkSource(Executor &executor, const AdamW &optimizer, const SaveChunk &c,
                        const std::vector<const Executor::Parameter *> &byIndex) {
  const Executor::Parameter &p = *byIndex[c.param];
  TensorView store;
  FlatShare held;
  storeOf(executor, optimizer, c.kind, store, held);
  const Box local = tensorParallelBox(executor.plan(), *p.spec, executor.comm().rank(Group::Tensor),
                                      executor.comm().rank(Group::Data));
  return static_cast<const char *>(store.data) +
         dtypeBytes(store.dtype) * held.local(p.offset + localIndex(c.box, local));
}

/// This rank's file of chunks `mine` in `temporary`; `emit` appends each chunk's bytes.
Status writeShard(const std::string &temporary, const std::string &saveId, const plan::Plan &plan,
                  int worldRank, const std::vector<SaveChunk> &mine,
                  const std::function<Status(size_t, ShardWriter &)> &emit, uint64_t &fileBytes) {
  const char *dtype = safetensorsDType(storeType(plan));
  std::vector<ShardWriter::Entry> entries;
  for (const SaveChunk &c : mine)
    entries.push_back(
        {stateTensorName(c.kind, plan.params()->Get(c.param)->name()->str()), dtype, c.box});
  ShardWriter writer;
  MT_TRY(ShardWriter::create(temporary + "/" + checkpoint::rankFileName(worldRank), saveId,
                             std::move(entries), writer));
  writer.killAfter(killAfterBytes(worldRank));
  if (killRequested(worldRank, "fail"))
    return Status::failure(cat(temporary, ": a write failure a test asked for"));
  for (size_t i = 0; i < mine.size(); ++i)
    MT_TRY(emit(i, writer));
  fileBytes = writer.bytes();
  return writer.commit();
}

} // namespace

std::string stateTensorName(int kind, const std::string &param) {
  static const char *const prefixes[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
  return prefixes[kind] + param;
}

std::vector<SaveChunk> assignChunks(const plan::Plan &plan) {
  // World ranks run tp fastest, then Group::Data's (context within data), then pp.
  const int tp = plan.grid()->tp(), dp = dataParts(plan), pp = plan.grid()->pp();
  std::vector<FlatLayout> layouts;
  for (int s = 0; s < pp; ++s)
    layouts.push_back(flatLayout(plan, s));
  const uint64_t element = dtypeBytes(storeType(plan));
  struct Item {
    SaveChunk chunk;
    std::vector<int> holders; // world ranks, ascending
    uint64_t bytes;
  };
  std::vector<Item> items;
  for (flatbuffers::uoffset_t index = 0; index < plan.params()->size(); ++index)
    for (int kind = 0; kind < kStateKinds; ++kind) {
      // The distinct boxes of this tensor and the ranks that hold each. Every stage
      // holding the parameter has the same copy; sharded state is cut where each
      // stage's shares fall, so only its first holder's cuts are used.
      std::map<Box, std::vector<int>, BoxOrder> holders;
      std::vector<Box> order;
      bool first = true;
      for (int s = 0; s < pp; ++s) {
        const FlatLayout &layout = layouts[s];
        auto slot = std::find_if(layout.slots.begin(), layout.slots.end(),
                                 [&](const FlatLayout::Slot &x) { return x.index == (int32_t)index; });
        if (slot == layout.slots.end() || (!first && shardedKind(plan, kind)))
          continue;
        first = false;
        for (int d = 0; d < dp; ++d)
          for (int t = 0; t < tp; ++t)
            for (Box &box : heldBoxes(plan, layout, *slot, kind, t, d)) {
              auto [it, added] = holders.try_emplace(box);
              if (added)
                order.push_back(box);
              it->second.push_back((s * dp + d) * tp + t);
            }
      }
      for (const Box &box : order) {
        const std::vector<int> &ranks = holders[box];
        const uint64_t bytes = element * static_cast<uint64_t>(box.numel());
        const int64_t rows = box.sizes.empty() ? 1 : box.sizes[0];
        const int64_t parts = std::max<int64_t>(
            1, std::min<int64_t>({static_cast<int64_t>(ranks.size()), rows,
                                  static_cast<int64_t>((bytes + kSplitBytes - 1) / kSplitBytes)}));
        for (int64_t j = 0; j < parts; ++j) {
          Box part = box;
          if (!part.sizes.empty()) {
            part.offsets[0] += rows * j / parts;
            part.sizes[0] = rows * (j + 1) / parts - rows * j / parts;
          }
          items.push_back({{kind, static_cast<int32_t>(index), part, -1}, ranks,
                           element * static_cast<uint64_t>(part.numel())});
        }
      }
    }
  // Largest first, each to its least-loaded holder (the lowest rank on a tie).
  std::vector<size_t> bySize(items.size());
  std::iota(bySize.begin(), bySize.end(), 0);
  std::stable_sort(bySize.begin(), bySize.end(),
                   [&](size_t a, size_t b) { return items[a].bytes > items[b].bytes; });
  std::vector<uint64_t> load(static_cast<size_t>(tp) * dp * pp, 0);
  for (size_t i : bySize) {
    int best = items[i].holders.front();
    for (int r : items[i].holders)
      if (load[r] < load[best])
        best = r;
    items[i].chunk.writer = best;
    load[best] += items[i].bytes;
  }
  std::vector<SaveChunk> chunks;
  for (Item &item : items)
    chunks.push_back(std::move(item.chunk));
  return chunks;
}

Status findCheckpoint(const std::string &dir, Comm &comm, bool &found) {
  double holders = checkpoint::holdsCheckpoint(dir) ? 1.0 : 0.0;
  MT_TRY(comm.allReduceSumWorld(holders));
  const int world = comm.position().worldSize();
  if (holders != 0 && holders != world)
    return Status::failure(cat(dir, ": ", holders, " of ", world,
                               " ranks see a checkpoint there; the save directory must be shared"));
  found = holders == world;
  return Status::success();
}

struct CheckpointSaver::Pending {
  std::string dir, temporary, saveId;
  TrainingState state;
  std::vector<SaveChunk> chunks, mine;
  std::vector<char> staged; // asynchronous: this rank's chunks, in order
  std::thread writer;
  std::atomic<bool> done{false};
  Status written = Status::success();
  SaveReport report;
  std::chrono::steady_clock::time_point started, writeEnded;
};

CheckpointSaver::CheckpointSaver(Executor &executor, const AdamW &optimizer,
                                 CheckpointOptions options)
    : executor_(executor), optimizer_(optimizer), options_(options) {}

CheckpointSaver::~CheckpointSaver() {
  if (pending_ && pending_->writer.joinable())
    pending_->writer.join(); // the job is ending on an error: the save is never committed
}

Status CheckpointSaver::save(const std::string &dir, const TrainingState &state) {
  MT_TRY(finish());
  auto pending = std::make_unique<Pending>();
  Pending &p = *pending;
  p.started = std::chrono::steady_clock::now();
  if (resetMemoryPeak())
    p.report.residentBefore = processMemory("VmRSS");
  p.report.step = state.step;
  Comm &comm = executor_.comm();
  const plan::Plan &plan = executor_.plan();
  const int worldRank = comm.position().worldRank();
  // A name for this save, from world rank 0: every file carries it, so that files of
  // two saves are never taken for one checkpoint.
  double id = 0;
  if (worldRank == 0) {
    std::random_device device;
    const uint64_t bits =
        (static_cast<uint64_t>(device()) << 32 ^ device() ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())) &
        ((uint64_t{1} << 52) - 1); // exact in a double
    id = static_cast<double>(bits);
  }
  MT_TRY(shareFromRankZero(comm, id));
  char saveId[24];
  std::snprintf(saveId, sizeof saveId, "%013llx", static_cast<unsigned long long>(id));
  p.dir = dir;
  p.saveId = saveId;
  p.state = state;
  p.temporary = cat(dir, "/", checkpoint::iterationName(state.step), ".saving-", saveId);
  Status prepared = Status::success();
  if (worldRank == 0) {
    prepared = ensureDirectory(dir);
    if (prepared.ok() && ::mkdir(p.temporary.c_str(), 0755) != 0)
      prepared = Status::failure(cat(p.temporary, ": cannot create: ", std::strerror(errno)));
  }
  MT_TRY(agree(comm, prepared, "save"));

  p.chunks = assignChunks(plan);
  for (const SaveChunk &c : p.chunks)
    if (c.writer == worldRank)
      p.mine.push_back(c);
  killPoint(worldRank, "before-files");
  const size_t element = dtypeBytes(storeType(plan));
  std::vector<const Executor::Parameter *> byIndex(plan.params()->size(), nullptr);
  for (const Executor::Parameter &q : executor_.parameters())
    byIndex[q.index] = &q;
  if (!options_.async) {
    // Through a staging buffer of at most stagingBytes, piece by piece.
    const size_t piece = std::max<size_t>(options_.stagingBytes / element, 1) * element;
    std::vector<char> staging;
    auto emit = [&](size_t i, ShardWriter &writer) -> Status {
      const char *from = chunkSource(executor_, optimizer_, p.mine[i], byIndex);
      const size_t bytes = element * static_cast<size_t>(p.mine[i].box.numel());
      for (size_t done = 0; done < bytes; done += piece) {
        const size_t n = std::min(bytes - done, piece);
        staging.resize(std::max(staging.size(), n));
        MT_TRY(executor_.backend().copyToHost(staging.data(), from + done, n));
        MT_TRY(writer.append(staging.data(), n));
      }
      return Status::success();
    };
    if (!p.mine.empty())
      p.written = writeShard(p.temporary, p.saveId, plan, worldRank, p.mine, emit,
                             p.report.bytesThisRank);
    p.writeEnded = std::chrono::steady_clock::now();
    p.done = true;
    pending_ = std::move(pending);
    return finish();
  }

  // Asynchronous: training waits only while this rank's chunks are copied to host
  // memory; a thread writes them. A failure here is reported when the save completes,
  // so that every rank takes the same path.
  size_t total = 0;
  for (const SaveChunk &c : p.mine)
    total += element * static_cast<size_t>(c.box.numel());
  try {
    p.staged.resize(total);
  } catch (const std::bad_alloc &) {
    p.written = Status::failure(cat("out of host memory staging ", total, " bytes of checkpoint"));
  }
  for (size_t i = 0, at = 0; p.written.ok() && i < p.mine.size(); ++i) {
    const size_t bytes = element * static_cast<size_t>(p.mine[i].box.numel());
    p.written = executor_.backend().copyToHost(p.staged.data() + at,
                                               chunkSource(executor_, optimizer_, p.mine[i], byIndex), bytes);
    at += bytes;
  }
  p.report.blockedSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count();
  if (!p.written.ok() || p.mine.empty()) {
    p.writeEnded = std::chrono::steady_clock::now();
    p.done = true;
  } else {
    p.writer = std::thread([&p, &plan, worldRank, element] {
      std::vector<size_t> begins;
      for (size_t i = 0, at = 0; i < p.mine.size(); ++i) {
        begins.push_back(at);
        at += element * static_cast<size_t>(p.mine[i].box.numel());
      }
      auto emit = [&](size_t i, ShardWriter &writer) {
        return writer.append(p.staged.data() + begins[i],
                             element * static_cast<size_t>(p.mine[i].box.numel()));
      };
      p.written =
          writeShard(p.temporary, p.saveId, plan, worldRank, p.mine, emit, p.report.bytesThisRank);
      std::vector<char>().swap(p.staged);
      p.writeEnded = std::chrono::steady_clock::now();
      p.done.store(true, std::memory_order_release);
    });
  }
  pending_ = std::move(pending);
  return Status::success();
}

Status CheckpointSaver::poll() {
  if (!pending_)
    return Status::success();
  Comm &comm = executor_.comm();
  double done = pending_->done.load(std::memory_order_acquire) ? 1.0 : 0.0;
  MT_TRY(comm.allReduceSumWorld(done));
  return done == comm.position().worldSize() ? finish() : Status::success();
}

Status CheckpointSaver::finish() {
  if (!pending_)
    return Status::success();
  std::unique_ptr<Pending> pending = std::move(pending_);
  Pending &p = *pending;
  if (p.writer.joinable())
    p.writer.join();
  const auto committing = std::chrono::steady_clock::now();
  Comm &comm = executor_.comm();
  const plan::Plan &plan = executor_.plan();
  const int worldRank = comm.position().worldRank();
  Status allWritten = agree(comm, p.written, "save");
  if (!allWritten.ok()) {
    if (worldRank == 0) {
      std::error_code ignored;
      fs::remove_all(p.temporary, ignored);
    }
    if (!options_.async)
      return allWritten;
    return Status::failure(cat("the asynchronous save of step ", p.state.step,
                               " failed: ", allWritten.message()));
  }

  Status committed = Status::success();
  if (worldRank == 0) {
    checkpoint::Index index;
    index.saveId = p.saveId;
    index.iteration = p.state.step;
    index.model = plan.model()->str();
    index.layout = {{"tp", std::to_string(plan.grid()->tp())},
                    {"pp", std::to_string(plan.grid()->pp())},
                    {"dp", std::to_string(plan.grid()->dp())},
                    {"cp", std::to_string(plan.grid()->cp())},
                    {"distributed_optimizer", plan.distributed_optimizer() ? "true" : "false"},
                    {"precision", safetensorsDType(plan.precision())}};
    index.state = stateText(plan, p.state);
    std::map<int, int> fileOf; // world rank -> its file in the index
    for (const SaveChunk &c : p.chunks)
      fileOf.emplace(c.writer, 0);
    for (auto &[rank, file] : fileOf) {
      file = static_cast<int>(index.files.size());
      index.files.push_back(checkpoint::rankFileName(rank));
    }
    for (const SaveChunk &c : p.chunks) {
      const plan::Param &spec = *plan.params()->Get(c.param);
      checkpoint::TensorEntry &entry = index.tensors[stateTensorName(c.kind, spec.name()->str())];
      entry.dtype = safetensorsDType(storeType(plan));
      entry.shape = globalShape(spec);
      entry.vocabRows = spec.vocab_rows();
      entry.chunks.push_back({fileOf[c.writer], c.box});
    }
    committed = checkpoint::publish(p.dir, p.temporary, index, options_.keep,
                                    [&](const char *phase) { killPoint(worldRank, phase); });
  }
  MT_TRY(agree(comm, committed, "save"));
  SaveReport &r = p.report;
  if (r.residentBefore >= 0)
    r.residentPeak = processMemory("VmHWM");
  double bytes = static_cast<double>(r.bytesThisRank);
  MT_TRY(comm.allReduceSumWorld(bytes));
  r.bytesAllRanks = static_cast<uint64_t>(bytes);
  const auto now = std::chrono::steady_clock::now();
  r.seconds = std::chrono::duration<double>(p.writeEnded - p.started).count() +
              std::chrono::duration<double>(now - committing).count();
  if (!options_.async)
    r.blockedSeconds = std::chrono::duration<double>(now - p.started).count();
  report_ = r;
  return Status::success();
}

bool CheckpointSaver::takeReport(SaveReport &report) {
  if (!report_)
    return false;
  report = *std::exchange(report_, std::nullopt);
  return true;
}

namespace {

/// What a rank read of a checkpoint, in host memory, before anything changes.
struct Loaded {
  TrainingState state;
  std::vector<char> host[kStateKinds]; // its weights and moments, as its stores hold them
  std::string saveId, note;
  uint64_t bytesRead = 0;
};

/// The first value of state `kind` (the flat elements `held` of `layout`) that no
/// training writes: a weight or a moment that is not finite, a negative second moment
/// (Adam's running mean of squares). Such a state would train to NaN weights.
template <typename T>
Status checkValues(const std::vector<char> &host, int kind, const FlatShare &held,
                   const FlatLayout &layout, const plan::Plan &plan, const std::string &where) {
  const T *values = reinterpret_cast<const T *>(host.data());
  const size_t n = host.size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) {
    const T v = values[i];
    if (std::isfinite(v) && !(kind == 2 && v < 0))
      continue;
    int64_t at = static_cast<int64_t>(i); // its flat index
    for (const FlatShare::Run &run : held.runs) {
      if (at < run.end - run.begin) {
        at += run.begin;
        break;
      }
      at -= run.end - run.begin;
    }
    std::string tensor = "padding";
    for (const FlatLayout::Slot &slot : layout.slots)
      if (at >= slot.offset && at < slot.offset + slot.numel)
        tensor = stateTensorName(kind, plan.params()->Get(slot.index)->name()->str());
    return Status::failure(cat(where, ": tensor '", tensor, "' holds ",
                               std::isnan(v)       ? "a NaN"
                               : !std::isfinite(v) ? "an infinity"
                                                   : "a negative second moment",
                               ", which no training writes: the checkpoint is corrupt"));
  }
  return Status::success();
}

Status readCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
                      size_t stagingBytes,
                      const std::function<Status(const TrainingState &)> &resumable, Loaded &out) {
  CheckpointReader reader;
  MT_TRY(CheckpointReader::open(dir, reader));
  const std::string where = reader.directory();
  auto fail = [&](const std::string &why) { return Status::failure(cat(where, ": ", why)); };
  const plan::Plan &plan = executor.plan();
  const checkpoint::Index &index = reader.index();

  // Check everything before changing anything: every tensor of the model, whichever
  // stage holds it, and nothing else. A checkpoint without a training state holds
  // weights alone (a Hugging Face import): training starts from them at step 0 with
  // zero moments, as Megatron's --finetune does.
  const bool weightsOnly = !index.state.count("step");
  const int kinds = weightsOnly ? 1 : kStateKinds;
  const char *dtype = safetensorsDType(storeType(plan));
  std::set<std::string> expected;
  for (int kind = 0; kind < kinds; ++kind)
    for (const plan::Param *spec : *plan.params()) {
      const std::string name = stateTensorName(kind, spec->name()->str());
      expected.insert(name);
      auto it = index.tensors.find(name);
      if (it == index.tensors.end())
        return fail(cat("tensor '", name, "' is missing"));
      if (!checkpoint::holdsTable(it->second, globalShape(*spec), spec->vocab_rows()))
        return fail(cat("tensor '", name, "' has shape ", shapeString(it->second.shape),
                        it->second.vocabRows ? cat(" for a vocabulary of ", it->second.vocabRows)
                                             : std::string(),
                        ", the plan expects ", shapeString(globalShape(*spec)),
                        spec->vocab_rows() ? cat(" (any rows from ", spec->vocab_rows(),
                                                 ", the vocabulary, on)")
                                           : std::string()));
      if (it->second.dtype != dtype)
        return fail(cat("tensor '", name, "' is ", it->second.dtype, ", the plan expects ",
                        dtype));
    }
  for (const auto &[name, entry] : index.tensors)
    if (!expected.count(name))
      return fail(cat("tensor '", name, "' is not a tensor of model '", plan.model()->str(), "'"));
  if (!weightsOnly)
    MT_TRY(parseState(where + "/" + checkpoint::kIndex, index.state, out.state));
  if (!weightsOnly && resumable)
    MT_TRY(resumable(out.state));
  out.saveId = index.saveId;

  // This rank's state, read straight into host copies of its stores: all of its
  // stage's weights (the compute copy needs them even where the master weights are
  // shared out), and the moments it keeps.
  Comm &comm = executor.comm();
  const int tpRank = comm.rank(Group::Tensor), dataRank = comm.rank(Group::Data);
  const FlatLayout layout = flatLayout(plan, comm.rank(Group::Pipeline));
  const size_t element = dtypeBytes(storeType(plan));
  const int64_t total = executor.flatGrads().numel(), count = optimizer.share().numel();
  std::vector<char> *host = out.host;
  host[0].assign(element * total, 0);
  host[1].assign(element * count, 0);
  host[2].assign(element * count, 0);
  // Each box as far as the checkpoint holds it: only a padded vocabulary's rows can lie
  // past its tensor (a checkpoint padded less, or imported unpadded), and they stay zero.
  // A box is whole rows or part of one, so the rows it holds come first in its memory.
  auto readHeld = [&](const std::string &name, const Box &box, char *target) -> Status {
    std::optional<Box> held = intersect(box, wholeBox(index.tensors.at(name).shape));
    return held ? reader.read(name, *held, target, stagingBytes) : Status::success();
  };
  for (const FlatLayout::Slot &slot : layout.slots) {
    const plan::Param &spec = *plan.params()->Get(slot.index);
    const Box local = tensorParallelBox(plan, spec, tpRank, dataRank);
    MT_TRY(readHeld(stateTensorName(0, spec.name()->str()), local,
                    host[0].data() + element * slot.offset));
    for (int kind = 1; kind < kinds; ++kind)
      for (const Box &box : heldBoxes(plan, layout, slot, kind, tpRank, dataRank))
        MT_TRY(readHeld(stateTensorName(kind, spec.name()->str()), box,
                        host[kind].data() + element * optimizer.share().local(
                                                          slot.offset + localIndex(box, local))));
  }
  out.bytesRead = reader.bytesRead();
  out.note = reader.note();
  for (int kind = 0; kind < kinds; ++kind) {
    const FlatShare held = kind == 0 ? layout.whole() : optimizer.share();
    MT_TRY(storeType(plan) == plan::DType::F64
               ? checkValues<double>(host[kind], kind, held, layout, plan, where)
               : checkValues<float>(host[kind], kind, held, layout, plan, where));
  }
  return Status::success();
}

/// This rank's read state into its stores (device memory).
Status install(Executor &executor, const AdamW &optimizer, const Loaded &loaded) {
  const std::vector<char> *host = loaded.host;
  const size_t element = dtypeBytes(storeType(executor.plan()));
  Backend &backend = executor.backend();
  if (executor.masterSharded()) {
    // This rank's shares of the master weights, and the compute copy of all of them.
    const TensorView &master = executor.flatWeights();
    for (const FlatShare::Run &run : executor.masterShare().runs)
      MT_TRY(backend.copyToDevice(
          static_cast<char *>(master.data) + element * executor.masterShare().local(run.begin),
          host[0].data() + element * run.begin, element * (run.end - run.begin)));
    DeviceMemory all;
    MT_TRY(all.allocate(backend, host[0].size()));
    MT_TRY(backend.copyToDevice(all.data(), host[0].data(), host[0].size()));
    TensorView allView = executor.flatGrads();
    allView.data = all.data();
    MT_TRY(backend.convert(executor.flatCompute(), allView));
  } else {
    MT_TRY(backend.copyToDevice(executor.flatWeights().data, host[0].data(), host[0].size()));
    MT_TRY(executor.refreshComputeWeights());
  }
  MT_TRY(backend.copyToDevice(optimizer.expAvg().data, host[1].data(), host[1].size()));
  return backend.copyToDevice(optimizer.expAvgSq().data, host[2].data(), host[2].size());
}

} // namespace

Status loadCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
                      TrainingState &state, const CheckpointOptions &options, uint64_t *bytesRead,
                      std::string *note,
                      const std::function<Status(const TrainingState &)> &resumable) {
  Comm &comm = executor.comm();
  Loaded loaded;
  loaded.state = state; // what the index does not say stays as it was
  MT_TRY(agree(comm,
               readCheckpoint(dir, executor, optimizer, options.stagingBytes, resumable, loaded),
               "load"));
  // Every rank read the same save (each resolved the latest marker on its own).
  double id = static_cast<double>(std::strtoull(loaded.saveId.c_str(), nullptr, 16));
  const double mine = id;
  MT_TRY(shareFromRankZero(comm, id));
  MT_TRY(agree(comm,
               id == mine ? Status::success()
                          : Status::failure(cat(dir, ": this rank read save ", loaded.saveId,
                                                ", world rank 0 another: the checkpoint "
                                                "changed while the ranks read it")),
               "load"));
  MT_TRY(agree(comm, install(executor, optimizer, loaded), "load"));
  state = loaded.state;
  if (note)
    *note = loaded.note;
  if (bytesRead) {
    double bytes = static_cast<double>(loaded.bytesRead);
    MT_TRY(comm.allReduceSumWorld(bytes));
    *bytesRead = static_cast<uint64_t>(bytes);
  }
  return Status::success();
}

} // namespace mt
