// GEMMs: cuBLASLt with the bias and GELU (or GELU's gradient) fused as its epilogue, and
// cuBLAS's general GEMM for the shapes cuBLASLt has no algorithm for (the backend applies
// the epilogue after it). Column-major with f32 compute; A, B and C in one storage type,
// except that a product accumulated into a parameter's gradient adds into f32.
#ifndef MT_RUNTIME_BACKENDS_CUDA_GEMM_CUH
#define MT_RUNTIME_BACKENDS_CUDA_GEMM_CUH

#include "backends/cuda/Common.cuh"
#include "backends/cuda/GemmChoices.h"

#include <cublasLt.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

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
/// MT_CUDA_GEMM=cublaslt: cuBLASLt or an error, never the fallback, nor a bias gradient
/// summed apart from its weight gradient's GEMM (to test cuBLASLt).
enum class GemmPath { Any, CublasOnly, CublasLtOnly };
GemmPath gemmPath() {
  return static_cast<GemmPath>(environmentChoice("MT_CUDA_GEMM", "cublas", "cublaslt"));
}

/// What a GEMM applies to its product: the bias per row of C (or none), then nothing,
/// GELU keeping its input in `aux` (GELU_AUX), or GELU's gradient at the pre-activation
/// `aux` (DGELU). `aux` is shaped as C, with C's leading dimension. cuBLASLt's GELU is
/// the tanh approximation, as core/SharedMath.h's; the backend fuses it in 16 bits only.
/// `accumulate`: C is f32 and the product is added to it (C = A·B + C), with neither
/// bias nor activation (a weight gradient into the parameter's gradient). `biasGrad`:
/// op(B)'s column sums over k, written (never added) in C's type (BGRADB: a weight
/// gradient's bias gradient, dy summed over its rows), with no bias and no activation.
enum class Activation { None, Gelu, GeluGrad };
struct Epilogue {
  const void *bias = nullptr;
  Activation activation = Activation::None;
  void *aux = nullptr;
  bool accumulate = false;
  void *biasGrad = nullptr;
};

/// GEMMs through cuBLASLt, each shape's descriptors and algorithm chosen once and kept:
/// the heuristic query costs the host far more than a launch, and a fixed algorithm per
/// shape keeps reruns bit-identical. The algorithm is the heuristic's first; with
/// `choices` (MT_CUDA_GEMM_CHOICES), the one the file holds for the shape, or else the
/// fastest of the heuristic's candidates, timed at the shape's first run (outside a
/// recording) on scratch outputs and added to the file: runs that find every shape in
/// the file take the same algorithms, and give the same bits, each time.
class LtGemms {
public:
  /// `identity`: the device, its multiprocessors and cuBLASLt's version, which the
  /// choices' keys begin with (an algorithm's bits hold on that alone).
  LtGemms(cublasLtHandle_t lt, GemmChoices *choices, std::string identity)
      : lt_(lt), choices_(choices), identity_(std::move(identity)) {}
  LtGemms(const LtGemms &) = delete;
  LtGemms &operator=(const LtGemms &) = delete;
  ~LtGemms() {
    for (auto &[key, plan] : plans_)
      destroy(plan);
  }

