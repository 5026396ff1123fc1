// What the GPU micro-benchmarks (gpu_calibrate, gpu_streams, gpu_attention) share: a
// failed CUDA or cuBLAS call ends the program naming it, and device buffers filled with
// the same values in [-0.5, 0.5).
#ifndef MT_BENCH_GPUBENCH_H
#define MT_BENCH_GPUBENCH_H

#include <cublas_api.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace bench {

inline void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what,
                 cudaGetErrorString(e));
    std::exit(1);
  }
}
inline void check(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: %s: cuBLAS status %d\n", program_invocation_short_name, what,
                 static_cast<int>(s));
    std::exit(1);
  }
}

/// Element i's value: ((i + salt) · 2654435761 mod 1000) / 1000 − 0.5, in 64 bits.
__host__ __device__ inline float filled(size_t i, unsigned salt) {
  return static_cast<float>(((i + salt) * 2654435761u) % 1000) / 1000.0f - 0.5f;
}

#ifdef __CUDACC__
__global__ void fill(__nv_bfloat16 *x, size_t n, unsigned salt = 0) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16(filled(i, salt));
}
#endif

} // namespace bench

#endif // MT_BENCH_GPUBENCH_H
