// gpu_streams: whether a weight gradient's product, run on a second stream beside the
// input gradient's (and the next linear's), would shorten a transformer's backward on the
// GPU it runs on. A weight gradient's output is small (its k is the batch's tokens), so
// its last wave of tiles can leave most multiprocessors idle: GPT-2 124M's 768 x 3072
// over 8,192 tokens makes 144 tiles of 128 x 128 for 132 multiprocessors.
//
// For each model's four linears of a layer, as the CUDA backend calls cuBLAS
// (CudaBackend.cu: LinearGradInput, and LinearGradWeight accumulating into f32), in
// backward's order (the MLP's second linear first): the seconds of the layer's eight
// products on one stream, and with each weight gradient on a second stream (forked when
// its dy is ready, joined only after the timed layers: the most overlap a backward could
// have). Prints one JSON object; the same products run in both, so the difference is the
// overlap alone. (The backend calls cuBLASLt first; cuBLAS here may choose other kernels.)
//
// usage: gpu_streams
#include "bench/GpuBench.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

using bench::check;
using bench::fill;

namespace {

/// A linear y[tokens x out] = x[tokens x in]·Wᵀ, W [out x in].
struct Linear {
  int64_t in, out;
};
struct Model {
  const char *name;
  int64_t tokens;
  std::vector<Linear> linears; // in backward's order
};

} // namespace

int main() {
  const int64_t h1 = 768, h2 = 2048;
  const std::vector<Model> models = {
      {"gpt2-124m", 8 * 1024, {{4 * h1, h1}, {h1, 4 * h1}, {h1, h1}, {h1, 3 * h1}}},
      {"gpt3-1.3b", 4 * 2048, {{4 * h2, h2}, {h2, 4 * h2}, {h2, h2}, {h2, 3 * h2}}}};
  size_t most = 0;
  for (const Model &m : models)
    for (const Linear &l : m.linears)
      most = std::max({most, static_cast<size_t>(m.tokens * l.in),
                       static_cast<size_t>(m.tokens * l.out), static_cast<size_t>(l.in * l.out)});
  __nv_bfloat16 *x, *w, *dy, *dx;
  float *dw;
  for (__nv_bfloat16 **p : {&x, &w, &dy, &dx}) {
    check(cudaMalloc(p, most * sizeof(__nv_bfloat16)), "cudaMalloc");
    fill<<<1024, 256>>>(*p, most);
  }
  check(cudaMalloc(&dw, most * sizeof(float)), "cudaMalloc");
  check(cudaMemset(dw, 0, most * sizeof(float)), "cudaMemset");
  check(cudaDeviceSynchronize(), "fill");

  cudaStream_t main, side;
  check(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "stream");
  cublasHandle_t onMain, onSide;
  check(cublasCreate(&onMain), "cublasCreate");
  check(cublasCreate(&onSide), "cublasCreate");
  check(cublasSetStream(onMain, main), "cublasSetStream");
  check(cublasSetStream(onSide, side), "cublasSetStream");
  // As the CUDA backend sets its handle: products reduced in f32 only.
  for (cublasHandle_t handle : {onMain, onSide})
    check(cublasSetMathMode(handle, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
          "cublasSetMathMode");
  std::vector<cudaEvent_t> forks(4);
  for (cudaEvent_t &fork : forks)
    check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "event");
  cudaEvent_t joined;
  check(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming), "event");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");

  const float one = 1, zero = 0;
  // dx = dy·W (column-major dxᵀ = Wᵀ·dyᵀ), and dW += dyᵀ·x in f32.
  auto inputGradient = [&](cublasHandle_t handle, int64_t tokens, const Linear &l) {
    check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, l.in, tokens, l.out, &one, w, CUDA_R_16BF,
                       l.in, dy, CUDA_R_16BF, l.out, &zero, dx, CUDA_R_16BF, l.in,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "input gradient");
  };
  auto weightGradient = [&](cublasHandle_t handle, int64_t tokens, const Linear &l) {
    check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, tokens, &one, x, CUDA_R_16BF,
                       l.in, dy, CUDA_R_16BF, l.out, &one, dw, CUDA_R_32F, l.in, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "weight gradient");
  };
  // With two streams, each weight gradient starts once its dy is ready (forked before the
  // input gradient that reads the same dy) and nothing waits for it until the end: the
  // overlap a backward could have at most.
  auto layer = [&](const Model &m, bool twoStreams) {
    for (size_t i = 0; i < m.linears.size(); ++i) {
      if (twoStreams) {
        check(cudaEventRecord(forks[i], main), "fork");
        check(cudaStreamWaitEvent(side, forks[i]), "fork");
        weightGradient(onSide, m.tokens, m.linears[i]);
      }
      inputGradient(onMain, m.tokens, m.linears[i]);
      if (!twoStreams)
        weightGradient(onMain, m.tokens, m.linears[i]);
    }
  };
  auto join = [&] {
    check(cudaEventRecord(joined, side), "join");
    check(cudaStreamWaitEvent(main, joined), "join");
  };
  auto seconds = [&](const Model &m, bool twoStreams) {
    const int repeats = 20;
    for (int i = 0; i < 3; ++i)
      layer(m, twoStreams);
    join();
    check(cudaEventRecord(start, main), "record");
    for (int i = 0; i < repeats; ++i)
      layer(m, twoStreams);
    join();
    check(cudaEventRecord(stop, main), "record");
    check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    return ms / 1e3 / repeats;
  };

  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device");
  std::printf("{\n  \"device\": \"%s\",\n  \"multiprocessors\": %d,\n  \"layers\": [\n", prop.name,
              prop.multiProcessorCount);
  for (size_t i = 0; i < models.size(); ++i) {
    const Model &m = models[i];
    double flops = 0;
    for (const Linear &l : m.linears)
      flops += 2 * 2.0 * m.tokens * l.in * l.out;
    const double one = seconds(m, false), two = seconds(m, true), again = seconds(m, false);
    const double serial = std::min(one, again);
    std::printf("    {\"model\": \"%s\", \"one_stream_us\": %.2f, \"two_streams_us\": %.2f, "
                "\"saved\": %.4f, \"one_stream_tflops\": %.1f, \"two_streams_tflops\": %.1f}%s\n",
                m.name, serial * 1e6, two * 1e6, 1 - two / serial, flops / serial / 1e12,
                flops / two / 1e12, i + 1 < models.size() ? "," : "");
  }
  std::printf("  ]\n}\n");
  return 0;
}