  /// C = op(A)·op(B) with `epilogue` on `stream`; false where cuBLASLt has no algorithm
  /// for these shapes and alignments (tiny, odd dimensions) or the call fails, and the
  /// caller falls back. The first failure of a call that had an algorithm is reported
  /// once.
  bool run(void *workspaceData, size_t workspaceBytes, bool transA, bool transB, int64_t m,
           int64_t n, int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
           void *c, int64_t ldc, DType dtype, const Epilogue &epilogue, cudaStream_t stream) {
    const void *bias = epilogue.bias;
    const bool activation = epilogue.activation != Activation::None;
    // The auxiliary matrix wants 16-byte alignment and a leading dimension that is a
    // multiple of 8 (cuBLASLt's rules); otherwise the caller's fallback runs the pair.
    if (activation && (reinterpret_cast<uintptr_t>(epilogue.aux) % 16 != 0 || ldc % 8 != 0))
      return false;
    // The bias gradient wants a 16-byte aligned vector too, and is an epilogue of its own.
    if (epilogue.biasGrad &&
        (reinterpret_cast<uintptr_t>(epilogue.biasGrad) % 16 != 0 || bias || activation))
      return false;
    // Parameters sit at element offsets of one flat store: the heuristic is told how
    // aligned each operand really is, so the alignments are part of the shape.
    auto alignment = [](const void *ptr) {
      uint32_t align = 256;
      while (align > 1 && reinterpret_cast<uintptr_t>(ptr) % align != 0)
        align /= 2;
      return align;
    };
    const Key key{transA,
                  transB,
                  m,
                  n,
                  k,
                  lda,
                  ldb,
                  ldc,
                  static_cast<int>(dtype),
                  bias != nullptr,
                  static_cast<int>(epilogue.activation),
                  epilogue.accumulate,
                  epilogue.biasGrad != nullptr,
                  alignment(a),
                  alignment(b),
                  alignment(c),
                  workspaceBytes};
    auto found = plans_.find(key);
    if (found == plans_.end()) {
      Plan plan;
      if (!choose(key, epilogue, {a, b, workspaceData, stream}, plan))
        return false; // the heuristic failed: asked again next time
      found = plans_.emplace(key, plan).first;
    }
    Plan &plan = found->second;
    if (!plan.haveAlgorithm)
      return false;
    if (epilogue.biasGrad)
      bias = epilogue.biasGrad; // the epilogue's vector, written
    if (bias && cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                               &bias, sizeof bias) != CUBLAS_STATUS_SUCCESS)
      return false;
    if (activation &&
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                       &epilogue.aux,
                                       sizeof epilogue.aux) != CUBLAS_STATUS_SUCCESS)
      return false;
    const float one = 1.f, beta = epilogue.accumulate ? 1.f : 0.f;
    const cublasStatus_t status =
        cublasLtMatmul(lt_, plan.desc, &one, a, plan.la, b, plan.lb, &beta, c, plan.lc, c,
                       plan.lc, &plan.algo, workspaceData, workspaceBytes, stream);
    // A product added into C may have been added already if the call got as far as a
    // launch: never run it a second time.
    if (epilogue.accumulate && status != CUBLAS_STATUS_SUCCESS &&
        status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_INVALID_VALUE)
      throw std::runtime_error(cat("cuda backend: cublasLtMatmul failed (cuBLAS status ",
                                   static_cast<int>(status), ") adding a ", m, " x ", n,
                                   " x ", k, " GEMM into a gradient"));
    if (status != CUBLAS_STATUS_SUCCESS && !warnedFailure_) {
      std::fprintf(stderr, "cuda backend: cublasLtMatmul failed (cuBLAS status %d) for an "
                           "%lld x %lld x %lld GEMM; using cublasGemmEx\n",
                   static_cast<int>(status), static_cast<long long>(m),
                   static_cast<long long>(n), static_cast<long long>(k));
      warnedFailure_ = true;
    }
    return status == CUBLAS_STATUS_SUCCESS;
  }

  /// Shapes seen so far (each chose its algorithm once).
  size_t shapes() const { return plans_.size(); }

