// gpu_attention: cuDNN's flash attention, every engine its heuristics offer, on the GPU it
// runs on: what the CUDA backend's attention could reach (CudnnAttention.cpp builds the
// heuristic's first, its backward deterministic). For each shape, the forward's plans,
// then the backward's deterministic and non-deterministic ones (the latter adds dQ with
// atomics: different bits on a rerun, which mtrun's promise forbids; measured to know the
// price of determinism), each plan's median of 10 runs. TFLOP/s count the causal mask's
// pairs, as mtrun --profile does: 2 products forward, 5 backward. Prints one JSON object.
//
// usage: gpu_attention
#include "bench/GpuBench.h"

#include <cudnn_frontend.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

namespace fe = cudnn_frontend;
using bench::check;

namespace {

/// n values in [-0.5, 0.5) to the device at x.
void fill(void *x, size_t n, unsigned salt) {
  std::vector<__nv_bfloat16> values(n);
  for (size_t i = 0; i < n; ++i)
    values[i] = __float2bfloat16(bench::filled(i, salt));
  check(cudaMemcpy(x, values.data(), n * sizeof values[0], cudaMemcpyHostToDevice), "copy");
}

struct Shape {
  const char *name;
  int64_t b, h, s, d;
};

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

/// q, k, v, o and their gradients [b, s, h, d] (cuDNN's dims [b, h, s, d]).
std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph &g, const Shape &p,
                                                     const char *name, Uid uid) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({p.b, p.h, p.s, p.d})
                      .set_stride({p.s * p.h * p.d, p.d, p.h * p.d, 1}));
}

std::shared_ptr<fe::graph::Graph> graphOf(const Shape &p, bool forward, bool deterministic) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = tensor(*g, p, "q", kQ), k = tensor(*g, p, "k", kK), v = tensor(*g, p, "v", kV);
  const float scale = 1.0f / std::sqrt(static_cast<float>(p.d));
  auto setStats = [&](fe::graph::Tensor_attributes &stats) {
    stats.set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({p.b, p.h, p.s, 1})
        .set_stride({p.h * p.s, p.s, 1, 1});
  };
  if (forward) {
    auto a = fe::graph::SDPA_attributes()
                 .set_name("attention")
                 .set_generate_stats(true)
                 .set_attn_scale(scale)
                 .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                 .set_diagonal_band_right_bound(0);
    auto [o, stats] = g->sdpa(q, k, v, a);
    o->set_output(true)
        .set_uid(kO)
        .set_dim({p.b, p.h, p.s, p.d})
        .set_stride({p.s * p.h * p.d, p.d, p.h * p.d, 1});
    stats->set_output(true);
    setStats(*stats);
    return g;
  }
  auto o = tensor(*g, p, "o", kO), dO = tensor(*g, p, "dO", kDO);
  auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats"));
  setStats(*stats);
  auto a = fe::graph::SDPA_backward_attributes()
               .set_name("attention backward")
               .set_attn_scale(scale)
               .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
               .set_diagonal_band_right_bound(0)
               .set_deterministic_algorithm(deterministic);
  auto [dQ, dK, dV] = g->sdpa_backward(q, k, v, o, dO, stats, a);
  for (auto [t, uid] : {std::pair{dQ, kDQ}, {dK, kDK}, {dV, kDV}})
    t->set_output(true)
        .set_uid(uid)
        .set_dim({p.b, p.h, p.s, p.d})
        .set_stride({p.s * p.h * p.d, p.d, p.h * p.d, 1});
  return g;
}

/// `text` as the inside of a JSON string.
std::string jsonText(const std::string &text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out;
}

