#include "compiler/System.h"
#include "compiler/GemmModel.h"
#include "core/InputFile.h"
#include "dialects/mt/PlanEncoding.h"
#include "plan/Opcodes.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>

namespace mtc {
namespace {

/// Reads one JSON object's fields by name, remembering which it read so that a field
/// nobody reads (a misspelling) is refused by its path.
class Fields {
public:
  Fields(const llvm::json::Object &object, std::string path, std::string &error,
         const char *kind = "a system description")
      : object_(object), path_(std::move(path)), error_(error), kind_(kind) {}

  std::string where(llvm::StringRef key) const {
    return path_.empty() ? key.str() : path_ + "." + key.str();
  }
  bool fail(llvm::StringRef key, const std::string &why) {
    if (error_.empty())
      error_ = "'" + where(key) + "' " + why;
    return false;
  }
  const llvm::json::Value *get(llvm::StringRef key) {
    read_.insert(key);
    const llvm::json::Value *v = object_.get(key);
    if (!v)
      fail(key, "is missing");
    return v;
  }
  /// A number > 0 (or >= 0 with `zeroAllowed`), scaled by `unit`.
  bool number(llvm::StringRef key, double unit, double &out, bool zeroAllowed = false) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    std::optional<double> d = v->getAsNumber();
    // Bounds that no machine nears keep every product of them finite.
    if (!d || !std::isfinite(*d) || *d < 0 || (*d == 0 && !zeroAllowed) ||
        (*d != 0 && (*d < 1e-6 || *d > 1e9)))
      return fail(key, zeroAllowed ? "must be 0 or a number in [1e-6, 1e9]"
                                   : "must be a number in [1e-6, 1e9]");
    out = *d * unit;
    return true;
  }
  bool fraction(llvm::StringRef key, double &out) {
    if (!number(key, 1.0, out))
      return false;
    return out <= 1.0 || fail(key, "must lie in (0, 1]");
  }
  bool integer(llvm::StringRef key, int64_t &out) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i <= 0 || *i > (int64_t(1) << 20))
      return fail(key, "must be a positive integer, at most 2^20");
    out = *i;
    return true;
  }
  bool string(llvm::StringRef key, std::string &out) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    std::optional<llvm::StringRef> s = v->getAsString();
    if (!s || s->empty())
      return fail(key, "must be a non-empty string");
    out = s->str();
    return true;
  }
  bool flag(llvm::StringRef key, bool &out) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      return fail(key, "must be true or false");
    out = *b;
    return true;
  }
  bool has(llvm::StringRef key) const { return object_.get(key) != nullptr; }
  /// The object's keys, sorted.
  std::vector<llvm::StringRef> keys() const {
    std::vector<llvm::StringRef> out;
    for (const auto &entry : object_)
      out.push_back(entry.first);
    std::sort(out.begin(), out.end());
    return out;
  }
  /// A nested object, read by `body`.
  template <typename F> bool object(llvm::StringRef key, F body) {
    const llvm::json::Value *v = get(key);
    if (!v)
      return false;
    const llvm::json::Object *o = v->getAsObject();
    if (!o)
      return fail(key, "must be an object");
    Fields inner(*o, where(key), error_, kind_);
    return body(inner) && inner.done();
  }
  /// Every field was read.
  bool done() {
    for (const auto &entry : object_)
      if (!read_.contains(entry.first))
        return fail(entry.first, std::string("is not a field of ") + kind_);
    return true;
  }

private:
  const llvm::json::Object &object_;
  std::string path_;
  std::string &error_;
  llvm::StringSet<> read_;
  const char *kind_;
};