private:
  struct Key {
    bool transA, transB;
    int64_t m, n, k, lda, ldb, ldc;
    int dtype;
    bool bias;
    int activation;
    bool accumulate;
    bool biasGrad;
    uint32_t alignA, alignB, alignC;
    size_t workspace;
    auto tie() const {
      return std::tie(transA, transB, m, n, k, lda, ldb, ldc, dtype, bias, activation, accumulate,
                      biasGrad, alignA, alignB, alignC, workspace);
    }
    bool operator<(const Key &other) const { return tie() < other.tie(); }
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool haveAlgorithm = false;
  };
  /// The first call's operands, which the candidates are timed on.
  struct Operands {
    const void *a, *b;
    void *workspace;
    cudaStream_t stream;
  };
  static constexpr int kCandidates = 16;

  static void destroy(Plan &plan) {
    for (cublasLtMatrixLayout_t *layout : {&plan.la, &plan.lb, &plan.lc})
      if (*layout)
        cublasLtMatrixLayoutDestroy(std::exchange(*layout, nullptr));
    if (plan.desc)
      cublasLtMatmulDescDestroy(std::exchange(plan.desc, nullptr));
  }

  /// The descriptors of `key`'s shape and its algorithm: the heuristic's first, the
  /// choices' or the fastest candidate (none: `haveAlgorithm` false); false, holding
  /// nothing, where the heuristic itself failed.
  bool choose(const Key &key, const Epilogue &epilogue, const Operands &operands,
              Plan &plan) const {
    try {
      const cudaDataType_t type = cudaTypeOf(static_cast<DType>(key.dtype));
      check(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            "matmul descriptor");
      const cublasOperation_t opA = key.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
      const cublasOperation_t opB = key.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA,
                                           sizeof opA),
            "transposing A");
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB,
                                           sizeof opB),
            "transposing B");
      cublasLtEpilogue_t mode = key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      if (epilogue.activation == Activation::Gelu)
        mode = key.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      else if (epilogue.activation == Activation::GeluGrad)
        mode = CUBLASLT_EPILOGUE_DGELU; // no bias: the product is a gradient
      else if (key.biasGrad)
        mode = CUBLASLT_EPILOGUE_BGRADB;
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &mode,
                                           sizeof mode),
            "the epilogue");
      if (key.biasGrad) {
        // In C's type: f32 where the product is added into a parameter's f32 gradient.
        const cudaDataType_t sums = key.accumulate ? CUDA_R_32F : type;
        check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &sums,
                                             sizeof sums),
              "the bias gradient's type");
        check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                             &epilogue.biasGrad, sizeof epilogue.biasGrad),
              "the bias gradient");
      }
      if (key.bias) {
        check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                             &type, sizeof type),
              "the bias type");
        check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                             &epilogue.bias, sizeof epilogue.bias),
              "the bias");
      }
      if (epilogue.activation != Activation::None) {
        const int64_t auxLd = key.ldc;
        check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                             &auxLd, sizeof auxLd),
              "the auxiliary matrix's leading dimension");
        check(cublasLtMatmulDescSetAttribute(plan.desc,
                                             CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                             &epilogue.aux, sizeof epilogue.aux),
              "the auxiliary matrix");
      }
      const int64_t m = key.m, n = key.n, k = key.k;
      check(cublasLtMatrixLayoutCreate(&plan.la, type, key.transA ? k : m, key.transA ? m : k,
                                       key.lda),
            "layout A");
      check(cublasLtMatrixLayoutCreate(&plan.lb, type, key.transB ? n : k, key.transB ? k : n,
                                       key.ldb),
            "layout B");
      check(cublasLtMatrixLayoutCreate(&plan.lc, key.accumulate ? CUDA_R_32F : type, m, n,
                                       key.ldc),
            "layout C");
      const std::string text = choices_ ? keyText(key) : std::string();
      if (choices_ && takeKept(key, text, plan))
        return true;
      cublasLtMatmulPreference_t preference;
      check(cublasLtMatmulPreferenceCreate(&preference), "matmul preference");
      cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &key.workspace, sizeof key.workspace);
      cublasLtMatmulPreferenceSetAttribute(
          preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.alignA, sizeof key.alignA);
      cublasLtMatmulPreferenceSetAttribute(
          preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.alignB, sizeof key.alignB);
      cublasLtMatmulPreferenceSetAttribute(
          preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.alignC, sizeof key.alignC);
      cublasLtMatmulPreferenceSetAttribute(
          preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.alignC, sizeof key.alignC);
      // Split-K sums its parts in f32 (never in the output type, nor in place), so a
      // 16-bit product is rounded once, as on the CPU.
      const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                           &reduction, sizeof reduction);
      // The heuristic's candidates: its first alone, unless they are to be timed, which a
      // recording cannot do (its calls would run only at the replay).
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      const bool timing = choices_ &&
                          cudaStreamIsCapturing(operands.stream, &capturing) == cudaSuccess &&
                          capturing == cudaStreamCaptureStatusNone;
      std::vector<cublasLtMatmulHeuristicResult_t> heuristic(timing ? kCandidates : 1);
      int found = 0;
      const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
          lt_, plan.desc, plan.la, plan.lb, plan.lc, plan.lc, preference,
          static_cast<int>(heuristic.size()), heuristic.data(), &found);
      cublasLtMatmulPreferenceDestroy(preference);
      // No algorithm for the shape is an answer to keep; a failed query is not.
      if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED) {
        destroy(plan);
        return false;
      }
      plan.haveAlgorithm = status == CUBLAS_STATUS_SUCCESS && found > 0;
      if (plan.haveAlgorithm)
        plan.algo = heuristic[0].algo;
      if (plan.haveAlgorithm && timing) {
        heuristic.resize(static_cast<size_t>(found));
        chooseFastest(key, text, epilogue, operands, heuristic, plan);
      }
      return true;
    } catch (...) {
      destroy(plan);
      throw;
    }
  }

  /// The choices' algorithm for the shape `text` in `plan`, checked; false where they have
  /// none. One cuBLASLt refuses, or one summing split-K's parts other than in f32 (a
  /// hand-edited line), throws.
  bool takeKept(const Key &key, const std::string &text, Plan &plan) const {
    const GemmAlgorithm *kept = choices_->find(text);
    if (!kept)
      return false;
    std::memcpy(&plan.algo, kept->data(), sizeof plan.algo);
    cublasLtMatmulHeuristicResult_t checked;
    const cublasStatus_t valid = cublasLtMatmulAlgoCheck(lt_, plan.desc, plan.la, plan.lb, plan.lc,
                                                         plan.lc, &plan.algo, &checked);
    const uint64_t reduction = configOf(plan.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
    std::string why;
    if (valid != CUBLAS_STATUS_SUCCESS)
      why = cat("cuBLAS status ", static_cast<int>(valid));
    else if (reduction != CUBLASLT_REDUCTION_SCHEME_NONE &&
             reduction != CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
      why = cat("split-K summed in reduction scheme ", reduction, ", not in f32");
    else if (checked.workspaceSize > key.workspace)
      why = cat("it wants ", checked.workspaceSize, " bytes of workspace, of ", key.workspace);
    if (!why.empty())
      throw std::runtime_error(cat("cuda backend: ", choices_->path(),
                                   ": the algorithm it holds for `", text, "` cannot run here (",
                                   why, "); delete that line, or the file, to choose again"));
    plan.haveAlgorithm = true;
    return true;
  }

  /// The choices' key of a shape: the device's identity, then the shape.
  std::string keyText(const Key &key) const {
    return cat(identity_, " ", key.transA ? "T" : "N", key.transB ? "T" : "N", " m", key.m, " n",
               key.n, " k", key.k, " ld", key.lda, ",", key.ldb, ",", key.ldc, " ",
               plan::EnumNameDType(static_cast<DType>(key.dtype)), " bias", key.bias, " act",
               key.activation, " acc", key.accumulate, " bgrad", key.biasGrad, " align", key.alignA,
               ",", key.alignB, ",", key.alignC, " ws", key.workspace);
  }

  /// One of an algorithm's configuration attributes, as a number (0 where unknown).
  static uint64_t configOf(const cublasLtMatmulAlgo_t &algo,
                           cublasLtMatmulAlgoConfigAttributes_t what) {
    uint64_t value = 0;
    size_t size = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, what, nullptr, 0, &size) !=
            CUBLAS_STATUS_SUCCESS ||
        size > sizeof value ||
        cublasLtMatmulAlgoConfigGetAttribute(&algo, what, &value, size, &size) !=
            CUBLAS_STATUS_SUCCESS)
      return 0;
    return value; // little-endian: a narrower attribute reads as its value
  }

  /// Times each of `candidates` on `plan`'s descriptors (the operands' own A and B,
  /// scratch outputs), keeps the fastest in `plan` and adds it to the choices, with
  /// every candidate's configuration and time as its comment.
  void chooseFastest(const Key &key, const std::string &text, const Epilogue &epilogue,
                     const Operands &operands,
                     const std::vector<cublasLtMatmulHeuristicResult_t> &candidates,
                     Plan &plan) const {
    const size_t cBytes =
        static_cast<size_t>(key.ldc * key.n) *
        (key.accumulate ? sizeof(float) : dtypeBytes(static_cast<DType>(key.dtype)));
    const size_t auxBytes = epilogue.activation != Activation::None ? cBytes : 0;
    const size_t vectorBytes = sizeof(float) * static_cast<size_t>(std::max(key.m, key.n));
    auto round = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
    char *scratch = nullptr;
    // Timing is a choice, not a need: where the device has no room for the outputs, the
    // heuristic's first runs, and the shape is chosen by a later run.
    if (handled(cudaMalloc(&scratch, round(cBytes) + round(auxBytes) + vectorBytes)) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      std::fprintf(stderr,
                   "cuda backend: no room to time the candidates of a %lld x %lld x %lld GEMM; "
                   "it runs the heuristic's first, and %s does not hold it yet\n",
                   static_cast<long long>(key.m), static_cast<long long>(key.n),
                   static_cast<long long>(key.k), choices_->path().c_str());
      return;
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    try {
      check(cudaMemsetAsync(scratch, 0, round(cBytes) + round(auxBytes) + vectorBytes,
                            operands.stream),
            "clearing the timed outputs");
      void *c = scratch, *aux = scratch + round(cBytes);
      void *vector = scratch + round(cBytes) + round(auxBytes);
      if (epilogue.activation != Activation::None)
        check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                             &aux, sizeof aux),
              "the timed auxiliary matrix");
      if (key.biasGrad)
        check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector,
                                             sizeof vector),
              "the timed bias gradient");
      check(cudaEventCreate(&start), "creating an event");
      check(cudaEventCreate(&stop), "creating an event");
      const float one = 1.f, beta = key.accumulate ? 1.f : 0.f;
      auto call = [&](const cublasLtMatmulAlgo_t &algo) {
        return cublasLtMatmul(lt_, plan.desc, &one, operands.a, plan.la, operands.b, plan.lb, &beta,
                              c, plan.lc, c, plan.lc, &algo, operands.workspace, key.workspace,
                              operands.stream);
      };
      // Seconds per call: the best of three rounds of about 0.2 ms each; none where the
      // candidate fails.
      auto seconds = [&](const cublasLtMatmulAlgo_t &algo) {
        if (call(algo) != CUBLAS_STATUS_SUCCESS) {
          (void)cudaGetLastError(); // a refused candidate leaves nothing for a later check
          return -1.0;
        }
        double best = 0;
        for (int round = 0, repeats = 1; round < 4; ++round) {
          check(cudaEventRecord(start, operands.stream), "recording an event");
          for (int i = 0; i < repeats; ++i)
            if (call(algo) != CUBLAS_STATUS_SUCCESS) {
              (void)cudaGetLastError();
              return -1.0;
            }
          check(cudaEventRecord(stop, operands.stream), "recording an event");
          check(cudaEventSynchronize(stop), "timing a GEMM candidate");
          float ms = 0;
          check(cudaEventElapsedTime(&ms, start, stop), "timing a GEMM candidate");
          const double each = ms / 1e3 / repeats;
          if (round == 0) // the first round sizes the others
            repeats = static_cast<int>(std::clamp(2e-4 / std::max(each, 1e-7), 1.0, 50.0));
          else if (round == 1 || each < best)
            best = each;
        }
        return best;
      };
      const double flops = 2.0 * static_cast<double>(key.m) * key.n * key.k;
      std::string comment = cat(text, ": the heuristic's ", candidates.size(), " candidates\n");
      size_t fastest = 0;
      std::vector<double> times;
      for (size_t i = 0; i < candidates.size(); ++i) {
        const cublasLtMatmulAlgo_t &algo = candidates[i].algo;
        times.push_back(seconds(algo));
        if (times[i] > 0 && (times[fastest] <= 0 || times[i] < times[fastest]))
          fastest = i;
        comment += cat(i, ": id ", configOf(algo, CUBLASLT_ALGO_CONFIG_ID), " tile ",
                       configOf(algo, CUBLASLT_ALGO_CONFIG_TILE_ID), " stages ",
                       configOf(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID), " splitk ",
                       configOf(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), " reduction ",
                       configOf(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), " swizzle ",
                       configOf(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), " cluster ",
                       configOf(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), ": ");
        comment += times[i] > 0
                       ? cat(times[i] * 1e6, " us, ", flops / times[i] / 1e12, " TFLOP/s\n")
                       : std::string("failed\n");
      }
      check(cudaEventDestroy(std::exchange(start, nullptr)), "destroying an event");
      check(cudaEventDestroy(std::exchange(stop, nullptr)), "destroying an event");
      check(cudaFree(std::exchange(scratch, nullptr)), "freeing the timed outputs");
      if (times[fastest] <= 0)
        return; // none ran: the heuristic's first, which the real call may yet refuse
      plan.algo = candidates[fastest].algo;
      comment += cat("chosen: ", fastest,
                     times[0] > 0 ? cat(", ", times[0] / times[fastest], "x the heuristic's first")
                                  : std::string());
      GemmAlgorithm bytes;
      std::memcpy(bytes.data(), &plan.algo, sizeof plan.algo);
      if (Status added = choices_->add(text, bytes, comment); !added.ok())
        throw std::runtime_error(cat("cuda backend: ", added.message()));
    } catch (...) {
      if (start)
        cudaEventDestroy(start);
      if (stop)
        cudaEventDestroy(stop);
      if (scratch)
        cudaFree(scratch);
      throw;
    }
  }

  cublasLtHandle_t lt_;
  GemmChoices *choices_;
  std::string identity_;
  std::map<Key, Plan> plans_;
  bool warnedFailure_ = false;
};

/// product = op(A)·op(B) (+ product, with `accumulate`) through cuBLAS's general GEMM, on
/// the stream of `blas` (the backend sets it to its own): f32 compute, A and B in
/// `dtype`, the product in `productType` with leading dimension `ldProduct`.
inline void gemmEx(cublasHandle_t blas, bool transA, bool transB, int64_t m, int64_t n,
                   int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                   void *product, cudaDataType_t productType, int64_t ldProduct, DType dtype,
                   bool accumulate = false) {
  const cudaDataType_t type = cudaTypeOf(dtype);
  const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float one = 1.f, beta = accumulate ? 1.f : 0.f;
  check(cublasGemmEx(blas, opA, opB, static_cast<int>(m), static_cast<int>(n),
                     static_cast<int>(k), &one, a, type, static_cast<int>(lda), b, type,
                     static_cast<int>(ldb), &beta, product, productType,
                     static_cast<int>(ldProduct), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_GEMM_CUH
