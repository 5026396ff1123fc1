// GEMM through OpenBLAS for the CPU kernels: C[m×n] = alpha·op(A)·op(B) + beta·C,
// row-major, with leading dimensions, in f32 or f64.
#ifndef MT_RUNTIME_BACKENDS_CPU_BLAS_H
#define MT_RUNTIME_BACKENDS_CPU_BLAS_H

#include <cblas.h>

#include <cstdint>

namespace mt::cpu {

inline void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                 int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, double alpha,
                 const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                 double *c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

} // namespace mt::cpu

#endif // MT_RUNTIME_BACKENDS_CPU_BLAS_H
