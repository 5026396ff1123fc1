// gpu_calibrate: the micro-benchmarks `mtc estimate`'s constants come from, on the GPU
// it runs on. Prints one JSON object:
//   gemms               bf16 products (cuBLAS, f32 accumulation) of square and of
//                       transformer shapes: seconds, TFLOP/s, and the seconds the
//                       tile-and-wave model gives at the peak (compiler/GemmModel.h)
//   gemm_efficiency     the median of model/measured over products of at least 1 TFLOP:
//                       the system file's gpu.gemm_efficiency
//   gemm_table          the same products over a grid: every m, n and k of `dims` (powers
//                       of two) of at most 2^41 FLOPs, as mtc counts a product: the
//                       row-major C (m x n) = A (m x k) · B (k x n), which cuBLAS runs as
//                       the column-major Cᵀ = Bᵀ·Aᵀ (its m is our n), as the CUDA backend
//                       calls it. TFLOP/s in the order [m][n][k], null where not run
//                       (larger). bench/calibrate.sh completes it for the system file's
//                       gpu.gemm_table, which mtc estimate interpolates
//   copy_gbs            a device-to-device copy's bytes read and written per second,
//   memory_efficiency   over the datasheet bandwidth given
//   kernel_overhead_us  seconds per kernel of 10,000 empty kernels launched back to back
//
// usage: gpu_calibrate PEAK_BF16_TFLOPS DATASHEET_GBS [TILE_M TILE_N]
#include "bench/GpuBench.h"
#include "compiler/GemmModel.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

using bench::check;
using bench::fill;

namespace {

__global__ void empty() {}

/// Seconds per call of `body`, over `repeats` calls after `warmup`.
template <typename F> double timed(F body, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i)
    body();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start), "record");
  for (int i = 0; i < repeats; ++i)
    body();
  check(cudaEventRecord(stop), "record");
  check(cudaEventSynchronize(stop), "synchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3 / repeats;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: gpu_calibrate PEAK_BF16_TFLOPS DATASHEET_GBS [TILE_M TILE_N]\n");
    return 2;
  }
  const double peak = std::atof(argv[1]) * 1e12, datasheet = std::atof(argv[2]) * 1e9;
  const int64_t tileM = argc == 5 ? std::atoll(argv[3]) : 256;
  const int64_t tileN = argc == 5 ? std::atoll(argv[4]) : 128;
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device");
  const int64_t sms = prop.multiProcessorCount;
  cublasHandle_t handle;
  check(cublasCreate(&handle), "cublasCreate");

  struct Shape {
    int64_t m, n, k;
  };
  std::vector<Shape> shapes;
  for (int64_t s = 1024; s <= 16384; s *= 2)
    shapes.push_back({s, s, s});
  // GPT-3 175B's products at tp 8 over 2048 tokens: QKV, projection, MLP in and out.
  shapes.push_back({2048, 4608, 12288});
  shapes.push_back({2048, 12288, 1536});
  shapes.push_back({2048, 6144, 12288});
  shapes.push_back({2048, 12288, 6144});
  // Whole waves: one tile per multiprocessor, and four.
  shapes.push_back({tileM * sms, tileN, 8192});
  shapes.push_back({tileM * sms, tileN * 4, 8192});

  std::vector<int64_t> dims;
  for (int64_t d = 128; d <= 32768; d *= 2)
    dims.push_back(d);
  const double mostFlops = std::ldexp(1.0, 41);
  size_t most = static_cast<size_t>(dims.back() * dims.back());
  for (const Shape &s : shapes)
    most = std::max(most, static_cast<size_t>(std::max({s.m * s.k, s.k * s.n, s.m * s.n})));
  __nv_bfloat16 *a, *b, *c;
  for (__nv_bfloat16 **p : {&a, &b, &c}) {
    check(cudaMalloc(p, most * sizeof(__nv_bfloat16)), "cudaMalloc");
    fill<<<1024, 256>>>(*p, most);
  }
  check(cudaDeviceSynchronize(), "fill");
  // Seconds of one column-major C (m x n) = A (m x k) · B (k x n): about a millisecond of
  // repeats (3 to 50) after one warm-up.
  auto gemmSeconds = [&](int64_t m, int64_t n, int64_t k) {
    const float one = 1, zero = 0;
    auto body = [&] {
      check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_16BF, m, b,
                         CUDA_R_16BF, k, &zero, c, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
    };
    const double once = timed(body, 1, 1);
    const int repeats = static_cast<int>(std::clamp(1e-3 / once, 3.0, 50.0));
    return timed(body, 1, repeats);
  };

  std::printf("{\n  \"device\": \"%s\",\n  \"multiprocessors\": %lld,\n  \"gemms\": [\n",
              prop.name, static_cast<long long>(sms));
  std::vector<double> ratios;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape &s = shapes[i];
    const double seconds = gemmSeconds(s.m, s.n, s.k);
    const double flops = 2.0 * s.m * s.n * s.k;
    const double model = mt::gemmWaveSeconds(1, s.m, s.n, s.k, tileM, tileN, sms, peak);
    if (flops >= 1e12)
      ratios.push_back(model / seconds);
    std::printf("    {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"seconds\": %.9g, \"tflops\": %.2f, "
                "\"model_seconds\": %.9g}%s\n",
                static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), seconds, flops / seconds / 1e12, model,
                i + 1 < shapes.size() ? "," : "");
  }
  std::printf("  ],\n  \"gemm_table\": {\"dims\": [");
  for (size_t i = 0; i < dims.size(); ++i)
    std::printf("%s%lld", i ? ", " : "", static_cast<long long>(dims[i]));
  std::printf("], \"tflops\": [");
  bool first = true;
  for (int64_t m : dims)
    for (int64_t n : dims)
      for (int64_t k : dims) {
        const double flops = 2.0 * m * n * k;
        std::printf("%s", first ? "" : ", ");
        first = false;
        if (flops > mostFlops)
          std::printf("null");
        else
          std::printf("%.2f", flops / gemmSeconds(n, m, k) / 1e12); // row-major, as above
      }
  std::printf("]},\n");
  std::sort(ratios.begin(), ratios.end());
  const double gemmEfficiency = ratios.empty() ? 0 : ratios[ratios.size() / 2];

  const size_t bytes = size_t(1) << 30;
  void *x, *y;
  check(cudaMalloc(&x, bytes), "cudaMalloc");
  check(cudaMalloc(&y, bytes), "cudaMalloc");
  const double copy = timed([&] { check(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice),
                                        "copy"); },
                            3, 20);
  const double copyRate = 2.0 * static_cast<double>(bytes) / copy;
  const double launch = timed([&] { empty<<<1, 1>>>(); }, 100, 10000);
  std::printf("  \"gemm_efficiency\": %.4f,\n  \"copy_gbs\": %.1f,\n"
              "  \"memory_efficiency\": %.4f,\n  \"kernel_overhead_us\": %.3f\n}\n",
              gemmEfficiency, copyRate / 1e9, copyRate / datasheet, launch * 1e6);
  return 0;
}