/// A family's rate: {"tflops": X} or {"gbs": X}, achieved, or {"efficiency": X} of the
/// model's time; and optionally "overhead_us", a run's fixed time.
bool readKernels(Fields &f, std::map<std::string, KernelRate> &out) {
  for (llvm::StringRef family : f.keys()) {
    const bool part = family == kZeroGradients || family == kGradientNorm || family == kOptimizer;
    mlir::FailureOr<::mt::plan::Opcode> opcode = mlir::mt::planOpcodeNamed(family);
    if (!part && failed(opcode))
      return f.fail(family, "is neither a plan opcode nor one of '" + std::string(kZeroGradients) +
                                "', '" + kGradientNorm + "', '" + kOptimizer + "'");
    if (!part && ::mt::opcodeInfo(*opcode).runsOn == ::mt::RunsOn::Comm)
      return f.fail(family, "is a collective: the links cost it (intra_node, inter_node)");
    KernelRate rate;
    if (!f.object(family, [&](Fields &r) {
          const int given = r.has("tflops") + r.has("gbs") + r.has("efficiency");
          if (given != 1)
            return r.fail("tflops", "or 'gbs' or 'efficiency' must be given, one of them");
          if (r.has("overhead_us") && !r.number("overhead_us", 1e-6, rate.overhead, true))
            return false;
          return r.has("tflops") ? r.number("tflops", 1e12, rate.flops)
                 : r.has("gbs")  ? r.number("gbs", 1e9, rate.bytes)
                                 : r.number("efficiency", 1, rate.efficiency);
        }))
      return false;
    out[family.str()] = rate;
  }
  return true;
}

/// gpu.gemm_table: {"dims": [ascending positive integers], "tflops": [dims³ rates]}.
bool readGemmTable(Fields &f, GemmTable &out) {
  const llvm::json::Value *dimsValue = f.get("dims"), *ratesValue = f.get("tflops");
  if (!dimsValue || !ratesValue)
    return false;
  const llvm::json::Array *dims = dimsValue->getAsArray(), *rates = ratesValue->getAsArray();
  if (!dims)
    return f.fail("dims", "must be an array");
  for (const llvm::json::Value &v : *dims) {
    std::optional<int64_t> d = v.getAsInteger();
    if (!d || *d <= 0 || *d > (int64_t(1) << 20) || (!out.dims.empty() && *d <= out.dims.back()))
      return f.fail("dims", "must be ascending positive integers, at most 2^20");
    out.dims.push_back(*d);
  }
  if (out.dims.size() < 2 || out.dims.size() > 64)
    return f.fail("dims", "must hold 2 to 64 dimensions");
  const size_t count = out.dims.size() * out.dims.size() * out.dims.size();
  if (!rates || rates->size() != count)
    return f.fail("tflops",
                  "must hold a rate for each m, n and k of 'dims': " + std::to_string(count));
  for (const llvm::json::Value &v : *rates) {
    std::optional<double> r = v.getAsNumber();
    if (!r || !std::isfinite(*r) || *r < 1e-6 || *r > 1e9)
      return f.fail("tflops", "must be numbers in [1e-6, 1e9] (TFLOP/s)");
    out.logRates.push_back(std::log(*r * 1e12));
  }
  return true;
}

/// The JSON object `text` holds (kept alive in `value`), or null with `error` set.
const llvm::json::Object *parseObject(llvm::StringRef text, std::optional<llvm::json::Value> &value,
                                      std::string &error) {
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json) {
    error = "not JSON: " + llvm::toString(json.takeError());
    return nullptr;
  }
  value = std::move(*json);
  const llvm::json::Object *root = value->getAsObject();
  if (!root)
    error = "not a JSON object";
  return root;
}

