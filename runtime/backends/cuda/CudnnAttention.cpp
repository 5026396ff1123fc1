#include "backends/cuda/CudnnAttention.h"

#include "backends/cuda/SdpaLayout.h"
#include "core/Status.h"

#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cstring>
#include <map>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace mt {
namespace {

namespace fe = cudnn_frontend;

// The graphs' tensors, by uid.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kKeep };

std::vector<int64_t> vec(const std::array<int64_t, 4> &a) { return {a.begin(), a.end()}; }

/// One built graph, or why cuDNN has none (graph null).
struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspaceBytes = 0;
  std::string why;
};

/// The stats' view: [b, heads, s, 1], contiguous.
std::vector<int64_t> statsDim(const SdpaProblem &p) { return {p.b, p.layout.heads, p.s, 1}; }
std::vector<int64_t> statsStride(const SdpaProblem &p) {
  return {p.layout.heads * p.s, p.s, 1, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph &graph, const char *name,
                                                     Uid uid, const SdpaView &view) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(vec(view.dim))
                          .set_stride(vec(view.stride)));
}

void output(fe::graph::Tensor_attributes &tensor, Uid uid, const SdpaView &view) {
  tensor.set_output(true).set_uid(uid).set_dim(vec(view.dim)).set_stride(vec(view.stride));
}

template <typename Attributes> void mask(Attributes &attributes, const SdpaProblem &problem) {
  // Key j is visible to query i where j ≤ i (causal: the band right of the diagonal is
  // empty), and where j + window > i (the band's left bound: the window's keys).
  if (!problem.causal && problem.window == 0)
    return;
  attributes.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
  if (problem.causal)
    attributes.set_diagonal_band_right_bound(0);
  if (problem.window > 0)
    attributes.set_diagonal_band_left_bound(static_cast<int>(problem.window));
}

/// Where `problem` drops probabilities: its keep mask [b, heads, s, s] (the graph's
/// 16-bit type; rows `pitch` apart, SdpaProblem::keepPitch), given beside the kept
/// ones' scale (core/SharedMath.h's keptScale, as our kernels take it).
std::shared_ptr<fe::graph::Tensor_attributes> keepMask(fe::graph::Graph &graph,
                                                       const SdpaProblem &p) {
  const int64_t heads = p.layout.heads, pitch = SdpaProblem::keepPitch(p.s);
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name("keep")
                          .set_uid(kKeep)
                          .set_dim({p.b, heads, p.s, p.s})
                          .set_stride({heads * p.s * pitch, p.s * pitch, pitch, 1}));
}
std::shared_ptr<fe::graph::Tensor_attributes> scalar(float value) {
  return std::make_shared<fe::graph::Tensor_attributes>(value);
}

/// A graph over `problem`'s views, with forward's or backward's SDPA node.
std::shared_ptr<fe::graph::Graph> graphOf(const SdpaProblem &problem, const SdpaLayout &view,
                                          bool forward) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(problem.dtype == plan::DType::F16 ? fe::DataType_t::HALF
                                                            : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = input(*graph, "q", kQ, view.q);
  auto k = input(*graph, "k", kK, view.k);
  auto v = input(*graph, "v", kV, view.v);
  if (forward) {
    auto attributes = fe::graph::SDPA_attributes()
                          .set_name("attention")
                          .set_generate_stats(true)
                          .set_attn_scale(problem.scale);
    mask(attributes, problem);
    if (problem.rate > 0)
      attributes.set_dropout(keepMask(*graph, problem), scalar(keptScale(problem.rate)));
    auto [o, stats] = graph->sdpa(q, k, v, attributes);
    output(*o, kO, view.o);
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT)
        .set_dim(statsDim(problem)).set_stride(statsStride(problem));
    return graph;
  }
  auto o = input(*graph, "o", kO, view.o);
  auto dO = input(*graph, "dO", kDO, view.o);
  auto stats = graph->tensor(fe::graph::Tensor_attributes()
                                 .set_name("stats")
                                 .set_uid(kStats)
                                 .set_dim(statsDim(problem))
                                 .set_stride(statsStride(problem))
                                 .set_data_type(fe::DataType_t::FLOAT));
  auto attributes = fe::graph::SDPA_backward_attributes()
                        .set_name("attention backward")
                        .set_attn_scale(problem.scale)
                        .set_deterministic_algorithm(true); // no atomics: the same bits
  mask(attributes, problem);
  if (problem.rate > 0)
    attributes.set_dropout(keepMask(*graph, problem), scalar(keptScale(problem.rate)),
                           scalar(static_cast<float>(1.0 - problem.rate)));
  auto [dQ, dK, dV] = graph->sdpa_backward(q, k, v, o, dO, stats, attributes);
  output(*dQ, kDQ, view.q);
  output(*dK, kDK, view.k);
  output(*dV, kDV, view.v);
  return graph;
}