/// Prints `label`'s plans as JSON: each plan's time per run and TFLOP/s, or why it has
/// none.
void timePlans(cudnnHandle_t handle, const Shape &p, const char *label, bool forward,
               bool deterministic, const std::unordered_map<int64_t, void *> &buffers, bool last) {
  std::printf("      \"%s\": ", label);
  std::shared_ptr<fe::graph::Graph> g;
  fe::error_t status;
  try { // the frontend throws on some graphs it cannot take
    g = graphOf(p, forward, deterministic);
    status = g->validate();
    if (status.is_good())
      status = g->build_operation_graph(handle);
    if (status.is_good())
      status = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
    if (status.is_good())
      status = g->check_support();
  } catch (const std::exception &e) {
    status = {fe::error_code_t::GRAPH_NOT_SUPPORTED, e.what()};
  }
  if (!status.is_good()) {
    std::printf("{\"error\": \"%s\"}%s\n", jsonText(status.get_message()).c_str(), last ? "" : ",");
    return;
  }
  // The graph's own tensors' buffers: the forward writes o and the statistics, which the
  // backward reads.
  std::unordered_map<int64_t, void *> pointers;
  for (Uid uid : forward ? std::vector<Uid>{kQ, kK, kV, kO, kStats}
                         : std::vector<Uid>{kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV})
    pointers[uid] = buffers.at(uid);
  const double pairs = p.s * (p.s + 1) / 2.0;
  const double flops = (forward ? 2 : 5) * 2.0 * p.b * p.h * pairs * p.d;
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::printf("[");
  // The first 12 configurations the heuristics rank, each built alone (building them all
  // would compile every one).
  const int64_t plans = std::min<int64_t>(g->get_execution_plan_count(), 12);
  for (int64_t i = 0; i < plans; ++i) {
    std::printf("%s{\"plan\": %lld, ", i ? ", " : "", static_cast<long long>(i));
    int64_t bytes = 0;
    fe::error_t built = g->build_plan_at_index(i);
    if (built.is_good())
      built = g->get_workspace_size_plan_at_index(i, bytes);
    void *workspace = nullptr;
    if (!built.is_good() || (bytes > 0 && cudaMalloc(&workspace, bytes) != cudaSuccess)) {
      std::printf("\"error\": \"%s\"}", built.is_good() ? "no memory for its workspace"
                                                        : jsonText(built.get_message()).c_str());
      (void)cudaGetLastError();
      continue;
    }
    // Batches of 10 runs queued back to back (each call's host work hidden behind the
    // device's), after 2 runs of warm-up: the median batch's time per run.
    auto run = [&] { return g->execute_plan_at_index(handle, pointers, workspace, i).is_good(); };
    bool ok = run() && run();
    std::vector<float> ms;
    for (int batch = 0; batch < 5 && ok; ++batch) {
      check(cudaEventRecord(start), "record");
      for (int r = 0; r < 10 && ok; ++r)
        ok = run();
      check(cudaEventRecord(stop), "record");
      check(cudaEventSynchronize(stop), "synchronize");
      float t = 0;
      check(cudaEventElapsedTime(&t, start, stop), "elapsed");
      ms.push_back(t / 10);
    }
    cudaFree(workspace);
    if (!ok) {
      (void)cudaGetLastError();
      std::printf("\"error\": \"a run failed\"}");
      continue;
    }
    std::sort(ms.begin(), ms.end());
    const double seconds = ms[ms.size() / 2] / 1e3;
    std::printf("\"workspace_bytes\": %lld, \"us\": %.2f, \"tflops\": %.1f}",
                static_cast<long long>(bytes), seconds * 1e6, flops / seconds / 1e12);
  }
  std::printf("]%s\n", last ? "" : ",");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

} // namespace

int main() {
  // GPT-2 124M's and GPT-3 1.3B's attention as bench/gpu.sh runs them, causal.
  const std::vector<Shape> shapes = {{"gpt2-124m", 8, 12, 1024, 64},
                                     {"gpt3-1.3b", 4, 16, 2048, 128}};
  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "gpu_attention: cudnnCreate failed\n");
    return 1;
  }
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device");
  std::printf("{\n  \"device\": \"%s\",\n  \"cudnn\": %zu,\n  \"shapes\": [\n", prop.name,
              cudnnGetVersion());
  for (size_t n = 0; n < shapes.size(); ++n) {
    const Shape &p = shapes[n];
    const size_t elements = static_cast<size_t>(p.b * p.s * p.h * p.d);
    std::unordered_map<int64_t, void *> pointers;
    for (Uid uid : {kQ, kK, kV, kO, kDO, kDQ, kDK, kDV}) {
      void *x = nullptr;
      check(cudaMalloc(&x, elements * sizeof(__nv_bfloat16)), "cudaMalloc");
      fill(x, elements, static_cast<unsigned>(uid));
      pointers[uid] = x;
    }
    check(cudaMalloc(&pointers[kStats], sizeof(float) * p.b * p.h * p.s), "cudaMalloc");
    check(cudaMemset(pointers[kStats], 0, sizeof(float) * p.b * p.h * p.s), "cudaMemset");
    check(cudaDeviceSynchronize(), "fill");
    std::printf("    {\"shape\": \"%s\", \"b\": %lld, \"heads\": %lld, \"s\": %lld, \"d\": %lld,\n",
                p.name, static_cast<long long>(p.b), static_cast<long long>(p.h),
                static_cast<long long>(p.s), static_cast<long long>(p.d));
    timePlans(handle, p, "forward", true, true, pointers, false);
    timePlans(handle, p, "backward_deterministic", false, true, pointers, false);
    timePlans(handle, p, "backward_atomic", false, false, pointers, true);
    std::printf("    }%s\n", n + 1 < shapes.size() ? "," : "");
    for (auto &entry : pointers)
      cudaFree(entry.second);
  }
  std::printf("  ]\n}\n");
  cudnnDestroy(handle);
  return 0;
}