/// Reads the file at `path` (`kind`, for messages) and parses it into `out` with
/// Spec::parse; an error names the file.
template <typename Spec>
bool loadFile(const std::string &path, const char *kind, Spec &out, std::string &error) {
  std::string text;
  if (::mt::Status s = ::mt::readRegularFile(path, ::mt::limits::kConfigBytes, kind, text);
      !s.ok()) {
    error = s.message();
    return false;
  }
  if (!Spec::parse(text, out, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

/// Where each constant comes from: free text by field, required for none of them.
bool readSources(Fields &f) {
  if (!f.has("sources"))
    return true;
  const llvm::json::Object *sources = f.get("sources")->getAsObject();
  if (!sources)
    return f.fail("sources", "must be an object of strings");
  for (const auto &entry : *sources)
    if (!entry.second.getAsString())
      return f.fail("sources",
                    "must be an object of strings ('" + entry.first.str() + "' is not a string)");
  return true;
}

/// A runtime's fields, each optional: one absent keeps its value.
bool readRuntime(Fields &f, RuntimeSpec &r) {
  const std::pair<const char *, bool *> flags[] = {
      {"cuda_graphs", &r.graphs},
      {"overlap_gradient_reduction", &r.overlapGradientReduction},
      {"overlap_parameter_gather", &r.overlapParameterGather},
      {"pipeline_scatter_gather", &r.pipelineScatterGather},
      {"materialized_attention", &r.materializedAttention},
      {"recompute_whole_layers", &r.recomputeWholeLayers}};
  for (auto [key, value] : flags)
    if (f.has(key) && !f.flag(key, *value))
      return false;
  return (!f.has("name") || f.string("name", r.name)) &&
         (!f.has("launch_gap_us") ||
          f.number("launch_gap_us", 1e-6, r.launchGap, /*zeroAllowed=*/true));
}

bool readLink(Fields &f, Link &link) {
  return f.number("bandwidth_gbs", 1e9, link.bandwidth) &&
         f.number("latency_us", 1e-6, link.latency, /*zeroAllowed=*/true);
}

} // namespace

double GemmTable::rate(int64_t m, int64_t n, int64_t k) const {
  const size_t count = dims.size();
  // Each dimension's place on the grid: the point at or below it, and the fraction of
  // the way on to the next, in logarithms.
  auto place = [&](int64_t x, size_t &below, double &fraction) {
    const double at = std::log(static_cast<double>(std::clamp(x, dims.front(), dims.back())));
    below = 0;
    while (below + 2 < count && at > std::log(static_cast<double>(dims[below + 1])))
      ++below;
    const double low = std::log(static_cast<double>(dims[below]));
    fraction = (at - low) / (std::log(static_cast<double>(dims[below + 1])) - low);
  };
  size_t below[3];
  double fraction[3];
  place(m, below[0], fraction[0]);
  place(n, below[1], fraction[1]);
  place(k, below[2], fraction[2]);
  double logRate = 0;
  for (int corner = 0; corner < 8; ++corner) {
    double weight = 1;
    size_t at[3];
    for (int d = 0; d < 3; ++d) {
      const bool up = (corner >> d) & 1;
      at[d] = below[d] + up;
      weight *= up ? fraction[d] : 1 - fraction[d];
    }
    if (weight > 0)
      logRate += weight * logRates[(at[0] * count + at[1]) * count + at[2]];
  }
  return std::exp(logRate);
}

double SystemSpec::peak(llvm::StringRef elementType) const {
  if (elementType == "bf16")
    return peakBf16;
  if (elementType == "f16")
    return peakFp16;
  if (elementType == "f64")
    return peakFp64;
  return peakFp32;
}

bool SystemSpec::parse(llvm::StringRef text, SystemSpec &out, std::string &error) {
  std::optional<llvm::json::Value> json;
  const llvm::json::Object *root = parseObject(text, json, error);
  if (!root)
    return false;
  SystemSpec s;
  Fields f(*root, "", error);
  bool ok =
      f.string("name", s.name) && f.integer("gpus_per_node", s.gpusPerNode) &&
      f.object("gpu",
               [&](Fields &g) {
                 double memory = 0, reserved = 0;
                 const llvm::json::Value *tile = nullptr;
                 bool ok =
                     g.string("name", s.gpu) &&
                     g.object("peak_tflops",
                              [&](Fields &p) {
                                return p.number("bf16", 1e12, s.peakBf16) &&
                                       p.number("fp16", 1e12, s.peakFp16) &&
                                       p.number("fp32", 1e12, s.peakFp32) &&
                                       p.number("fp64", 1e12, s.peakFp64);
                              }) &&
                     g.number("memory_gib", 1073741824.0, memory) &&
                     g.number("reserved_gib", 1073741824.0, reserved, true) &&
                     g.number("memory_bandwidth_gbs", 1e9, s.memoryBandwidth) &&
                     g.integer("multiprocessors", s.multiprocessors) &&
                     (tile = g.get("gemm_tile")) &&
                     g.fraction("gemm_efficiency", s.gemmEfficiency) &&
                     g.fraction("memory_efficiency", s.memoryEfficiency) &&
                     g.number("kernel_overhead_us", 1e-6, s.kernelOverhead, true) &&
                     (!g.has("gemm_table") || g.object("gemm_table", [&](Fields &t) {
                       return readGemmTable(t, s.gemmTable);
                     }));
                 if (!ok)
                   return false;
                 // Whole bytes: the capacity rounded down, the reserve up.
                 s.memoryBytes = static_cast<int64_t>(memory);
                 s.reservedBytes = static_cast<int64_t>(std::ceil(reserved));
                 if (s.reservedBytes >= s.memoryBytes)
                   return g.fail("reserved_gib", "must be less than 'gpu.memory_gib'");
                 const llvm::json::Array *mn = tile->getAsArray();
                 std::optional<int64_t> m, n;
                 if (mn && mn->size() == 2) {
                   m = (*mn)[0].getAsInteger();
                   n = (*mn)[1].getAsInteger();
                 }
                 if (!m || !n || *m <= 0 || *n <= 0 || *m > 4096 || *n > 4096)
                   return g.fail("gemm_tile", "must be [rows, columns], two positive integers up to 4096");
                 s.tileM = *m;
                 s.tileN = *n;
                 return true;
               }) &&
      f.object("intra_node", [&](Fields &l) { return readLink(l, s.intraNode); }) &&
      f.object("inter_node", [&](Fields &l) { return readLink(l, s.interNode); });
  // Optional: calibrated kernel families, and how the runtime launches kernels.
  if (ok && root->get("kernels"))
    ok = f.object("kernels", [&](Fields &k) { return readKernels(k, s.kernels); });
  if (ok && root->get("runtime")) {
    s.runtime.name = "as the system file describes it";
    ok = f.object("runtime", [&](Fields &r) { return readRuntime(r, s.runtime); });
  }
  if (!ok || !readSources(f) || !f.done())
    return false;
  out = s;
  return true;
}

bool RuntimeSpec::parse(llvm::StringRef text, RuntimeSpec &out, std::string &error) {
  std::optional<llvm::json::Value> json;
  const llvm::json::Object *root = parseObject(text, json, error);
  if (!root)
    return false;
  RuntimeSpec r = out;
  Fields f(*root, "", error, "a runtime description");
  if (!readRuntime(f, r) || !readSources(f) || !f.done())
    return false;
  out = r;
  return true;
}

bool RuntimeSpec::load(const std::string &path, RuntimeSpec &out, std::string &error) {
  out.name = llvm::sys::path::stem(path).str(); // unless the file names itself
  return loadFile(path, "a runtime file", out, error);
}

std::string runtimePath(const std::string &nameOrPath) {
  // A bare name is a preset's (a file of that name, such as the mtrun binary, is not).
  if (nameOrPath.find('/') != std::string::npos || llvm::StringRef(nameOrPath).ends_with(".json"))
    return nameOrPath;
  llvm::SmallString<256> path(MTC_SYSTEMS_DIR);
  llvm::sys::path::append(path, "runtimes", nameOrPath + ".json");
  return std::string(path);
}

bool SystemSpec::load(const std::string &path, SystemSpec &out, std::string &error) {
  return loadFile(path, "a system file", out, error);
}

std::string systemPath(const std::string &nameOrPath) {
  if (llvm::sys::fs::exists(nameOrPath))
    return nameOrPath;
  llvm::SmallString<256> path(MTC_SYSTEMS_DIR);
  llvm::sys::path::append(path, nameOrPath + ".json");
  return std::string(path);
}

namespace {
/// The names of DIR/*.json, comma-separated.
std::string jsonNames(llvm::StringRef dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
    if (llvm::sys::path::extension(it->path()) == ".json")
      names.push_back(llvm::sys::path::stem(it->path()).str());
  std::sort(names.begin(), names.end());
  std::string list;
  for (const std::string &n : names)
    list += (list.empty() ? "" : ", ") + n;
  return list;
}
} // namespace

std::string systemNames() { return jsonNames(MTC_SYSTEMS_DIR); }

std::string runtimeNames() {
  llvm::SmallString<256> dir(MTC_SYSTEMS_DIR);
  llvm::sys::path::append(dir, "runtimes");
  return jsonNames(dir);
}

double gemmSeconds(const SystemSpec &system, const mlir::mt::GemmShape &g,
                   llvm::StringRef elementType, int64_t elementBytes) {
  if (g.batch <= 0 || g.m <= 0 || g.n <= 0 || g.k <= 0)
    return 0;
  const GemmTable &table = system.gemmTable;
  if (!table.dims.empty() && g.batch == 1 && (elementType == "bf16" || elementType == "f16")) {
    // A dimension below the grid costs as its smallest point: no product is cheaper.
    auto atLeast = [&](int64_t x) { return static_cast<double>(std::max(x, table.dims.front())); };
    return 2 * atLeast(g.m) * atLeast(g.n) * atLeast(g.k) / table.rate(g.m, g.n, g.k);
  }
  const double compute = gemmWaveTime(system, g, elementType);
  const double memory = ::mt::gemmBytes(g.batch, g.m, g.n, g.k, elementBytes) /
                        (system.memoryBandwidth * system.memoryEfficiency);
  return std::max(compute, memory);
}

double gemmWaveTime(const SystemSpec &system, const mlir::mt::GemmShape &g,
                    llvm::StringRef elementType) {
  return ::mt::gemmWaveSeconds(g.batch, g.m, g.n, g.k, system.tileM, system.tileN,
                               system.multiprocessors,
                               system.peak(elementType) * system.gemmEfficiency);
}

double blockShare(int64_t s, int64_t block, bool causal, int64_t window) {
  if (s <= 0 || block <= 0 || !causal)
    return 1;
  // Blocks d = i − j ≥ 0 below the diagonal (query block i, key block j) hold a pair the
  // mask keeps; within a window, where d·block − (block − 1) (their nearest pair's
  // distance) is less than it.
  const int64_t blocks = (s + block - 1) / block;
  int64_t kept = 0;
  for (int64_t d = 0; d < blocks && (window <= 0 || d * block - (block - 1) < window); ++d)
    kept += blocks - d;
  return static_cast<double>(kept) / static_cast<double>(blocks * blocks);
}

double memorySeconds(const SystemSpec &system, int64_t bytes) {
  return static_cast<double>(bytes) / (system.memoryBandwidth * system.memoryEfficiency);
}

int64_t ringBytesSent(Collective kind, int64_t bytes, int64_t ranks) {
  if (ranks <= 1)
    return 0;
  const __int128 steps = kind == Collective::AllReduce ? 2 * (ranks - 1) : ranks - 1;
  return static_cast<int64_t>(steps * bytes / ranks);
}

double collectiveSeconds(Collective kind, int64_t bytes, int64_t ranks, const Link &link) {
  if (ranks <= 1)
    return 0;
  const int64_t steps = kind == Collective::AllReduce ? 2 * (ranks - 1) : ranks - 1;
  return static_cast<double>(ringBytesSent(kind, bytes, ranks)) / link.bandwidth +
         static_cast<double>(steps) * link.latency;
}

} // namespace mtc