/// `base` advanced by `offset` elements of `dtype` (cuDNN's variant pack holds non-const
/// pointers, inputs included).
void *at(const void *base, int64_t offset, plan::DType dtype) {
  return const_cast<char *>(static_cast<const char *>(base)) +
         offset * static_cast<int64_t>(dtypeBytes(dtype));
}

void check(cudnnStatus_t status, const char *what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuda backend: cuDNN: ") + what + ": " +
                             cudnnGetErrorString(status));
}

void checkCuda(cudaError_t code, const char *what) {
  if (code != cudaSuccess)
    throw std::runtime_error(std::string("cuda backend: ") + what + ": " +
                             cudaGetErrorString(code));
}

} // namespace

struct CudnnAttention::Graphs {
  cudnnHandle_t handle = nullptr;
  // (forward, heads, kv, d, b, s, dtype, causal, window, scale's bits, rate's bits)
  using Key = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, int64_t,
                         uint32_t, uint64_t>;
  std::map<Key, Built> built;

  ~Graphs() {
    built.clear(); // the plans before the handle they were built with
    if (handle)
      cudnnDestroy(handle);
  }

  /// The graph of `problem`, built on first use; null, with `why`, where cuDNN has none.
  const Built &get(const SdpaProblem &problem, bool forward) {
    uint32_t scaleBits;
    std::memcpy(&scaleBits, &problem.scale, sizeof scaleBits);
    uint64_t rateBits;
    std::memcpy(&rateBits, &problem.rate, sizeof rateBits);
    const Key key{forward,
                  problem.layout.heads,
                  problem.layout.kv,
                  problem.layout.d,
                  problem.b,
                  problem.s,
                  static_cast<int>(problem.dtype),
                  problem.causal,
                  problem.window,
                  scaleBits,
                  rateBits};
    auto found = built.find(key);
    if (found != built.end())
      return found->second;
    Built &entry = built[key];
    try {
      build(problem, sdpaLayout(problem.layout, problem.b, problem.s), forward, entry);
    } catch (const std::exception &e) { // a missing library, the frontend's own throws
      entry.graph = nullptr;
      entry.why = cat("building cuDNN ", version(), "'s graph failed: ", e.what());
    }
    return entry;
  }

  void build(const SdpaProblem &problem, const SdpaLayout &view, bool forward, Built &entry) {
    if (!handle)
      check(cudnnCreate(&handle), "creating the handle");
    auto graph = graphOf(problem, view, forward);
    fe::error_t status = graph->validate();
    if (status.is_good())
      status = graph->build_operation_graph(handle);
    if (status.is_good())
      status = graph->create_execution_plans({fe::HeurMode_t::A});
    if (status.is_good())
      status = graph->check_support();
    if (status.is_good())
      status = graph->build_plans();
    if (status.is_good())
      status = graph->get_workspace_size(entry.workspaceBytes);
    if (!status.is_good()) {
      entry.why = cat("cuDNN ", version(), " has no engine for it: ", status.get_message());
      return;
    }
    entry.graph = std::move(graph);
  }

