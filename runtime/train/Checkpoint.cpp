#include "train/Checkpoint.h"
#include "core/AtomicFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace mt {
namespace {

/// A double as text that reads back to the same value.
std::string roundTrip(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}


using json = nlohmann::json;

constexpr const char *kFileName = "checkpoint.safetensors";
constexpr const char *kFormat = "mtc-checkpoint-1";

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


/// Writes to `file`; a test may ask the writer to die after a number of bytes
/// (MT_CHECKPOINT_KILL_AFTER_BYTES), as a crash mid-save would.
class FileWriter {
public:
  explicit FileWriter(AtomicFile &file) : file_(file) {
    if (const char *limit = std::getenv("MT_CHECKPOINT_KILL_AFTER_BYTES"))
      killAfter_ = std::strtoull(limit, nullptr, 10);
  }
  Status write(const void *data, size_t n) {
    if (killAfter_ && written_ + n >= killAfter_) {
      (void)file_.write(data, killAfter_ - written_);
      ::raise(SIGKILL);
    }
    written_ += n;
    return file_.write(data, n);
  }

private:
  AtomicFile &file_;
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

/// One tensor of a checkpoint, global: its name, global shape, element type, and (on
/// world rank 0, when saving) its bytes.
struct GlobalTensor {
  std::string name;
  std::vector<int64_t> shape;
  plan::DType dtype;
  std::vector<char> bytes;
};

std::vector<int64_t> globalShape(const plan::Param &p) {
  return std::vector<int64_t>(p.global_shape()->begin(), p.global_shape()->end());
}

/// The three kinds of tensor a checkpoint holds per parameter, in file order: weights
/// under the parameter's name, then optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name>.
const char *const kKinds[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};

/// This rank's local (tensor-parallel shard) values of parameter `p` for one kind, in
/// the backend's memory. What the distributed optimizer keeps in shares (the moments,
/// and the master weights under mixed precision) is first gathered over the
/// data-parallel group.
struct LocalStores {
  TensorView weights, expAvg, expAvgSq;
  std::vector<DeviceMemory> gathered;
};

Status localStores(Executor &executor, const AdamW &optimizer, LocalStores &out) {
  TensorView whole = executor.flatGrads(); // the shape and type of every store
  out.weights = executor.flatWeights();
  out.expAvg = optimizer.expAvg();
  out.expAvgSq = optimizer.expAvgSq();
  Comm &comm = executor.comm();
  const size_t bytes = dtypeBytes(whole.dtype) * whole.numel();
  for (TensorView *store : {&out.weights, &out.expAvg, &out.expAvgSq}) {
    if (store->numel() == whole.numel())
      continue;
    MT_TRY(out.gathered.emplace_back().allocate(executor.backend(), bytes));
    TensorView all = whole;
    all.data = out.gathered.back().data();
    MT_TRY(comm.allGather(Group::Data, *store, all, 0));
    *store = all;
  }
  return Status::success();
}

TensorView paramView(const Executor::Parameter &p, const TensorView &store) {
  TensorView v = p.weight;
  v.data = static_cast<char *>(store.data) + dtypeBytes(store.dtype) * p.offset;
  return v;
}

/// The first pipeline stage whose programs name parameter `index`.
int firstHolder(const plan::Plan &plan, uint32_t index) {
  int first = plan.grid()->pp();
  for (const plan::Program *prog : *plan.programs())
    for (const plan::Buffer *b : *prog->buffers())
      if (b->kind() == plan::BufferKind::Param && b->param() == static_cast<int32_t>(index))
        first = std::min(first, prog->stage());
  return first;
}

/// Every rank ends with the same verdict: a failure anywhere is a failure everywhere.
/// Only where every rank arrives (after the gathers, around the one file): a rank that
/// fails before returns its failure at once, and mtrun takes the job down with it
/// rather than leave the others waiting in a collective.
Status agree(Executor &executor, const Status &status) {
  Comm &comm = executor.comm();
  double failures = status.ok() ? 0.0 : 1.0;
  Status reduced = Status::success();
  for (Group group : {Group::Tensor, Group::Data, Group::Pipeline})
    if (reduced.ok())
      reduced = comm.allReduceSum(group, failures);
  if (!status.ok())
    return status; // this rank's own failure first
  if (!reduced.ok())
    return reduced;
  if (failures == 0)
    return status;
  return Status::failure("another rank failed to save or load the checkpoint");
}

Status writeFile(const std::string &dir, const std::vector<GlobalTensor> &tensors,
                 const json &metadata) {
  if (Status s = ensureDirectory(dir); !s.ok())
    return s;
  const std::string final = checkpointPath(dir);
  AtomicFile::removeStale(final); // of saves that never finished (a crash)
  json header;
  size_t offset = 0;
  for (const GlobalTensor &t : tensors) {
    header[t.name] = {{"dtype", safetensorsDType(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // data starts 8-byte aligned
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  AtomicFile file;
  MT_TRY(AtomicFile::create(final, file));
  FileWriter out(file);
  MT_TRY(out.write(length, 8));
  MT_TRY(out.write(text.data(), text.size()));
  for (const GlobalTensor &t : tensors)
    MT_TRY(out.write(t.bytes.data(), t.bytes.size()));
  return file.commit();
}

} // namespace

std::string checkpointPath(const std::string &dir) { return dir + "/" + kFileName; }

Status saveCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
                      const TrainingState &state) {
  Comm &comm = executor.comm();
  const bool writer = comm.position().worldRank() == 0;
  LocalStores stores;
  MT_TRY(localStores(executor, optimizer, stores));

  // Gather every parameter's tensor-parallel shards into the global tensor, on the
  // first pipeline stage that holds it; the writer (world rank 0, on the first stage)
  // receives the others' from their first data- and tensor-parallel rank.
  const int stage = comm.rank(Group::Pipeline);
  const bool sender = comm.rank(Group::Tensor) == 0 && comm.rank(Group::Data) == 0;
  std::vector<Executor::Parameter *> byIndex(executor.plan().params()->size(), nullptr);
  for (Executor::Parameter &p : executor.parameters())
    byIndex[p.index] = &p;
  std::vector<GlobalTensor> tensors;
  for (int kind = 0; kind < 3; ++kind) {
    const TensorView &store = kind == 0 ? stores.weights : kind == 1 ? stores.expAvg
                                                                     : stores.expAvgSq;
    for (flatbuffers::uoffset_t index = 0; index < byIndex.size(); ++index) {
      const plan::Param &spec = *executor.plan().params()->Get(index);
      GlobalTensor t{kKinds[kind] + spec.name()->str(), globalShape(spec), spec.dtype(), {}};
      size_t bytes = dtypeBytes(t.dtype);
      for (int64_t d : t.shape)
        bytes *= static_cast<size_t>(d);
      Executor::Parameter *held = byIndex[index];
      const int owner = held ? held->holders.front() : -1;
      if (!held || owner != stage) {
        // Another stage's parameter: the writer receives it from that stage.
        if (writer) {
          t.bytes.resize(bytes);
          MT_TRY(comm.recv(Group::Pipeline, firstHolder(executor.plan(), index), t.bytes.data(),
                           bytes, 1000 + kind));
          tensors.push_back(std::move(t));
        }
        continue;
      }
      Executor::Parameter &p = *held;
      TensorView local = paramView(p, store), global = local;
      for (size_t i = 0; i < t.shape.size(); ++i)
        global.shape[i] = t.shape[i];
      t.bytes.resize(bytes);
      DeviceMemory gathered;
      if (p.spec->shard_dim() >= 0 && comm.size(Group::Tensor) > 1) {
        MT_TRY(gathered.allocate(executor.backend(), bytes));
        global.data = gathered.data();
        MT_TRY(comm.allGather(Group::Tensor, local, global, p.spec->shard_dim()));
        local = global;
      }
      MT_TRY(executor.backend().copyToHost(t.bytes.data(), local.data, bytes));
      if (writer) {
        tensors.push_back(std::move(t));
      } else if (sender && stage != 0) {
        MT_TRY(comm.send(Group::Pipeline, 0, t.bytes.data(), bytes, 1000 + kind));
      }
    }
  }
  MT_TRY(comm.waitSends());
  Status written = Status::success();
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"model", executor.plan().model()->str()},
      {"step", std::to_string(state.step)},
      {"data_position", std::to_string(state.dataPosition)},
      {"seed", std::to_string(state.seed)}};
  if (executor.plan().precision() == plan::DType::F16) { // the loss scaler's state
    meta["loss_scale"] = roundTrip(state.lossScaler.scale);
    meta["loss_scale_good_steps"] = std::to_string(state.lossScaler.goodSteps);
    meta["loss_scale_hysteresis_left"] = std::to_string(state.lossScaler.hysteresisLeft);
    meta["skipped_steps"] = std::to_string(state.skippedSteps);
  }
  if (writer)
    written = writeFile(dir, tensors, meta);
  return agree(executor, written);
}

namespace {

Status readCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
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

