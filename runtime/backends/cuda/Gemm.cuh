// GEMMs: cuBLASLt with the bias fused as an epilogue, and cuBLAS's general GEMM for the
// shapes cuBLASLt has no algorithm for (the backend adds the bias after it). Column-major
// with f32 compute; A, B and C in one storage type.
#ifndef MT_RUNTIME_BACKENDS_CUDA_GEMM_CUH
#define MT_RUNTIME_BACKENDS_CUDA_GEMM_CUH

#include "backends/cuda/Common.cuh"

#include <cublasLt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mt {
namespace {

cudaDataType_t cudaTypeOf(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  default:
    return CUDA_R_32F;
  }
}

/// MT_CUDA_GEMM=cublas: every GEMM through cuBLAS's general GEMM, the path taken where
/// cuBLASLt has no algorithm or fails (to test it, or to rule cuBLASLt out);
/// MT_CUDA_GEMM=cublaslt: cuBLASLt or an error, never the fallback (to test cuBLASLt).
enum class GemmPath { Any, CublasOnly, CublasLtOnly };
GemmPath gemmPath() {
  const char *gemm = std::getenv("MT_CUDA_GEMM");
  if (gemm && std::strcmp(gemm, "cublas") == 0)
    return GemmPath::CublasOnly;
  if (gemm && std::strcmp(gemm, "cublaslt") == 0)
    return GemmPath::CublasLtOnly;
  return GemmPath::Any;
}

/// The GEMM through cuBLASLt on `stream`; false where it has no algorithm for these shapes
/// and alignments (tiny, odd dimensions) or the call fails, and the caller falls back. The
/// first failure of a call that had an algorithm is reported once (`warnedFailure`).
inline bool gemmLt(cublasLtHandle_t lt, void *workspaceData, size_t workspaceBytes,
                   bool &warnedFailure, bool transA, bool transB, int64_t m, int64_t n,
                   int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb, void *c,
                   int64_t ldc, DType dtype, const void *bias, cudaStream_t stream) {
  const cudaDataType_t type = cudaTypeOf(dtype);
  cublasLtMatmulDesc_t desc;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB);
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                   sizeof epilogue);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type);
  }
  cublasLtMatrixLayout_t la, lb, lc;
  check(cublasLtMatrixLayoutCreate(&la, type, transA ? k : m, transA ? m : k, lda), "layout A");
  check(cublasLtMatrixLayoutCreate(&lb, type, transB ? n : k, transB ? k : n, ldb), "layout B");
  check(cublasLtMatrixLayoutCreate(&lc, type, m, n, ldc), "layout C");
  cublasLtMatmulPreference_t preference;
  cublasLtMatmulPreferenceCreate(&preference);
  const size_t workspace = workspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace, sizeof workspace);
  // Parameters sit at element offsets of one flat store: tell the heuristic how aligned
  // each operand really is.
  auto alignment = [](const void *ptr) {
    uint32_t a = 256;
    while (a > 1 && reinterpret_cast<uintptr_t>(ptr) % a != 0)
      a /= 2;
    return a;
  };
  const uint32_t alignA = alignment(a), alignB = alignment(b), alignC = alignment(c);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                       &alignA, sizeof alignA);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                       &alignB, sizeof alignB);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                       &alignC, sizeof alignC);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                       &alignC, sizeof alignC);
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, preference,
                                                         1, &heuristic, &found);
  const float one = 1.f, zero = 0.f;
  const bool haveAlgorithm = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (haveAlgorithm)
    status = cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, c, lc, c, lc,
                            &heuristic.algo, workspaceData, workspaceBytes, stream);
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  if (haveAlgorithm && status != CUBLAS_STATUS_SUCCESS && !warnedFailure) {
    std::fprintf(stderr, "cuda backend: cublasLtMatmul failed (cuBLAS status %d) for an "
                         "%lld x %lld x %lld GEMM; using cublasGemmEx\n",
                 static_cast<int>(status), static_cast<long long>(m),
                 static_cast<long long>(n), static_cast<long long>(k));
    warnedFailure = true;
  }
  return haveAlgorithm && status == CUBLAS_STATUS_SUCCESS;
}

/// product = op(A)·op(B) through cuBLAS's general GEMM, on the stream of `blas` (the
/// backend sets it to its own): f32 compute, A and B in `dtype`, the product in
/// `productType` with leading dimension `ldProduct`.
inline void gemmEx(cublasHandle_t blas, bool transA, bool transB, int64_t m, int64_t n,
                   int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                   void *product, cudaDataType_t productType, int64_t ldProduct, DType dtype) {
  const cudaDataType_t type = cudaTypeOf(dtype);
  const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float one = 1.f, zero = 0.f;
  check(cublasGemmEx(blas, opA, opB, static_cast<int>(m), static_cast<int>(n),
                     static_cast<int>(k), &one, a, type, static_cast<int>(lda), b, type,
                     static_cast<int>(ldb), &zero, product, productType,
                     static_cast<int>(ldProduct), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_GEMM_CUH