  /// Runs the graph of `problem` in one direction: q, k and v in `qkv`, their gradients
  /// in `dqkv` (backward), the other operands in `pointers`. Packed queries (and their
  /// gradient) lie in the workspace after cuDNN's own. False, with `why`, where cuDNN has
  /// no graph for it or the workspace does not fit.
  bool run(const SdpaProblem &problem, bool forward, const void *qkv, void *dqkv,
           std::unordered_map<int64_t, void *> pointers, const Workspace &workspace,
           cudaStream_t stream, std::string &why) {
    const Built &entry = get(problem, forward);
    if (!entry.graph) {
      why = entry.why;
      return false;
    }
    const SdpaLayout view = sdpaLayout(problem.layout, problem.b, problem.s);
    const QueryPacking &pack = view.packing;
    const size_t size = dtypeBytes(problem.dtype);
    const size_t own = (static_cast<size_t>(entry.workspaceBytes) + 255) / 256 * 256;
    const size_t packed = view.packedQuery ? (size * pack.rows * pack.length + 255) / 256 * 256 : 0;
    const size_t bytes = own + (forward ? 1 : 2) * packed;
    char *space = nullptr;
    if (bytes > 0 && !(space = static_cast<char *>(workspace(bytes)))) {
      why = cat("cuDNN's workspace of ", bytes, " bytes does not fit");
      return false;
    }
    if (problem.rate > 0) {
      const void *keep = problem.keep ? problem.keep(why) : nullptr;
      if (!keep) {
        if (why.empty())
          why = "no keep mask was given for its dropped probabilities";
        return false;
      }
      pointers[kKeep] = const_cast<void *>(keep);
    }
    for (auto [uid, gradient, part] : {std::tuple{kQ, kDQ, &view.q}, std::tuple{kK, kDK, &view.k},
                                       std::tuple{kV, kDV, &view.v}}) {
      pointers[uid] = at(qkv, part->offset, problem.dtype);
      if (dqkv)
        pointers[gradient] = at(dqkv, part->offset, problem.dtype);
    }
    // A group's queries are one row of a pitched copy, to the packed queries and back.
    auto copy = [&](void *to, size_t toPitch, const void *from, size_t fromPitch) {
      checkCuda(cudaMemcpy2DAsync(to, size * toPitch, from, size * fromPitch, size * pack.length,
                                  pack.rows, cudaMemcpyDeviceToDevice, stream),
                "copying the grouped queries");
    };
    if (view.packedQuery) {
      pointers[kQ] = space + own;
      copy(pointers[kQ], pack.length, at(qkv, problem.layout.query(0), problem.dtype),
           pack.fusedPitch);
      if (dqkv)
        pointers[kDQ] = space + own + packed;
    }
    check(cudnnSetStream(handle, stream), "setting the stream");
    fe::error_t status = entry.graph->execute(handle, pointers, space);
    if (!status.is_good()) {
      (void)cudaGetLastError(); // a copy or set the frontend made: reported here, not later
      throw std::runtime_error("cuda backend: cuDNN attention failed: " + status.get_message());
    }
    if (view.packedQuery && dqkv)
      copy(at(dqkv, problem.layout.query(0), problem.dtype), pack.fusedPitch, pointers[kDQ],
           pack.length);
    return true;
  }
};

CudnnAttention::CudnnAttention() : graphs_(std::make_unique<Graphs>()) {}
CudnnAttention::~CudnnAttention() = default;

bool CudnnAttention::forward(const SdpaProblem &problem, const void *qkv, void *out,
                             float *stats, const Workspace &workspace, cudaStream_t stream,
                             std::string &why) {
  return graphs_->run(problem, true, qkv, nullptr, {{kO, out}, {kStats, stats}}, workspace,
                      stream, why);
}

bool CudnnAttention::backward(const SdpaProblem &problem, const void *qkv, const void *out,
                              const void *dout, const float *stats, void *dqkv,
                              const Workspace &workspace, cudaStream_t stream,
                              std::string &why) {
  return graphs_->run(problem, false, qkv, dqkv,
                      {{kO, at(out, 0, problem.dtype)},
                       {kDO, at(dout, 0, problem.dtype)},
                       {kStats, at(stats, 0, plan::DType::F32)}},
                      workspace, stream, why);
}

bool CudnnAttention::supports(const SdpaProblem &problem, std::string &why) {
  for (bool forward : {true, false}) {
    const Built &entry = graphs_->get(problem, forward);
    if (!entry.graph) {
      why = entry.why;
      return false;
    }
  }
  return true;
}

std::string CudnnAttention::version() {
  const size_t v = cudnnGetVersion(); // major·10000 + minor·100 + patch since cuDNN 9
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

} // namespace mt