  // Check everything before changing anything: every tensor of the model, whichever
  // stage holds it.
  std::set<std::string> expected;
  for (int kind = 0; kind < 3; ++kind)
    for (const plan::Param *spec : *executor.plan().params()) {
      std::string name = kKinds[kind] + spec->name()->str();
      expected.insert(name);
      if (!header.contains(name))
        return fail(cat("tensor '", name, "' is missing"));
      const json &entry = header[name];
      std::vector<int64_t> shape = entry.value("shape", std::vector<int64_t>{});
      if (shape != globalShape(*spec))
        return fail(cat("tensor '", name, "' has shape ", shapeString(shape),
                        ", the plan expects ", shapeString(globalShape(*spec))));
      if (entry.value("dtype", "") != safetensorsDType(spec->dtype()))
        return fail(cat("tensor '", name, "' is ", entry.value("dtype", ""),
                        ", the plan expects ", safetensorsDType(spec->dtype())));
      std::vector<uint64_t> range = entry.value("data_offsets", std::vector<uint64_t>{});
      uint64_t bytes = dtypeBytes(spec->dtype());
      for (int64_t d : shape)
        bytes *= static_cast<uint64_t>(d);
      if (range.size() != 2 || range[0] > range[1] || range[1] > dataBytes ||
          range[1] - range[0] != bytes)
        return fail(cat("corrupt checkpoint: tensor '", name, "' has bad data offsets"));
    }
  for (const auto &[name, entry] : header.items())
    if (name != "__metadata__" && !expected.count(name))
      return fail(cat("tensor '", name, "' is not a tensor of model '",
                      executor.plan().model()->str(), "'"));
  TrainingState loaded = state; // what the metadata does not say stays as it was
  auto number = [&](const char *key, uint64_t &out) {
    std::string text = meta.value(key, "");
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
    return fail("corrupt checkpoint: bad training state in its metadata");
  loaded.step = static_cast<int64_t>(step);
  // fp16's loss scaler (only fp16 runs write it; otherwise this run's settings stand).
  if (meta.contains("loss_scale")) {
    uint64_t good = 0, hysteresis = 0, skipped = 0;
    char *end = nullptr;
    std::string scale = meta.value("loss_scale", "");
    loaded.lossScaler.scale = std::strtod(scale.c_str(), &end);
    if (scale.empty() || *end || !(loaded.lossScaler.scale > 0) ||
        !std::isfinite(loaded.lossScaler.scale) || !number("loss_scale_good_steps", good) ||
        !number("loss_scale_hysteresis_left", hysteresis) ||
        !number("skipped_steps", skipped) || good > (uint64_t{1} << 40) ||
        hysteresis > (uint64_t{1} << 40) || skipped > step)
      return fail("corrupt checkpoint: bad loss-scaler state in its metadata");
    loaded.lossScaler.goodSteps = static_cast<int64_t>(good);
    loaded.lossScaler.hysteresisLeft = static_cast<int64_t>(hysteresis);
    loaded.skippedSteps = static_cast<int64_t>(skipped);
  }

  // This rank's tensor-parallel shard of every tensor, and, for the distributed
  // optimizer's moments, its data-parallel range of the flat store.
  Comm &comm = executor.comm();
  const size_t element = dtypeBytes(executor.flatGrads().dtype);
  const int64_t total = executor.flatGrads().numel();
  std::vector<char> host[3];
  for (int kind = 0; kind < 3; ++kind) {
    host[kind].assign(element * total, 0);
    for (Executor::Parameter &p : executor.parameters()) {
      const char *global = data + header[kKinds[kind] + p.name]["data_offsets"][0].get<uint64_t>();
      ShardMap shard(p.weight, p.spec->shard_dim(), comm.rank(Group::Tensor),
                     comm.size(Group::Tensor));
      char *local = host[kind].data() + element * p.offset;
      for (int64_t i = 0; i < p.numel; ++i)
        std::memcpy(local + element * i, global + element * shard.global(i), element);
    }
  }
  Backend &backend = executor.backend();
  if (executor.masterSharded()) {
    // This rank's share of the master weights, and the compute copy of all of them.
    const TensorView &master = executor.flatWeights();
    MT_TRY(backend.copyToDevice(master.data, host[0].data() + element * executor.masterFirst(),
                                element * master.numel()));
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
  const int64_t first = optimizer.first(), count = optimizer.expAvg().numel();
  MT_TRY(backend.copyToDevice(optimizer.expAvg().data, host[1].data() + element * first,
                              element * count));
  MT_TRY(backend.copyToDevice(optimizer.expAvgSq().data, host[2].data() + element * first,
                              element * count));
  state = loaded;
  return Status::success();
}

} // namespace

Status findCheckpoint(const std::string &dir, Comm &comm, bool &found) {
  struct stat info;
  double holders = ::stat(checkpointPath(dir).c_str(), &info) == 0 ? 1.0 : 0.0;
  for (Group group : {Group::Tensor, Group::Data, Group::Pipeline})
    MT_TRY(comm.allReduceSum(group, holders));
  const int world = comm.position().worldSize();
  if (holders != 0 && holders != world)
    return Status::failure(cat(checkpointPath(dir), ": ", holders, " of ", world,
                               " ranks see it; the save directory must be shared"));
  found = holders == world;
  return Status::success();
}

Status loadCheckpoint(const std::string &dir, Executor &executor, const AdamW &optimizer,
                      TrainingState &state) {
  Status read = Status::success();
  try {
    read = readCheckpoint(dir, executor, optimizer, state);
  } catch (const json::exception &e) {
    // A header that is JSON but not what safetensors describes (a shape that is a string).
    read = Status::failure(checkpointPath(dir) + ": corrupt checkpoint: " + e.what());
  }
  return agree(executor, read);
}

} // namespace mt
