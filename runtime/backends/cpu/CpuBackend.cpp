// The CPU backend: every opcode in f32 and f64, GEMMs through OpenBLAS; bf16 and f16
// tensors are stored as such and computed in f32. It is the numerical reference the
// other backends and every parallel layout are checked against, so it favours clarity
// and double-precision accumulation over speed.
#include "backends/Backend.h"
#include "backends/cpu/Blas.h"
#include "backends/cpu/DropoutMask.h"
#include "backends/cpu/MoeKernels.h"
#include "backends/cpu/VectorMath.h"
#include "core/DType.h"
#include "core/Half.h"
#include "core/Rng.h"
#include "core/SharedMath.h"
#include "plan/Opcodes.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace mt {
namespace {

using plan::Opcode;

/// Row-wise and elementwise kernels share their rows among OpenMP threads from this many
/// elements up: below it a parallel region costs more than it saves, and far more when
/// the machine is oversubscribed (ranks, or tests, sharing its cores). Each element is
/// computed alike either way.
constexpr int64_t kParallelElements = int64_t{1} << 15;
/// The pieces vectorised elementwise work is cut into for the threads.
constexpr int64_t kPiece = 4096;

using cpu::gemm;

/// Large GEMMs are split into fixed tiles of the output, one OpenMP iteration each, each
/// a whole product over k. The tiles follow from the shape alone, never from the thread
/// count, so neither do the results; OpenBLAS itself runs single-threaded (see
/// CpuBackend), which avoids oversubscribing cores. Blocks of 128 whole rows where there
/// are at least kMinTiles of them (each block of the right operand packed once); else
/// 128×128 tiles, or 64×64 where those are still too few (a weight gradient of a narrow
/// layer: few rows and columns, many tokens in k).
constexpr int64_t kTile = 128, kMinTiles = 4;

template <typename T>
void parallelGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const T *a,
                  int64_t lda, const T *b, int64_t ldb, T *c, int64_t ldc) {
  const auto blocks = [](int64_t extent, int64_t tile) { return (extent + tile - 1) / tile; };
  int64_t rows = kTile, cols = n;
  if (blocks(m, kTile) < kMinTiles) {
    cols = kTile;
    if (blocks(m, kTile) * blocks(n, kTile) < kMinTiles)
      rows = cols = kTile / 2;
  }
  const int64_t across = blocks(n, cols), tiles = blocks(m, rows) * across;
#pragma omp parallel for schedule(static) if (tiles > 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t row = t / across * rows, col = t % across * cols;
    // Row `row` of op(A) starts at a + row·lda untransposed, at a + row transposed;
    // column `col` of op(B) at b + col transposed, at b + col·ldb untransposed.
    gemm(transA, transB, std::min(rows, m - row), std::min(cols, n - col), k, T(1),
         a + (transA ? row : row * lda), lda, b + (transB ? col * ldb : col), ldb, T(0),
         c + row * ldc + col, ldc);
  }
}

//===----------------------------------------------------------------------===//
// Kernels, one per opcode. Inputs and outputs follow the instruction's operand order.
//===----------------------------------------------------------------------===//

template <typename T> struct Kernels {
  static T *ptr(const TensorView &t) { return t.as<T>(); }

  static void fill(const TensorView &out, double value) {
    std::fill_n(ptr(out), out.numel(), static_cast<T>(value));
  }

  /// With a vocabulary shard (`first` = its first row), ids of other shards give zero
  /// rows: the tensor-parallel sum of every shard's output is the full lookup.
  static Status embedding(const TensorView &table, const TensorView &ids, int64_t first,
                          int64_t vocabulary, const TensorView &out) {
    const int64_t rows = table.dim(0), h = table.dim(1);
    for (int64_t i = 0; i < ids.numel(); ++i) {
      int64_t id = ids.index(i);
      if (id < 0 || id >= vocabulary)
        return Status::failure(cat("token id ", id, " at position ", i,
                                   " is outside the embedding table of ", vocabulary,
                                   " rows"));
      if (id >= first && id < first + rows)
        std::memcpy(ptr(out) + i * h, ptr(table) + (id - first) * h, sizeof(T) * h);
      else
        std::fill_n(ptr(out) + i * h, h, T(0));
    }
    return Status::success();
  }

  static void embeddingGrad(const TensorView &grad, const TensorView &ids, int64_t first,
                            const TensorView &out) {
    const int64_t rows = out.dim(0), h = out.dim(1);
    std::fill_n(ptr(out), out.numel(), T(0));
    for (int64_t i = 0; i < ids.numel(); ++i) {
      int64_t id = ids.index(i) - first;
      if (id < 0 || id >= rows)
        continue;
      T *row = ptr(out) + id * h;
      const T *g = ptr(grad) + i * h;
      for (int64_t j = 0; j < h; ++j)
        row[j] += g[j];
    }
  }

  /// `first`: the position of the local sequence's first token (sequence parallelism).
  static void positionEmbedding(const TensorView &x, const TensorView &table,
                                const SequenceMap &position, const TensorView &out) {
    const int64_t b = x.dim(0), s = x.dim(1), h = x.dim(2);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t p = 0; p < s; ++p) {
        const T *xi = ptr(x) + (i * s + p) * h, *ti = ptr(table) + position(p) * h;
        T *oi = ptr(out) + (i * s + p) * h;
        for (int64_t j = 0; j < h; ++j)
          oi[j] = xi[j] + ti[j];
      }
  }

  static void positionEmbeddingGrad(const TensorView &grad, const SequenceMap &position,
                                    const TensorView &out) {
    const int64_t b = grad.dim(0), s = grad.dim(1), h = grad.dim(2);
    std::fill_n(ptr(out), out.numel(), T(0));
    for (int64_t i = 0; i < b; ++i)
      for (int64_t p = 0; p < s; ++p) {
        const T *g = ptr(grad) + (i * s + p) * h;
        T *o = ptr(out) + position(p) * h;
        for (int64_t j = 0; j < h; ++j)
          o[j] += g[j];
      }
  }

  /// Mean and 1/sqrt(var + eps) of one row, accumulated in double.
  static void rowMoments(const T *x, int64_t h, double eps, double &mean, double &rstd) {
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < h; ++j)
      sum += x[j];
    mean = sum / h;
    for (int64_t j = 0; j < h; ++j)
      sq += (x[j] - mean) * (x[j] - mean);
    rstd = 1.0 / std::sqrt(sq / h + eps);
  }

  static void layerNorm(const TensorView &x, const TensorView &w, const TensorView &b,
                        double eps, const TensorView &out) {
    const int64_t h = x.cols();
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelElements)
    for (int64_t r = 0; r < x.rows(); ++r) {
      const T *xr = ptr(x) + r * h;
      T *o = ptr(out) + r * h;
      double mean, rstd;
      rowMoments(xr, h, eps, mean, rstd);
      for (int64_t j = 0; j < h; ++j)
        o[j] = static_cast<T>((xr[j] - mean) * rstd * ptr(w)[j] + ptr(b)[j]);
    }
  }

  /// out[j] = Σ_r term(r, j) in double over r < rows in order, for j < cols: a parameter's
  /// gradient summed over tokens. Threads take whole columns, so every column is summed
  /// in the same order whatever the thread count.
  template <typename Term> static void columnSums(int64_t rows, int64_t cols, Term term, T *out) {
    constexpr int64_t kColumns = 16;
    const int64_t blocks = (cols + kColumns - 1) / kColumns;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t first = blk * kColumns, count = std::min(kColumns, cols - first);
      double acc[kColumns] = {};
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < count; ++j)
          acc[j] += term(r, first + j);
      for (int64_t j = 0; j < count; ++j)
        out[first + j] = static_cast<T>(acc[j]);
    }
  }

  /// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·w; dw = Σ dy·x̂; db = Σ dy.
  static void layerNormGrad(const TensorView &dy, const TensorView &x, const TensorView &w,
                            double eps, const TensorView &dx, const TensorView &dw,
                            const TensorView &db) {
    const int64_t h = x.cols(), rows = x.rows();
    std::vector<double> means(rows), rstds(rows);
    const auto xhat = [&](int64_t r, int64_t j) {
      return (ptr(x)[r * h + j] - means[r]) * rstds[r];
    };
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const T *g = ptr(dy) + r * h;
      rowMoments(ptr(x) + r * h, h, eps, means[r], rstds[r]);
      double meanG = 0, meanGX = 0;
      for (int64_t j = 0; j < h; ++j) {
        const double gw = static_cast<double>(g[j]) * ptr(w)[j];
        meanG += gw;
        meanGX += gw * xhat(r, j);
      }
      meanG /= h;
      meanGX /= h;
      T *d = ptr(dx) + r * h;
      for (int64_t j = 0; j < h; ++j)
        d[j] = static_cast<T>(
            rstds[r] * (static_cast<double>(g[j]) * ptr(w)[j] - meanG - xhat(r, j) * meanGX));
    }
    columnSums(
        rows, h,
        [&](int64_t r, int64_t j) { return static_cast<double>(ptr(dy)[r * h + j]) * xhat(r, j); },
        ptr(dw));
    columnSums(
        rows, h, [&](int64_t r, int64_t j) { return static_cast<double>(ptr(dy)[r * h + j]); },
        ptr(db));
  }

  /// 1/sqrt(mean(x²) + eps) of one row, accumulated in double.
  static double rowRms(const T *x, int64_t h, double eps) {
    double sq = 0;
    for (int64_t j = 0; j < h; ++j)
      sq += static_cast<double>(x[j]) * x[j];
    return 1.0 / std::sqrt(sq / h + eps);
  }

  /// y = x·rstd·w over one row of h.
  static void rmsRow(const T *x, const T *w, int64_t h, double eps, T *y) {
    const double rstd = rowRms(x, h, eps);
    for (int64_t j = 0; j < h; ++j)
      y[j] = static_cast<T>(x[j] * rstd * w[j]);
  }

  /// One row's dx = rstd·(g − x̂·mean(g·x̂)) with g = dy·w and x̂ = x·rstd; returns rstd.
  static double rmsRowGrad(const T *dy, const T *x, const T *w, int64_t h, double eps, T *dx) {
    const double rstd = rowRms(x, h, eps);
    double meanGX = 0;
    for (int64_t j = 0; j < h; ++j)
      meanGX += static_cast<double>(dy[j]) * w[j] * (x[j] * rstd);
    meanGX /= h;
    for (int64_t j = 0; j < h; ++j)
      dx[j] = static_cast<T>(rstd * (static_cast<double>(dy[j]) * w[j] - x[j] * rstd * meanGX));
    return rstd;
  }

  static void rmsNorm(const TensorView &x, const TensorView &w, double eps,
                      const TensorView &out) {
    const int64_t h = x.cols();
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelElements)
    for (int64_t r = 0; r < x.rows(); ++r)
      rmsRow(ptr(x) + r * h, ptr(w), h, eps, ptr(out) + r * h);
  }

  /// Each row's dx (rmsRowGrad); dw = Σ dy·x̂.
  static void rmsNormGrad(const TensorView &dy, const TensorView &x, const TensorView &w,
                          double eps, const TensorView &dx, const TensorView &dw) {
    const int64_t h = x.cols(), rows = x.rows();
    std::vector<double> rstds(rows);
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelElements)
    for (int64_t r = 0; r < rows; ++r)
      rstds[r] = rmsRowGrad(ptr(dy) + r * h, ptr(x) + r * h, ptr(w), h, eps, ptr(dx) + r * h);
    columnSums(
        rows, h,
        [&](int64_t r, int64_t j) {
          return static_cast<double>(ptr(dy)[r * h + j]) * (ptr(x)[r * h + j] * rstds[r]);
        },
        ptr(dw));
  }

  /// Each query head of the fused QKV normalised as rms_norm normalises a row, with wq,
  /// each key head with wk; values copied.
  static void qkNorm(const TensorView &qkv, const QkvLayout &layout, const TensorView &wq,
                     const TensorView &wk, double eps, const TensorView &out) {
    const int64_t slots = qkv.numel() / layout.d, perGroup = layout.perGroup(), d = layout.d;
#pragma omp parallel for schedule(static) if (qkv.numel() >= kParallelElements)
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t j = s % (perGroup + 2);
      const T *x = ptr(qkv) + s * d;
      T *y = ptr(out) + s * d;
      if (j == perGroup + 1)
        std::copy(x, x + d, y);
      else
        rmsRow(x, ptr(j < perGroup ? wq : wk), d, eps, y);
    }
  }

  /// qk_norm's gradients: each query and key head's dx as rmsNormGrad's (dy of a value
  /// copied); dwq = Σ dy·x̂ over the rows and their query heads in order, dwk over their
  /// keys.
  static void qkNormGrad(const TensorView &dy, const TensorView &qkv, const QkvLayout &layout,
                         const TensorView &wq, const TensorView &wk, double eps,
                         const TensorView &dx, const TensorView &dwq, const TensorView &dwk) {
    const int64_t slots = qkv.numel() / layout.d, perGroup = layout.perGroup(), d = layout.d;
    std::vector<double> rstds(slots);
#pragma omp parallel for schedule(static) if (qkv.numel() >= kParallelElements)
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t j = s % (perGroup + 2);
      const T *x = ptr(qkv) + s * d, *g = ptr(dy) + s * d;
      T *out = ptr(dx) + s * d;
      if (j == perGroup + 1)
        std::copy(g, g + d, out);
      else
        rstds[s] = rmsRowGrad(g, x, ptr(j < perGroup ? wq : wk), d, eps, out);
    }
    const int64_t rows = slots / layout.slots();
    const auto term = [&](bool keys) {
      return [&, keys](int64_t n, int64_t i) {
        const int64_t s = layout.slot(n, keys);
        return static_cast<double>(ptr(dy)[s * d + i]) * (ptr(qkv)[s * d + i] * rstds[s]);
      };
    };
    columnSums(rows * layout.heads, d, term(false), ptr(dwq));
    columnSums(rows * layout.kv, d, term(true), ptr(dwk));
  }

  /// out[M×N] = x[M×K]·W[N×K]ᵀ (+ b)
  static void linear(const TensorView &x, const TensorView &w, const TensorView *b,
                     const TensorView &out) {
    const int64_t m = x.rows(), k = x.cols(), n = w.dim(0);
    parallelGemm(false, true, m, n, k, ptr(x), k, ptr(w), k, ptr(out), n);
    if (b)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j)
          ptr(out)[r * n + j] += ptr(*b)[j];
  }

  /// dx[M×K] = dy[M×N]·W[N×K]
  static void linearGradInput(const TensorView &dy, const TensorView &w, const TensorView &dx) {
    const int64_t m = dy.rows(), n = dy.cols(), k = w.dim(1);
    parallelGemm(false, false, m, k, n, ptr(dy), n, ptr(w), k, ptr(dx), k);
  }

  /// dW[N×K] = dy[M×N]ᵀ·x[M×K]
  static void linearGradWeight(const TensorView &dy, const TensorView &x, const TensorView &dw) {
    const int64_t m = dy.rows(), n = dy.cols(), k = x.cols();
    parallelGemm(true, false, n, k, m, ptr(dy), n, ptr(x), k, ptr(dw), k);
  }

  static void biasGrad(const TensorView &dy, const TensorView &db) {
    const int64_t n = dy.cols();
    columnSums(
        dy.rows(), n, [&](int64_t r, int64_t j) { return static_cast<double>(ptr(dy)[r * n + j]); },
        ptr(db));
  }

  static void biasAdd(const TensorView &x, const TensorView &b, const TensorView &out) {
    const int64_t n = x.cols();
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelElements)
    for (int64_t r = 0; r < x.rows(); ++r)
      for (int64_t j = 0; j < n; ++j)
        ptr(out)[r * n + j] = ptr(x)[r * n + j] + ptr(b)[j];
  }

  static void add(const TensorView &a, const TensorView &b, const TensorView &out) {
#pragma omp parallel for schedule(static) if (out.numel() >= kParallelElements)
    for (int64_t i = 0; i < out.numel(); ++i)
      ptr(out)[i] = ptr(a)[i] + ptr(b)[i];
  }

  static void accumulate(const TensorView &g, const TensorView &into) {
#pragma omp parallel for schedule(static) if (into.numel() >= kParallelElements)
    for (int64_t i = 0; i < into.numel(); ++i)
      ptr(into)[i] += ptr(g)[i];
  }

  /// `body(begin, count)` over n elements in pieces of kPiece, on the threads when n is
  /// large: the f32 math of backends/cpu/VectorMath.h gives the same bits however n is cut.
  template <typename Body> static void pieces(int64_t n, Body body) {
    const int64_t count = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t p = 0; p < count; ++p)
      body(p * kPiece, std::min(kPiece, n - p * kPiece));
  }

  // Activations (core/SharedMath.h): elementwise math runs in T, as the result is
  // stored in T anyway; in f32 vectorised (VectorMath.h), in f64 element by element.
  template <typename F> static void activation(F f, const TensorView &x, const TensorView &out) {
    if constexpr (std::is_same_v<T, float>) {
      pieces(out.numel(),
             [&](int64_t b, int64_t m) { cpu::values(f, ptr(x) + b, ptr(out) + b, m); });
    } else {
#pragma omp parallel for schedule(static) if (out.numel() >= kParallelElements)
      for (int64_t i = 0; i < out.numel(); ++i)
        ptr(out)[i] = f.value(ptr(x)[i]);
    }
  }
  template <typename F>
  static void activationGrad(F f, const TensorView &dy, const TensorView &x,
                             const TensorView &dx) {
    if constexpr (std::is_same_v<T, float>) {
      pieces(dx.numel(), [&](int64_t b, int64_t m) {
        cpu::gradients(f, ptr(dy) + b, ptr(x) + b, ptr(dx) + b, m);
      });
    } else {
#pragma omp parallel for schedule(static) if (dx.numel() >= kParallelElements)
      for (int64_t i = 0; i < dx.numel(); ++i)
        ptr(dx)[i] = ptr(dy)[i] * f.derivative(ptr(x)[i]);
    }
  }

  /// The fused QKV's query and key heads turned by position (core/SharedMath.h: Rope).
  static void rotary(const TensorView &qkv, const QkvLayout &layout, const Rope &rope,
                     const SequenceMap &position, const TensorView &out) {
    const int64_t s = qkv.dim(1), width = layout.width(), perGroup = layout.perGroup();
    const int64_t kv = layout.kv, d = layout.d, half = d / 2;
    std::vector<double> cosine(s * half), sine(s * half); // of pair i at position p
    for (int64_t i = 0; i < half; ++i) {
      const double frequency = rope.frequency(i, d);
      for (int64_t p = 0; p < s; ++p) {
        const double angle = rope.angle(position(p), frequency);
        cosine[p * half + i] = std::cos(angle);
        sine[p * half + i] = std::sin(angle);
      }
    }
#pragma omp parallel for schedule(static) if (qkv.numel() >= kParallelElements)
    for (int64_t row = 0; row < qkv.rows(); ++row) {
      const double *c = cosine.data() + row % s * half, *sn = sine.data() + row % s * half;
      const T *x = ptr(qkv) + row * width;
      T *y = ptr(out) + row * width;
      for (int64_t g = 0; g < kv; ++g)
        for (int64_t j = 0; j < perGroup + 2; ++j) {
          const int64_t head = (g * (perGroup + 2) + j) * d;
          for (int64_t i = 0; i < half; ++i) {
            const T a = x[head + i], b = x[head + i + half];
            if (Rope::turns(j, perGroup)) {
              Rope::turn(a, b, c[i], sn[i], y[head + i], y[head + i + half]);
            } else {
              y[head + i] = a;
              y[head + i + half] = b;
            }
          }
        }
    }
  }

  static void swiglu(const TensorView &gate, const TensorView &up, const TensorView &out) {
    if constexpr (std::is_same_v<T, float>) {
      pieces(out.numel(), [&](int64_t b, int64_t m) {
        cpu::swiglu(ptr(gate) + b, ptr(up) + b, ptr(out) + b, m);
      });
    } else {
#pragma omp parallel for schedule(static) if (out.numel() >= kParallelElements)
      for (int64_t i = 0; i < out.numel(); ++i)
        ptr(out)[i] = Swiglu::value(ptr(gate)[i], ptr(up)[i]);
    }
  }
  static void swigluGrad(const TensorView &dy, const TensorView &gate, const TensorView &up,
                         const TensorView &dgate, const TensorView &dup) {
    if constexpr (std::is_same_v<T, float>) {
      pieces(dy.numel(), [&](int64_t b, int64_t m) {
        cpu::swigluGrad(ptr(dy) + b, ptr(gate) + b, ptr(up) + b, ptr(dgate) + b, ptr(dup) + b, m);
      });
    } else {
#pragma omp parallel for schedule(static) if (dy.numel() >= kParallelElements)
      for (int64_t i = 0; i < dy.numel(); ++i) {
        const T g = ptr(dy)[i], a = ptr(gate)[i];
        ptr(dgate)[i] = Swiglu::gateGrad(g, a, ptr(up)[i]);
        ptr(dup)[i] = Swiglu::upGrad(g, a);
      }
    }
  }

  static cpu::DropoutStream dropoutStream(const StepContext &ctx, int64_t stream, double rate) {
    return {ctx.seed, ctx.step, ctx.microBatch, static_cast<uint32_t>(stream), rate};
  }

  /// The mask is drawn per global element: `shard` maps a block's elements to their
  /// places in the whole tensor. `mask`, if given, receives it (1: kept).
  static void dropout(const TensorView &x, double rate, int64_t stream, const ShardMap &shard,
                      const StepContext &ctx, const TensorView &out, const TensorView *mask) {
    const int64_t n = out.numel(), run = shard.run();
    const T scale = static_cast<T>(1.0 / (1.0 - rate));
    const cpu::DropoutStream draw = dropoutStream(ctx, stream, rate);
    constexpr int64_t kChunk = 4096;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t m = std::min(kChunk, n - c);
      uint8_t keep[kChunk];
      if (rate == 0)
        std::fill_n(keep, m, uint8_t(1));
      for (int64_t k = 0; rate != 0 && k < m;) { // by runs of consecutive global indices
        const int64_t length = std::min(m - k, run - (c + k) % run);
        cpu::dropoutKeeps(draw, shard.global(c + k), length, keep + k);
        k += length;
      }
      for (int64_t k = 0; k < m; ++k)
        ptr(out)[c + k] = keep[k] ? ptr(x)[c + k] * scale : T(0); // scale is 1 at rate 0
      if (mask)
        std::copy_n(keep, m, mask->as<uint8_t>() + c);
    }
  }

  static void dropoutGrad(const TensorView &dy, const TensorView &mask, double rate,
                          const TensorView &dx) {
    const T scale = static_cast<T>(1.0 / (1.0 - rate));
    const int64_t n = dx.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      ptr(dx)[i] = mask.as<uint8_t>()[i] ? ptr(dy)[i] * scale : T(0);
  }

  /// The keys [from, to) a row of scores sees: its entries outside them are 0.
  struct KeySpan {
    int64_t from = 0, to = 0;
    int64_t size() const { return to - from; }
  };

  /// A block of attention's queries: rows [first, first + rows) of the sequence in qkv,
  /// their output rows from `out` on. Its scores are over the keys it reads, keys().
  struct QueryBlock {
    int64_t first = 0, rows = 0, out = 0;
    /// The keys the block reads: every one its rows see (from the first row's first,
    /// up to its last row under a causal mask).
    KeySpan keys(int64_t s, const AttentionMask &mask) const {
      return {mask.firstKey(first), mask.causal ? first + rows : s};
    }
    /// The keys of row i, as indices into the block's keys [from, to).
    KeySpan seen(int64_t i, KeySpan keys, const AttentionMask &mask) const {
      return {mask.firstKey(first + i) - keys.from, mask.endKey(first + i, keys.to) - keys.from};
    }
  };
  /// The query blocks of attention with `rows` output rows over qkv's `s`: one holds them
  /// all, or under context parallelism the rank's two chunks are two; under a sliding
  /// window each is cut into blocks of at most min(window, 256) rows, each reading only
  /// the keys its rows' windows span.
  static std::vector<QueryBlock> queryBlocks(int64_t s, int64_t rows, const AttentionMask &mask,
                                             const StepContext &ctx) {
    std::vector<QueryBlock> whole = {{0, s, 0}};
    if (rows != s) {
      const SequenceMap share(rows, 0, 1, ctx.cpRank, ctx.cpSize); // its two chunks
      whole = {{share.first, share.chunk, 0}, {share.second, share.chunk, share.chunk}};
    }
    if (mask.window <= 0)
      return whole;
    const int64_t tile = std::min<int64_t>(mask.window, 256);
    std::vector<QueryBlock> blocks;
    for (const QueryBlock &part : whole)
      for (int64_t at = 0; at < part.rows; at += tile)
        blocks.push_back({part.first + at, std::min(tile, part.rows - at), part.out + at});
    return blocks;
  }
  /// The most scores a block of `blocks` holds.
  static size_t scoresArea(const std::vector<QueryBlock> &blocks, int64_t s,
                           const AttentionMask &mask) {
    size_t area = 0;
    for (const QueryBlock &q : blocks)
      area = std::max<size_t>(area, q.rows * q.keys(s, mask).size());
    return area;
  }

  /// Attention-probability dropout of one (batch, head): the keep mask of the global
  /// [B, heads, S, S] element; `first` is the global index of this (batch, head)'s
  /// element (0, 0).
  struct ProbsDropout {
    double rate = 0;
    int64_t stream = -1;
    ProbsMaskIndex index;

    bool active() const { return rate > 0; }
    /// The global index of row `i`'s first probability.
    uint64_t first(int64_t bi, int64_t hi, int64_t i, int64_t s) const {
      return index(bi, hi, i, 0, s);
    }
    /// The keep mask of a block of q rows over its keys of the s×s probabilities, from
    /// global index `first` (its first row's key 0); under a causal mask only what it
    /// lets through is drawn (the probabilities it masks are 0, kept or not).
    void mask(std::vector<uint8_t> &keep, const QueryBlock &block, KeySpan keys, int64_t s,
              uint64_t first, const AttentionMask &m, const StepContext &ctx) const {
      const cpu::DropoutStream draw = dropoutStream(ctx, stream, rate);
      const int64_t q = block.rows, k = keys.size();
      keep.assign(q * k, 0);
      if (!m.causal) // keys [0, s): the block's rows follow one another in the global index
        cpu::dropoutKeeps(draw, first, q * k, keep.data());
      for (int64_t i = 0; m.causal && i < q; ++i) {
        const KeySpan seen = block.seen(i, keys, m);
        cpu::dropoutKeeps(draw, first + i * s + keys.from + seen.from, seen.size(),
                          keep.data() + i * k + seen.from);
      }
    }
    /// out ← p·mask/(1 − rate) over a block; out may be p.
    void apply(const T *p, const std::vector<uint8_t> &keep, T *out) const {
      const T scale = static_cast<T>(1.0 / (1.0 - rate));
      for (size_t e = 0; e < keep.size(); ++e)
        out[e] = keep[e] ? p[e] * scale : T(0);
    }
  };

  /// `use(j, e)` for each j < n in order, e = exp(x[j] − shift) (the difference in T, as
  /// the scalar code wrote it); in f32 over blocks, vectorised (VectorMath.h). A block is
  /// read whole before `use` sees it: `use` may write x.
  template <typename Use> static void expsShifted(const T *x, int64_t n, T shift, Use use) {
    if constexpr (std::is_same_v<T, float>) {
      constexpr int64_t kBlock = 256;
      float t[kBlock];
      for (int64_t b = 0; b < n; b += kBlock) {
        const int64_t m = std::min(kBlock, n - b);
        for (int64_t k = 0; k < m; ++k)
          t[k] = x[b + k] - shift;
        cpu::expOf(t, t, m);
        for (int64_t k = 0; k < m; ++k)
          use(b + k, t[k]);
      }
    } else {
      for (int64_t j = 0; j < n; ++j)
        use(j, std::exp(x[j] - shift));
    }
  }

  /// softmax of row[0, n) in place (n > 0); returns its log-sum-exp.
  static T softmaxRow(T *row, int64_t n) {
    T max = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j)
      max = std::max(max, row[j]);
    double sum = 0;
    expsShifted(row, n, max, [&](int64_t j, T e) { sum += row[j] = e; });
    const T inverse = static_cast<T>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j)
      row[j] *= inverse;
    return static_cast<T>(max + std::log(sum));
  }

  /// Zeroes row[0, cols) outside the span: what it masks.
  static void clearOutside(T *row, KeySpan seen, int64_t cols) {
    std::fill(row, row + seen.from, T(0));
    std::fill(row + seen.to, row + cols, T(0));
  }

  /// Scores P = softmax(scale·QKᵀ) [sq, sk] of one (batch, head) of sq queries and sk
  /// keys, row i over the keys seen(i) (a KeySpan, never empty); masked entries are
  /// exactly 0. With `lse`, each row's log-sum-exp of its scaled scores goes to lse[i]
  /// (attention's statistics).
  template <typename Seen>
  static void attentionScores(const T *q, const T *k, int64_t sq, int64_t sk, int64_t d, int64_t ld,
                              double scale, Seen seen, T *p, T *lse = nullptr) {
    gemm(false, true, sq, sk, d, static_cast<T>(scale), q, ld, k, ld, T(0), p, sk);
    for (int64_t i = 0; i < sq; ++i) {
      T *row = p + i * sk;
      const KeySpan span = seen(i);
      const T rowLse = softmaxRow(row + span.from, span.size());
      clearOutside(row, span, sk);
      if (lse)
        lse[i] = rowLse;
    }
  }

  /// The same P from the rows' statistics, as flash attention's backward forms it:
  /// exp(scale·qkᵀ − lse) over the keys seen, 0 elsewhere.
  template <typename Seen>
  static void attentionScoresFrom(const T *q, const T *k, const T *lse, int64_t sq, int64_t sk,
                                  int64_t d, int64_t ld, double scale, Seen seen, T *p) {
    gemm(false, true, sq, sk, d, static_cast<T>(scale), q, ld, k, ld, T(0), p, sk);
    for (int64_t i = 0; i < sq; ++i) {
      T *row = p + i * sk;
      const KeySpan span = seen(i);
      expsShifted(row + span.from, span.size(), lse[i],
                  [&](int64_t j, T e) { row[span.from + j] = e; });
      clearOutside(row, span, sk);
    }
  }

  /// dS = P∘(dP − rowsum(dO∘O)) in place of dP [rows, cols]: row i over the keys seen(i),
  /// 0 elsewhere (where P is 0, so is dS). dO and O have rows of stride h.
  template <typename Seen>
  static void softmaxGrad(const T *p, T *dp, const T *dO, const T *o, int64_t rows, int64_t cols,
                          int64_t h, int64_t d, Seen seen) {
    for (int64_t i = 0; i < rows; ++i) {
      const KeySpan span = seen(i);
      double delta = 0;
      for (int64_t j = 0; j < d; ++j)
        delta += static_cast<double>(dO[i * h + j]) * o[i * h + j];
      for (int64_t j = span.from; j < span.to; ++j)
        dp[i * cols + j] = static_cast<T>(p[i * cols + j] * (dp[i * cols + j] - delta));
      clearOutside(dp + i * cols, span, cols);
    }
  }

  /// The multiply-adds of one attention GEMM over a fused QKV: B·heads·S·S·d. Below
  /// kParallelElements of them a parallel region costs more than it saves.
  static int64_t attentionWork(const TensorView &qkv, const QkvLayout &l) {
    return qkv.dim(0) * l.heads * qkv.dim(1) * qkv.dim(1) * l.d;
  }

  // qkv [B, S, (heads + 2·kv)·d] holds, per token, its heads by key/value group
  // (core/SharedMath.h: QkvLayout); out is [B, rows, heads·d], the rows of its query
  // blocks (all S, or a context-parallel rank's share). Forward runs per (batch, head);
  // backward per (batch, group), so that a group's key and value gradients are summed
  // over its query heads in head order, whatever the threads do.
  static void attention(const TensorView &qkv, const QkvLayout &l, const AttentionMask &mask,
                        const ProbsDropout &drop, const StepContext &ctx, const TensorView &out,
                        const TensorView *stats) {
    const int64_t b = qkv.dim(0), s = qkv.dim(1), w = l.width(), h = out.dim(2), d = l.d;
    const int64_t rows = out.dim(1);
    const std::vector<QueryBlock> blocks = queryBlocks(s, rows, mask, ctx);
    const size_t area = scoresArea(blocks, s, mask);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
#pragma omp parallel if (attentionWork(qkv, l) >= kParallelElements)
    {
      std::vector<T> p(area); // a thread's, for every (batch, head) it takes
      std::vector<uint8_t> keep;
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < b * l.heads; ++bh) {
        const int64_t bi = bh / l.heads, hi = bh % l.heads, g = l.group(hi);
        const T *row = ptr(qkv) + bi * s * w;
        for (const QueryBlock &q : blocks) {
          const KeySpan keys = q.keys(s, mask);
          const int64_t k = keys.size();
          const T *kv = row + keys.from * w; // the block's first key's row
          attentionScores(
              row + q.first * w + l.query(hi), kv + l.key(g), q.rows, k, d, w, scale,
              [&](int64_t i) { return q.seen(i, keys, mask); }, p.data(),
              stats ? ptr(*stats) + bh * rows + q.out : nullptr);
          if (drop.active()) {
            drop.mask(keep, q, keys, s, drop.first(bi, hi, q.first, s), mask, ctx);
            drop.apply(p.data(), keep, p.data());
          }
          gemm(false, false, q.rows, d, k, T(1), p.data(), k, kv + l.value(g), w, T(0),
               ptr(out) + (bi * rows + q.out) * h + hi * d, h);
        }
      }
    }
  }

  /// Recomputes P (and its dropout P'), then dV = P'ᵀ·dO, dP' = dO·Vᵀ, dP = dP'·mask/(1−p),
  /// dS = P∘(dP − rowsum(dO∘O)), dQ = scale·dS·K, dK = scale·dSᵀ·Q (the saved output O
  /// gives the row sums: rowsum(dO∘O) = rowsum(dP∘P)); dK and dV summed over the group
  /// (and the query blocks, in order). Rows of qkv outside the blocks get dQ = 0.
  static void attentionGrad(const TensorView &dout, const TensorView &qkv, const TensorView &out,
                            const TensorView *stats, const QkvLayout &l, const AttentionMask &mask,
                            const ProbsDropout &drop, const StepContext &ctx,
                            const TensorView &dqkv) {
    const int64_t b = qkv.dim(0), s = qkv.dim(1), w = l.width(), h = out.dim(2), d = l.d;
    const int64_t rows = out.dim(1);
    const std::vector<QueryBlock> blocks = queryBlocks(s, rows, mask, ctx);
    const bool zeroed = blocks.size() > 1; // blocks add to dK, dV from zero
    if (zeroed)
      std::fill_n(ptr(dqkv), dqkv.numel(), T(0));
    const size_t area = scoresArea(blocks, s, mask);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
#pragma omp parallel if (attentionWork(qkv, l) >= kParallelElements)
    {
      std::vector<T> p(area), dropped(area), dp(area); // a thread's, for all it takes
      std::vector<uint8_t> keep;
#pragma omp for schedule(static)
      for (int64_t bg = 0; bg < b * l.kv; ++bg) {
        const int64_t bi = bg / l.kv, g = bg % l.kv;
        const T *row = ptr(qkv) + bi * s * w;
        T *drow = ptr(dqkv) + bi * s * w;
        for (int64_t hi = g * l.perGroup(); hi < (g + 1) * l.perGroup(); ++hi)
          for (const QueryBlock &blk : blocks) {
            const KeySpan keys = blk.keys(s, mask);
            const int64_t sq = blk.rows, sk = keys.size(), at = bi * rows + blk.out;
            // The block's keys and values, and their gradients, from its first key's row.
            const T *kv = row + keys.from * w, *k = kv + l.key(g), *v = kv + l.value(g);
            T *dkv = drow + keys.from * w, *dk = dkv + l.key(g), *dv = dkv + l.value(g);
            auto seen = [&](int64_t i) { return blk.seen(i, keys, mask); };
            const T *q = row + blk.first * w + l.query(hi);
            const T *dO = ptr(dout) + at * h + hi * d, *o = ptr(out) + at * h + hi * d;
            // The group's first head sets dK and dV; the rest add.
            const T sum = zeroed || hi != g * l.perGroup() ? T(1) : T(0);
            if (stats) // [B, heads, rows]: this (batch, head)'s rows
              attentionScoresFrom(q, k, ptr(*stats) + (bi * l.heads + hi) * rows + blk.out, sq, sk,
                                  d, w, scale, seen, p.data());
            else
              attentionScores(q, k, sq, sk, d, w, scale, seen, p.data());
            const T *pv = p.data(); // what multiplied V
            if (drop.active()) {
              drop.mask(keep, blk, keys, s, drop.first(bi, hi, blk.first, s), mask, ctx);
              drop.apply(p.data(), keep, dropped.data());
              pv = dropped.data();
            }
            gemm(true, false, sk, d, sq, T(1), pv, sk, dO, h, sum, dv, w);
            gemm(false, true, sq, sk, d, T(1), dO, h, v, w, T(0), dp.data(), sk);
            if (drop.active()) // dP = dP'·mask/(1 − p): the same mask, applied to the gradient
              drop.apply(dp.data(), keep, dp.data());
            softmaxGrad(p.data(), dp.data(), dO, o, sq, sk, h, d, seen);
            gemm(false, false, sq, d, sk, static_cast<T>(scale), dp.data(), sk, k, w, T(0),
                 drow + blk.first * w + l.query(hi), w);
            gemm(true, false, sk, d, sq, static_cast<T>(scale), dp.data(), sk, q, w, sum, dk, w);
          }
      }
    }
  }

  /// A context-parallel group's shares, gathered rank by rank [cp·B, S/cp, F], put in
  /// sequence order [B, S, F] (core/Tensor.h: SequenceMap), or back with `inverse`.
  static void contextOrder(const TensorView &in, int64_t cp, bool inverse, const TensorView &out) {
    const TensorView &whole = inverse ? in : out;
    const int64_t f = whole.dim(2);
    forEachContextChunk(whole.dim(0), whole.dim(1), cp, [&](int64_t share, int64_t at, int64_t n) {
      if (inverse)
        std::copy_n(ptr(in) + at * f, n * f, ptr(out) + share * f);
      else
        std::copy_n(ptr(in) + share * f, n * f, ptr(out) + at * f);
    });
  }

  /// Ring attention's scores of one (batch, head) at a step: P = softmax over the keys of
  /// `kv`'s share seen, unnormalised exp(scale·qkᵀ − lse) where `lse` is given; rows that
  /// see none are 0. `rowLse`, where given, gets each row's log-sum-exp over this share's
  /// keys.
  struct RingScores {
    SequenceMap queries, keys;
    int64_t rows, w, d, whole;
    double scale;
    AttentionMask mask;
    /// The share's keys row i sees: positions ascend along its rows, so they are a span.
    KeySpan seen(int64_t i) const {
      const int64_t at = queries(i);
      return {keys.rowsBefore(mask.firstKey(at), rows),
              keys.rowsBefore(mask.endKey(at, whole), rows)};
    }
    void operator()(const T *q, const T *k, const T *lse, T *p, T *rowLse) const {
      gemm(false, true, rows, rows, d, static_cast<T>(scale), q, w, k, w, T(0), p, rows);
      for (int64_t i = 0; i < rows; ++i) {
        T *row = p + i * rows;
        const KeySpan span = seen(i);
        if (lse) {
          expsShifted(row + span.from, span.size(), lse[i],
                      [&](int64_t j, T e) { row[span.from + j] = e; });
        } else if (span.size() > 0) {
          rowLse[i] = softmaxRow(row + span.from, span.size());
        } else {
          rowLse[i] = -std::numeric_limits<T>::infinity();
        }
        clearOutside(row, span, rows);
      }
    }
    /// The keep mask of the rows' keys seen, drawn at their global (query, key) indices:
    /// the span's part in the share's first chunk, then in its second.
    void keepMask(const ProbsDropout &drop, int64_t bi, int64_t hi, std::vector<uint8_t> &keep,
                  const StepContext &ctx) const {
      const cpu::DropoutStream draw = dropoutStream(ctx, drop.stream, drop.rate);
      keep.assign(rows * rows, 0);
      for (int64_t i = 0; i < rows; ++i) {
        const KeySpan span = seen(i);
        const int64_t split = std::clamp(keys.chunk, span.from, span.to);
        const uint64_t at = drop.first(bi, hi, queries(i), whole);
        for (const KeySpan part : {KeySpan{span.from, split}, KeySpan{split, span.to}})
          if (part.size() > 0)
            cpu::dropoutKeeps(draw, at + keys(part.from), part.size(),
                              keep.data() + i * rows + part.from);
      }
    }
  };
  static RingScores ringScores(const TensorView &qkv, const QkvLayout &l, const AttentionMask &mask,
                               const StepContext &ctx) {
    const int64_t rows = qkv.dim(1);
    const SequenceMap queries(rows, 0, 1, ctx.cpRank, ctx.cpSize),
        keys(rows, 0, 1, ctx.ringOwner, ctx.cpSize);
    return {queries,
            keys,
            rows,
            l.width(),
            l.d,
            queries.total,
            1.0 / std::sqrt(static_cast<double>(l.d)),
            mask};
  }

  /// A step of ring attention (RingAttention): this rank's queries (qkv, its share)
  /// against the keys and values of context rank ctx.ringOwner's share (kv), merged into
  /// out [B, rows, heads·d] and the rows' log-sum-exp lse [B, heads, rows] by their
  /// log-sum-exps; the first step sets them (every row sees its own position then).
  static void ringAttention(const TensorView &qkv, const TensorView &kv, const QkvLayout &l,
                            const AttentionMask &mask, const ProbsDropout &drop,
                            const StepContext &ctx, const TensorView &out, const TensorView &lse) {
    const RingScores scores = ringScores(qkv, l, mask, ctx);
    const int64_t b = qkv.dim(0), rows = scores.rows, w = l.width(), h = out.dim(2), d = l.d;
#pragma omp parallel if (attentionWork(qkv, l) >= kParallelElements)
    {
      std::vector<T> p(rows * rows), o(rows * d), rowLse(rows);
      std::vector<uint8_t> keep;
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < b * l.heads; ++bh) {
        const int64_t bi = bh / l.heads, hi = bh % l.heads, g = l.group(hi);
        const T *q = ptr(qkv) + bi * rows * w + l.query(hi), *k = ptr(kv) + bi * rows * w;
        scores(q, k + l.key(g), nullptr, p.data(), rowLse.data());
        if (drop.active()) {
          scores.keepMask(drop, bi, hi, keep, ctx);
          drop.apply(p.data(), keep, p.data());
        }
        gemm(false, false, rows, d, rows, T(1), p.data(), rows, k + l.value(g), w, T(0), o.data(),
             d);
        T *total = ptr(lse) + bh * rows;
        for (int64_t i = 0; i < rows; ++i) {
          T *y = ptr(out) + (bi * rows + i) * h + hi * d;
          if (ctx.ringFirst) {
            std::copy_n(o.data() + i * d, d, y);
            total[i] = rowLse[i];
            continue;
          }
          if (scores.seen(i).size() == 0)
            continue;
          // Each part's weight: its share of the merged rows' sum of exponentials.
          const T merged = std::max(total[i], rowLse[i]);
          const T a = std::exp(total[i] - merged), c = std::exp(rowLse[i] - merged);
          for (int64_t j = 0; j < d; ++j)
            y[j] = (y[j] * a + o[i * d + j] * c) / (a + c);
          total[i] = static_cast<T>(merged + std::log(a + c));
        }
      }
    }
  }

  /// A step of ring attention's gradient (RingAttentionGrad): with the forward's output
  /// and rows' log-sum-exp, adds this rank's queries' part of dQ into dqkv and of dK and
  /// dV of ctx.ringOwner's share (kv) into dkv, per (batch, group) as attentionGrad.
  static void ringAttentionGrad(const TensorView &dout, const TensorView &qkv,
                                const TensorView &out, const TensorView &lse, const TensorView &kv,
                                const QkvLayout &l, const AttentionMask &mask,
                                const ProbsDropout &drop, const StepContext &ctx,
                                const TensorView &dqkv, const TensorView &dkv) {
    const RingScores scores = ringScores(qkv, l, mask, ctx);
    const int64_t b = qkv.dim(0), rows = scores.rows, w = l.width(), h = out.dim(2), d = l.d;
    const T scale = static_cast<T>(scores.scale);
#pragma omp parallel if (attentionWork(qkv, l) >= kParallelElements)
    {
      std::vector<T> p(rows * rows), dropped(rows * rows), dp(rows * rows);
      std::vector<uint8_t> keep;
#pragma omp for schedule(static)
      for (int64_t bg = 0; bg < b * l.kv; ++bg) {
        const int64_t bi = bg / l.kv, g = bg % l.kv;
        const T *row = ptr(qkv) + bi * rows * w, *k = ptr(kv) + bi * rows * w + l.key(g);
        const T *v = ptr(kv) + bi * rows * w + l.value(g);
        T *dk = ptr(dkv) + bi * rows * w + l.key(g), *dv = ptr(dkv) + bi * rows * w + l.value(g);
        for (int64_t hi = g * l.perGroup(); hi < (g + 1) * l.perGroup(); ++hi) {
          const T *q = row + l.query(hi);
          const T *dO = ptr(dout) + bi * rows * h + hi * d, *o = ptr(out) + bi * rows * h + hi * d;
          scores(q, k, ptr(lse) + (bi * l.heads + hi) * rows, p.data(), nullptr);
          const T *pv = p.data();
          if (drop.active()) {
            scores.keepMask(drop, bi, hi, keep, ctx);
            drop.apply(p.data(), keep, dropped.data());
            pv = dropped.data();
          }
          gemm(true, false, rows, d, rows, T(1), pv, rows, dO, h, T(1), dv, w);
          gemm(false, true, rows, rows, d, T(1), dO, h, v, w, T(0), dp.data(), rows);
          if (drop.active())
            drop.apply(dp.data(), keep, dp.data());
          softmaxGrad(p.data(), dp.data(), dO, o, rows, rows, h, d,
                      [&](int64_t i) { return scores.seen(i); });
          gemm(false, false, rows, d, rows, scale, dp.data(), rows, k, w, T(1),
               ptr(dqkv) + bi * rows * w + l.query(hi), w);
          gemm(true, false, rows, d, rows, scale, dp.data(), rows, q, w, T(1), dk, w);
        }
      }
    }
  }

  /// The unfused chain: P [B, heads, S, S] of a fused QKV.
  static void attentionProbs(const TensorView &qkv, const QkvLayout &l, const AttentionMask &mask,
                             const TensorView &probs) {
    const int64_t b = qkv.dim(0), s = qkv.dim(1), w = l.width();
    const double scale = 1.0 / std::sqrt(static_cast<double>(l.d));
#pragma omp parallel for schedule(static) if (attentionWork(qkv, l) >= kParallelElements)
    for (int64_t bh = 0; bh < b * l.heads; ++bh) {
      const int64_t bi = bh / l.heads, hi = bh % l.heads;
      const T *row = ptr(qkv) + bi * s * w;
      attentionScores(
          row + l.query(hi), row + l.key(l.group(hi)), s, s, l.d, w, scale,
          [&](int64_t i) {
            return KeySpan{mask.firstKey(i), mask.endKey(i, s)};
          },
          ptr(probs) + bh * s * s);
    }
  }

  /// O = P·V per (batch, head).
  static void attentionContext(const TensorView &probs, const TensorView &qkv,
                               const QkvLayout &l, const TensorView &out) {
    const int64_t b = qkv.dim(0), s = qkv.dim(1), w = l.width(), h = out.dim(2), d = l.d;
#pragma omp parallel for schedule(static) if (attentionWork(qkv, l) >= kParallelElements)
    for (int64_t bh = 0; bh < b * l.heads; ++bh) {
      const int64_t bi = bh / l.heads, hi = bh % l.heads;
      gemm(false, false, s, d, s, T(1), ptr(probs) + bh * s * s, s,
           ptr(qkv) + bi * s * w + l.value(l.group(hi)), w, T(0), ptr(out) + bi * s * h + hi * d,
           h);
    }
  }

  /// dS = P∘(dP − rowsum(dP∘P)); dQ = scale·dS·K, dK = scale·dSᵀ·Q summed over the
  /// group; dV = 0.
  static void attentionProbsGrad(const TensorView &dprobs, const TensorView &probs,
                                 const TensorView &qkv, const QkvLayout &l,
                                 const TensorView &dqkv) {
    const int64_t b = qkv.dim(0), s = qkv.dim(1), w = l.width(), d = l.d;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::fill_n(ptr(dqkv), dqkv.numel(), T(0));
#pragma omp parallel for schedule(static) if (attentionWork(qkv, l) >= kParallelElements)
    for (int64_t bg = 0; bg < b * l.kv; ++bg) {
      const int64_t bi = bg / l.kv, g = bg % l.kv;
      std::vector<T> ds(s * s);
      const T *row = ptr(qkv) + bi * s * w;
      T *drow = ptr(dqkv) + bi * s * w;
      for (int64_t hi = g * l.perGroup(); hi < (g + 1) * l.perGroup(); ++hi) {
        const int64_t bh = bi * l.heads + hi;
        const T *p = ptr(probs) + bh * s * s, *dp = ptr(dprobs) + bh * s * s;
        for (int64_t i = 0; i < s; ++i) {
          double delta = 0;
          for (int64_t j = 0; j < s; ++j)
            delta += static_cast<double>(dp[i * s + j]) * p[i * s + j];
          for (int64_t j = 0; j < s; ++j)
            ds[i * s + j] = static_cast<T>(p[i * s + j] * (dp[i * s + j] - delta));
        }
        gemm(false, false, s, d, s, static_cast<T>(scale), ds.data(), s, row + l.key(g), w, T(0),
             drow + l.query(hi), w);
        gemm(true, false, s, d, s, static_cast<T>(scale), ds.data(), s, row + l.query(hi), w,
             T(1), drow + l.key(g), w);
      }
    }
  }

  /// dP = dO·Vᵀ and dV = Pᵀ·dO summed over the group; dQ = dK = 0.
  static void attentionContextGrad(const TensorView &dout, const TensorView &probs,
                                   const TensorView &qkv, const QkvLayout &l,
                                   const TensorView &dprobs, const TensorView &dqkv) {
    const int64_t b = qkv.dim(0), s = qkv.dim(1), w = l.width(), h = dout.dim(2), d = l.d;
    std::fill_n(ptr(dqkv), dqkv.numel(), T(0));
#pragma omp parallel for schedule(static) if (attentionWork(qkv, l) >= kParallelElements)
    for (int64_t bg = 0; bg < b * l.kv; ++bg) {
      const int64_t bi = bg / l.kv, g = bg % l.kv;
      const T *v = ptr(qkv) + bi * s * w + l.value(g);
      for (int64_t hi = g * l.perGroup(); hi < (g + 1) * l.perGroup(); ++hi) {
        const int64_t bh = bi * l.heads + hi;
        const T *dO = ptr(dout) + bi * s * h + hi * d;
        gemm(false, true, s, s, d, T(1), dO, h, v, w, T(0), ptr(dprobs) + bh * s * s, s);
        gemm(true, false, s, d, s, T(1), ptr(probs) + bh * s * s, s, dO, h, T(1),
             ptr(dqkv) + bi * s * w + l.value(g), w);
      }
    }
  }

  /// Checks every target against the classes taking part.
  static Status checkTargets(const TensorView &targets, int64_t classes) {
    for (int64_t i = 0; i < targets.numel(); ++i) {
      int64_t t = targets.index(i);
      if (t < 0 || t >= classes)
        return Status::failure(cat("target id ", t, " at position ", i,
                                   " is outside the vocabulary of ", classes));
    }
    return Status::success();
  }

  /// Mean over rows of logsumexp(row[:C]) − row[target].
  static Status crossEntropy(const TensorView &logits, const TensorView &targets,
                             int64_t numClasses, const TensorView &loss) {
    const int64_t m = logits.rows(), v = logits.cols(), c = numClasses ? numClasses : v;
    if (Status st = checkTargets(targets, c); !st.ok())
      return st;
    std::vector<double> rowLoss(m);
#pragma omp parallel for schedule(static) if (logits.numel() >= kParallelElements)
    for (int64_t r = 0; r < m; ++r) {
      const T *row = ptr(logits) + r * v;
      const T max = *std::max_element(row, row + c);
      double sum = 0;
      expsShifted(row, c, max, [&](int64_t, T e) { sum += e; });
      rowLoss[r] = std::log(sum) + max - row[targets.index(r)];
    }
    double total = 0; // summed in row order, whatever the threads did
    for (double l : rowLoss)
      total += l;
    ptr(loss)[0] = static_cast<T>(total / m);
    return Status::success();
  }

  /// dlogits = dloss·(softmax(logits) − onehot(target))/M over the first C classes, 0 past
  /// them; with `loss`, also the mean of the rows' losses, from the same max and sum of
  /// exps (the pair CrossEntropy, CrossEntropyGrad in one pass, with the pair's bits). Each
  /// element of a row, and the target's logit, is read before the same element of the
  /// gradient is written: dlogits may be the logits' buffer.
  static Status crossEntropyGrad(const TensorView &dloss, const TensorView &logits,
                                 const TensorView &targets, int64_t numClasses,
                                 const TensorView &dlogits, const TensorView *loss = nullptr) {
    const int64_t m = logits.rows(), v = logits.cols(), c = numClasses ? numClasses : v;
    if (Status st = checkTargets(targets, c); !st.ok())
      return st;
    const double factor = static_cast<double>(ptr(dloss)[0]) / m;
    std::vector<double> rowLoss(loss ? m : 0);
#pragma omp parallel for schedule(static) if (logits.numel() >= kParallelElements)
    for (int64_t r = 0; r < m; ++r) {
      const T *row = ptr(logits) + r * v;
      T *g = ptr(dlogits) + r * v;
      // Checked again: a corrupt plan may alias the targets with dlogits, which this
      // loop writes.
      const int64_t t = targets.index(r);
      const bool valid = t >= 0 && t < c;
      const T target = valid ? row[t] : T(0);
      const T max = *std::max_element(row, row + c);
      double sum = 0;
      expsShifted(row, c, max, [&](int64_t j, T e) { sum += g[j] = e; });
      if (loss)
        rowLoss[r] = std::log(sum) + max - target;
      const T scale = static_cast<T>(factor / sum);
      for (int64_t j = 0; j < c; ++j)
        g[j] *= scale;
      std::fill(g + c, g + v, T(0));
      if (valid)
        g[t] -= static_cast<T>(factor);
    }
    if (loss) {
      double total = 0; // summed in row order, whatever the threads did
      for (double l : rowLoss)
        total += l;
      ptr(*loss)[0] = static_cast<T>(total / m);
    }
    return Status::success();
  }

  /// Vocabulary-parallel cross-entropy, step 1: per row of this rank's logits
  /// [M, Vl] (global classes first..first+Vl, valid below `classes`), the local max,
  /// Σ exp(x − max) and the target's logit (0 when another rank holds it): stats[3, M].
  static Status crossEntropyStats(const TensorView &logits, const TensorView &targets,
                                  int64_t first, int64_t classes, const TensorView &stats) {
    const int64_t m = logits.rows(), v = logits.cols();
    const int64_t valid = std::clamp<int64_t>(classes - first, 0, v);
    if (Status st = checkTargets(targets, classes); !st.ok())
      return st;
    T *maxOut = ptr(stats), *sumOut = maxOut + m, *targetOut = sumOut + m;
#pragma omp parallel for schedule(static) if (logits.numel() >= kParallelElements)
    for (int64_t r = 0; r < m; ++r) {
      const T *row = ptr(logits) + r * v;
      T max = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < valid; ++j)
        max = std::max(max, row[j]);
      double sum = 0;
      expsShifted(row, valid, max, [&](int64_t, T e) { sum += e; });
      int64_t t = targets.index(r) - first;
      maxOut[r] = max;
      sumOut[r] = static_cast<T>(sum);
      targetOut[r] = t >= 0 && t < valid ? row[t] : T(0);
    }
    return Status::success();
  }

  /// Step 2, after the statistics of all P ranks are gathered into [3P, M]: the global
  /// max, Σ exp and target logit per row, and the mean loss.
  static void crossEntropyMerge(const TensorView &all, const TensorView &loss) {
    const int64_t m = all.cols(), parts = all.dim(0) / 3;
    double total = 0;
    for (int64_t r = 0; r < m; ++r) {
      double max, sum, target;
      mergeSoftmaxStats(ptr(all) + r, m, parts, max, sum, target);
      total += std::log(sum) + max - target;
    }
    ptr(loss)[0] = static_cast<T>(total / m);
  }
  static void vocabParallelCrossEntropyGrad(const TensorView &dloss, const TensorView &logits,
                                            const TensorView &targets, const TensorView &all,
                                            int64_t first, int64_t classes,
                                            const TensorView &dlogits) {
    const int64_t m = logits.rows(), v = logits.cols(), parts = all.dim(0) / 3;
    const int64_t valid = std::clamp<int64_t>(classes - first, 0, v);
    const double factor = static_cast<double>(ptr(dloss)[0]) / m;
#pragma omp parallel for schedule(static) if (logits.numel() >= kParallelElements)
    for (int64_t r = 0; r < m; ++r) {
      double max, sum, target;
      mergeSoftmaxStats(ptr(all) + r, m, parts, max, sum, target);
      const T *row = ptr(logits) + r * v;
      T *g = ptr(dlogits) + r * v;
      for (int64_t j = 0; j < valid; ++j)
        g[j] = static_cast<T>(factor * std::exp(row[j] - max) / sum);
      std::fill(g + valid, g + v, T(0));
      int64_t t = targets.index(r) - first;
      if (t >= 0 && t < valid)
        g[t] -= static_cast<T>(factor);
    }
  }

  /// The first vocabulary row (along `dim` of this rank's shard `sharded`), or sequence
  /// position, this rank holds; the ranks the vocabulary spans.
  static int64_t vocabFirst(const plan::Instruction &inst, const StepContext &ctx,
                            const TensorView &sharded, int dim) {
    return inst.vocab_parallel() ? ctx.tpRank * sharded.dim(dim) : 0;
  }
  static int64_t vocabRanks(const plan::Instruction &inst, const StepContext &ctx) {
    return inst.vocab_parallel() ? ctx.tpSize : 1;
  }
  /// Attention-probability dropout, by global head.
  static ProbsDropout probsDropout(const plan::Instruction &inst, const StepContext &ctx) {
    ProbsDropout drop;
    drop.rate = dropoutRate(inst, ctx);
    drop.stream = inst.stream();
    drop.index = ProbsMaskIndex(inst.heads(), inst.head_parallel(), ctx);
    return drop;
  }

  /// BiasDropoutAdd as the ops in turn, each result stored as theirs is. The output is
  /// written before the residual is read: they must not share a buffer (not in place).
  static void biasDropoutAdd(const plan::Instruction &inst, const TensorView *in,
                             const TensorView *out, const StepContext &ctx,
                             const std::function<void(int)> &stored) {
    const TensorView *x = &in[0];
    if (inst.inputs()->size() == 3) {
      biasAdd(in[0], in[2], out[0]);
      stored(0);
      x = &out[0];
    }
    dropout(*x, dropoutRate(inst, ctx), inst.stream(), dropoutShard(inst, in[0], ctx), ctx, out[0],
            inst.outputs()->size() == 2 ? &out[1] : nullptr);
    stored(0);
    add(in[1], out[0], out[0]);
  }

  /// Runs `inst`. A fused pair calls `stored(i)` once its first step has written output
  /// i, which rounds it to its storage type where that is narrower than T, as the
  /// unfused pair stores it between its two instructions.
  static Status run(const plan::Instruction &inst, const TensorView *in,
                    const TensorView *out, const StepContext &ctx,
                    const std::function<void(int)> &stored = [](int) {}) {
    switch (inst.opcode()) {
    case Opcode::Fill:
      fill(out[0], inst.value() * (inst.loss_seed() ? ctx.lossScale : 1.0));
      break;
    case Opcode::Embedding:
      return embedding(in[0], in[1], vocabFirst(inst, ctx, in[0], 0), in[0].dim(0) * vocabRanks(inst, ctx), out[0]);
    case Opcode::PositionEmbedding:
      positionEmbedding(in[0], in[1], sequenceMap(inst, in[0].dim(1), ctx), out[0]);
      break;
    case Opcode::LayerNorm:
      layerNorm(in[0], in[1], in[2], inst.epsilon(), out[0]);
      break;
    case Opcode::RmsNorm:
      rmsNorm(in[0], in[1], inst.epsilon(), out[0]);
      break;
    case Opcode::Linear:
      linear(in[0], in[1], inst.inputs()->size() == 3 ? &in[2] : nullptr, out[0]);
      break;
    case Opcode::LinearGelu: // the pair it fuses, bit for bit
      linear(in[0], in[1], inst.inputs()->size() == 3 ? &in[2] : nullptr, out[0]);
      stored(0);
      activation(Gelu{}, out[0], out[1]);
      break;
    case Opcode::Add:
      add(in[0], in[1], out[0]);
      break;
#define MT_ACTIVATION(opcode, gradient, F)                                                     \
  case Opcode::opcode:                                                                         \
    activation(activationOf<F>(inst), in[0], out[0]);                                          \
    break;
#include "backends/Activations.def"
    case Opcode::Swiglu:
      swiglu(in[0], in[1], out[0]);
      break;
    case Opcode::Rotary:
    case Opcode::QkNorm:
    case Opcode::Attention:
    case Opcode::AttentionProbs:
    case Opcode::RingAttention:
      runHeads(inst, in, out, ctx);
      break;
    case Opcode::Dropout:
      dropout(in[0], dropoutRate(inst, ctx), inst.stream(), dropoutShard(inst, in[0], ctx), ctx,
              out[0], inst.outputs()->size() == 2 ? &out[1] : nullptr);
      break;
    case Opcode::BiasDropoutAdd:
      biasDropoutAdd(inst, in, out, ctx, stored);
      break;
    case Opcode::AttentionContext:
      attentionContext(in[0], in[1], qkvLayoutOf(inst, in[0].dim(1), in[1].dim(2)), out[0]);
      break;
    case Opcode::CrossEntropy:
      return crossEntropy(in[0], in[1], inst.num_classes(), out[0]);
    case Opcode::BiasAdd:
      biasAdd(in[0], in[1], out[0]);
      break;
    case Opcode::TpCopy:
      std::copy_n(ptr(in[0]), in[0].numel(), ptr(out[0]));
      break;
    case Opcode::ContextOrder:
      contextOrder(in[0], inst.context_parallel(), inst.inverse(), out[0]);
      break;
    case Opcode::AllReduce:
    case Opcode::AllGather:
    case Opcode::ReduceScatter:
    case Opcode::MoeExchange:
    case Opcode::MoeExchangeBack:
      return Status::failure("collectives run through the communicator, not the backend");
    case Opcode::MoeRouter:
    case Opcode::MoeRouterGrad:
    case Opcode::MoeCount:
    case Opcode::MoeDrop:
    case Opcode::MoeDispatch:
    case Opcode::MoeDispatchGrad:
    case Opcode::GroupedLinear:
    case Opcode::GroupedLinearGradInput:
    case Opcode::GroupedLinearGradWeight:
    case Opcode::MoeCombine:
    case Opcode::MoeCombineGrad:
      return cpu::runMoe<T>(inst, in, out, ctx);
    case Opcode::RingAttentionGrad:
    case Opcode::EmbeddingGrad:
    case Opcode::PositionEmbeddingGrad:
    case Opcode::LayerNormGrad:
    case Opcode::LinearGradInput:
    case Opcode::LinearGradInputGelu:
    case Opcode::LinearGradWeight:
    case Opcode::BiasGrad:
    case Opcode::LinearGradWeightBias:
#define MT_ACTIVATION(opcode, gradient, F) case Opcode::gradient:
#include "backends/Activations.def"
    case Opcode::SwigluGrad:
    case Opcode::RmsNormGrad:
    case Opcode::QkNormGrad:
    case Opcode::AttentionGrad:
    case Opcode::CrossEntropyGrad:
    case Opcode::CrossEntropyWithGrad:
    case Opcode::ParamGrad:
    case Opcode::DropoutGrad:
    case Opcode::AttentionProbsGrad:
    case Opcode::AttentionContextGrad:
    case Opcode::VocabParallelCrossEntropyGrad:
    case Opcode::CrossEntropyStats:
    case Opcode::CrossEntropyMerge:
      return runGradient(inst, in, out, ctx, stored);
    }
    return Status::success();
  }

  /// Runs a forward `inst` over a fused QKV of the instruction's heads, as run().
  static void runHeads(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
                       const StepContext &ctx) {
    const QkvLayout layout = qkvLayoutOf(inst, inst.heads(), in[0].dim(2));
    switch (inst.opcode()) {
    case Opcode::Rotary:
      rotary(in[0], layout, ropeOf(inst), sequenceMap(inst, in[0].dim(1), ctx), out[0]);
      break;
    case Opcode::QkNorm:
      qkNorm(in[0], layout, in[1], in[2], inst.epsilon(), out[0]);
      break;
    case Opcode::Attention:
      attention(in[0], layout, attentionMaskOf(inst), probsDropout(inst, ctx), ctx, out[0],
                inst.outputs()->size() > 1 ? &out[1] : nullptr);
      break;
    case Opcode::AttentionProbs:
      attentionProbs(in[0], layout, attentionMaskOf(inst), out[0]);
      break;
    case Opcode::RingAttention: // a step: (qkv, the share in flight) -> (out, lse)
      ringAttention(in[0], in[1], layout, attentionMaskOf(inst), probsDropout(inst, ctx), ctx,
                    out[0], out[1]);
      break;
    default:
      throw std::logic_error("cpu backend: not an opcode over heads");
    }
  }

  /// Runs a gradient's (or the vocabulary-parallel loss's) `inst`, as run().
  static Status runGradient(const plan::Instruction &inst, const TensorView *in,
                            const TensorView *out, const StepContext &ctx,
                            const std::function<void(int)> &stored) {
    // A norm's gradient with the residual stream's: the add after it, as the pair (dx is
    // written before the residual is read: the two must not share a buffer).
    auto addResidualGrad = [&] {
      if (inst.inputs()->size() == 4) {
        stored(0);
        add(in[3], out[0], out[0]);
      }
    };
    switch (inst.opcode()) {
    case Opcode::DropoutGrad:
      if (inst.inputs()->size() == 2)
        dropoutGrad(in[0], in[1], inst.rate(), out[0]);
      else // the mask drawn again: the same dropout of the gradient
        dropout(in[0], inst.rate(), inst.stream(), dropoutShard(inst, in[0], ctx), ctx, out[0],
                nullptr);
      break;
    case Opcode::AttentionProbsGrad:
      attentionProbsGrad(in[0], in[1], in[2], qkvLayoutOf(inst, in[1].dim(1), in[2].dim(2)),
                         out[0]);
      break;
    case Opcode::AttentionContextGrad:
      attentionContextGrad(in[0], in[1], in[2], qkvLayoutOf(inst, in[1].dim(1), in[2].dim(2)),
                           out[0], out[1]);
      break;
    case Opcode::EmbeddingGrad:
      embeddingGrad(in[0], in[1], vocabFirst(inst, ctx, out[0], 0), out[0]);
      break;
    case Opcode::PositionEmbeddingGrad:
      positionEmbeddingGrad(in[0], sequenceMap(inst, in[0].dim(1), ctx), out[0]);
      break;
    case Opcode::LayerNormGrad:
      layerNormGrad(in[0], in[1], in[2], inst.epsilon(), out[0], out[1], out[2]);
      addResidualGrad();
      break;
    case Opcode::LinearGradInput:
      linearGradInput(in[0], in[1], out[0]);
      break;
    case Opcode::LinearGradInputGelu: // the pair: dy·W stored, then GELU's gradient in place
      linearGradInput(in[0], in[1], out[0]);
      stored(0);
      activationGrad(Gelu{}, out[0], in[2], out[0]);
      break;
    case Opcode::LinearGradWeight:
      linearGradWeight(in[0], in[1], out[0]);
      break;
    case Opcode::BiasGrad:
      biasGrad(in[0], out[0]);
      break;
    case Opcode::LinearGradWeightBias: // the pair
      linearGradWeight(in[0], in[1], out[0]);
      biasGrad(in[0], out[1]);
      break;
#define MT_ACTIVATION(opcode, gradient, F)                                                     \
  case Opcode::gradient:                                                                       \
    activationGrad(activationOf<F>(inst), in[0], in[1], out[0]);                               \
    break;
#include "backends/Activations.def"
    case Opcode::SwigluGrad:
      swigluGrad(in[0], in[1], in[2], out[0], out[1]);
      break;
    case Opcode::RmsNormGrad:
      rmsNormGrad(in[0], in[1], in[2], inst.epsilon(), out[0], out[1]);
      addResidualGrad();
      break;
    case Opcode::QkNormGrad:
      qkNormGrad(in[0], in[1], qkvLayoutOf(inst, inst.heads(), in[1].dim(2)), in[2], in[3],
                 inst.epsilon(), out[0], out[1], out[2]);
      break;
    case Opcode::AttentionGrad:
      attentionGrad(in[0], in[1], in[2], inst.inputs()->size() > 3 ? &in[3] : nullptr,
                    qkvLayoutOf(inst, inst.heads(), in[1].dim(2)), attentionMaskOf(inst),
                    probsDropout(inst, ctx), ctx, out[0]);
      break;
    case Opcode::RingAttentionGrad: // a step: (dy, qkv, out, lse, the share) -> (dqkv, its dkv)
      ringAttentionGrad(in[0], in[1], in[2], in[3], in[4],
                        qkvLayoutOf(inst, inst.heads(), in[1].dim(2)), attentionMaskOf(inst),
                        probsDropout(inst, ctx), ctx, out[0], out[1]);
      break;
    case Opcode::CrossEntropyGrad:
      return crossEntropyGrad(in[0], in[1], in[2], inst.num_classes(), out[0]);
    case Opcode::CrossEntropyWithGrad: { // the pair; the gradient may overwrite the logits
      const Status s = crossEntropyGrad(in[0], in[1], in[2], inst.num_classes(), out[1], &out[0]);
      stored(0);
      return s;
    }
    case Opcode::ParamGrad:
      accumulate(in[0], out[0]);
      break;
    case Opcode::CrossEntropyStats:
      return crossEntropyStats(in[0], in[1], vocabFirst(inst, ctx, in[0], in[0].rank - 1),
                               inst.num_classes() ? inst.num_classes() : in[0].cols() * vocabRanks(inst, ctx),
                               out[0]);
    case Opcode::CrossEntropyMerge:
      crossEntropyMerge(in[0], out[0]);
      break;
    case Opcode::VocabParallelCrossEntropyGrad:
      vocabParallelCrossEntropyGrad(in[0], in[1], in[2], in[3],
                                    vocabFirst(inst, ctx, in[1], in[1].rank - 1),
                                    inst.num_classes() ? inst.num_classes()
                                                       : in[1].cols() * vocabRanks(inst, ctx),
                                    out[0]);
      break;
    default:
      return Status::failure(cat("cpu backend: opcode ", plan::EnumNameOpcode(inst.opcode()),
                                 " has no case"));
    }
    return Status::success();
  }

  static void init(const TensorView &w, const plan::Param &param, uint64_t seed,
                   const ShardMap &shard) {
    const int64_t n = w.numel();
    switch (param.init()) {
    case plan::Init::Zeros:
      std::fill_n(ptr(w), n, T(0));
      break;
    case plan::Init::Ones:
      std::fill_n(ptr(w), n, T(1));
      break;
    case plan::Init::Normal: {
      const uint64_t stream = rng::nameHash(param.name()->string_view());
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
      for (int64_t i = 0; i < n; ++i)
        ptr(w)[i] = static_cast<T>(
            rng::exact::mul(param.std(), rng::standardNormal(seed, stream, shard.global(i))));
      break;
    }
    }
  }

  static double sumOfSquares(const TensorView &x) {
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i)
      s += static_cast<double>(ptr(x)[i]) * ptr(x)[i];
    return s;
  }

  static void adamw(const TensorView &w, const TensorView &g, const TensorView &m,
                    const TensorView &v, const AdamWStep &a) {
    const double r1 = a.inverseCorrection1(), r2 = a.inverseCorrection2();
#pragma omp parallel for schedule(static) if (w.numel() >= kParallelElements)
    for (int64_t i = 0; i < w.numel(); ++i) {
      double mi = ptr(m)[i], vi = ptr(v)[i];
      const double wi = a.update(ptr(w)[i], ptr(g)[i], mi, vi, r1, r2);
      ptr(m)[i] = static_cast<T>(mi);
      ptr(v)[i] = static_cast<T>(vi);
      ptr(w)[i] = static_cast<T>(wi);
    }
  }
};

bool isHalf(plan::DType dtype) { return dtype == plan::DType::BF16 || dtype == plan::DType::F16; }

/// Element i of a float tensor of any precision, as a double, and the reverse.
double load(const TensorView &t, int64_t i) {
  switch (t.dtype) {
  case plan::DType::F64:
    return t.as<double>()[i];
  case plan::DType::BF16:
    return bf16ToFloat(t.as<uint16_t>()[i]);
  case plan::DType::F16:
    return f16ToFloat(t.as<uint16_t>()[i]);
  default:
    return t.as<float>()[i];
  }
}

void store(const TensorView &t, int64_t i, double value) {
  switch (t.dtype) {
  case plan::DType::F64:
    t.as<double>()[i] = value;
    break;
  case plan::DType::BF16:
    t.as<uint16_t>()[i] = floatToBf16(static_cast<float>(value));
    break;
  case plan::DType::F16:
    t.as<uint16_t>()[i] = floatToF16(static_cast<float>(value));
    break;
  default:
    t.as<float>()[i] = static_cast<float>(value);
  }
}

void convert(const TensorView &dst, const TensorView &src) {
  const int64_t n = src.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    store(dst, i, load(src, i));
}

/// The float type an instruction computes in: f64 if any operand is f64, else f32
/// (16-bit operands are widened).
plan::DType computeType(const plan::Instruction &inst, const TensorView *in,
                        const TensorView *out) {
  for (size_t i = 0; i < inst.inputs()->size(); ++i)
    if (in[i].dtype == plan::DType::F64)
      return plan::DType::F64;
  return out[0].dtype == plan::DType::F64 ? plan::DType::F64 : plan::DType::F32;
}

/// 16-bit storage, f32 arithmetic: widens every 16-bit operand into an f32 copy, runs
/// the f32 kernel, and rounds each 16-bit output once.
Status runWidened(const plan::Instruction &inst, const TensorView *inputs,
                  const TensorView *outputs, const StepContext &context) {
  const size_t numIn = inst.inputs()->size(), numOut = inst.outputs()->size();
  std::vector<TensorView> views(inputs, inputs + numIn);
  views.insert(views.end(), outputs, outputs + numOut);
  std::vector<std::vector<float>> wide(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    if (!isHalf(views[i].dtype))
      continue;
    wide[i].resize(views[i].numel());
    TensorView w = views[i];
    w.dtype = plan::DType::F32;
    w.data = wide[i].data();
    convert(w, views[i]);
    views[i] = w;
  }
  auto stored = [&](int i) { // through the output's storage type and back
    const size_t v = numIn + static_cast<size_t>(i);
    if (!wide[v].empty()) {
      convert(outputs[i], views[v]);
      convert(views[v], outputs[i]);
    }
  };
  if (Status s = Kernels<float>::run(inst, views.data(), views.data() + numIn, context, stored);
      !s.ok())
    return s;
  for (size_t i = numIn; i < views.size(); ++i)
    if (!wide[i].empty())
      convert(outputs[i - numIn], views[i]);
  return Status::success();
}

class CpuBackend final : public Backend {
public:
  CpuBackend() { openblas_set_num_threads(1); }
  const char *name() const override { return "cpu"; }

  Status allocate(size_t bytes, void *&out) override {
    out = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    if (!out)
      return Status::failure(cat("cpu backend: out of memory allocating ", bytes, " bytes"));
    return Status::success();
  }
  void release(void *data) noexcept override { std::free(data); }
  Status copyToDevice(void *device, const void *host, size_t bytes) override {
    std::memcpy(device, host, bytes);
    return Status::success();
  }
  Status copyToHost(void *host, const void *device, size_t bytes) override {
    std::memcpy(host, device, bytes);
    return Status::success();
  }
  Status setBytes(void *device, uint8_t value, size_t bytes) override {
    std::memset(device, value, bytes);
    return Status::success();
  }
  Status extentNot(const void *device, uint8_t value, size_t bytes, uint64_t &extent) override {
    const auto *p = static_cast<const uint8_t *>(device);
    extent = bytes;
    while (extent > 0 && p[extent - 1] == value)
      --extent;
    return Status::success();
  }
  Status copyOnDevice(void *dst, const void *src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::success();
  }

  Status run(const plan::Instruction &inst, const TensorView *inputs,
             const TensorView *outputs, const StepContext &context) override {
    // Kernels take host temporaries (widened copies, attention's per-head rows): running
    // out is a Status like any other failure. (Inside an OpenMP region it still ends the
    // process: an exception cannot leave one.)
    try {
      return dispatch(inst, inputs, outputs, context);
    } catch (const std::bad_alloc &) {
      return Status::failure(cat("cpu backend: out of host memory running ",
                                 plan::EnumNameOpcode(inst.opcode())));
    }
  }

  Status convert(const TensorView &dst, const TensorView &src) override {
    mt::convert(dst, src);
    return Status::success();
  }

  Status initParameter(const TensorView &w, const plan::Param &param, uint64_t seed,
                       int tpRank, int tpSize) override {
    ShardMap shard(w, param.shard_dim(), tpRank, tpSize);
    if (w.dtype == plan::DType::F64)
      Kernels<double>::init(w, param, seed, shard);
    else
      Kernels<float>::init(w, param, seed, shard);
    return Status::success();
  }

  Status sumOfSquares(const std::vector<TensorView> &xs, double &sum) override {
    sum = 0;
    for (const TensorView &x : xs)
      sum += x.dtype == plan::DType::F64 ? Kernels<double>::sumOfSquares(x)
                                         : Kernels<float>::sumOfSquares(x);
    return Status::success();
  }

  Status adamw(const std::vector<AdamWTensors> &tensors, const AdamWStep &step) override {
    for (const AdamWTensors &t : tensors) {
      AdamWStep own = step;
      own.weightDecay = t.weightDecay;
      if (t.weight.dtype == plan::DType::F64)
        Kernels<double>::adamw(t.weight, t.grad, t.expAvg, t.expAvgSq, own);
      else
        Kernels<float>::adamw(t.weight, t.grad, t.expAvg, t.expAvgSq, own);
      if (t.compute.data)
        mt::convert(t.compute, t.weight);
    }
    return Status::success();
  }

private:
  /// An instruction that accumulates computes its gradient outputs into temporaries of
  /// their type (the accumulator type), which it then adds into the gradients: the
  /// unfused pair, less the rounding to 16 bits between the two.
  Status dispatch(const plan::Instruction &inst, const TensorView *inputs,
                  const TensorView *outputs, const StepContext &context) {
    if (!inst.accumulate())
      return compute(inst, inputs, outputs, context);
    const size_t first = static_cast<size_t>(opcodeInfo(inst.opcode()).gradOutput);
    std::vector<TensorView> into(outputs, outputs + inst.outputs()->size());
    auto words = [](const TensorView &t) { // 8-byte words of t's type
      return (static_cast<size_t>(t.numel()) * dtypeBytes(t.dtype) + 7) / 8;
    };
    size_t total = 0;
    for (size_t i = first; i < into.size(); ++i)
      total += words(into[i]);
    if (temporaries_.size() < total)
      temporaries_.resize(total);
    double *next = temporaries_.data();
    for (size_t i = first; i < into.size(); ++i) {
      into[i].data = next;
      next += words(into[i]);
    }
    MT_TRY(compute(inst, inputs, into.data(), context));
    for (size_t i = first; i < into.size(); ++i) {
      if (into[i].dtype == plan::DType::F64)
        Kernels<double>::accumulate(into[i], outputs[i]);
      else
        Kernels<float>::accumulate(into[i], outputs[i]);
    }
    return Status::success();
  }

  std::vector<double> temporaries_; // accumulating instructions' gradients, before the add

  Status compute(const plan::Instruction &inst, const TensorView *inputs,
                 const TensorView *outputs, const StepContext &context) {
    // A ring step's operands are more than its instruction's (the share in flight, and
    // backward its gradient), which only f32 and f64 run as they are.
    const bool ring = inst.opcode() == plan::Opcode::RingAttention ||
                      inst.opcode() == plan::Opcode::RingAttentionGrad;
    if (ring && isHalf(inputs[0].dtype))
      return Status::failure("cpu backend: ring attention runs in f32 and f64 only");
    for (size_t i = 0; i < inst.inputs()->size() + inst.outputs()->size(); ++i) {
      const TensorView &t = i < inst.inputs()->size() ? inputs[i]
                                                      : outputs[i - inst.inputs()->size()];
      if (isHalf(t.dtype))
        return runWidened(inst, inputs, outputs, context);
    }
    switch (computeType(inst, inputs, outputs)) {
    case plan::DType::F32:
      return Kernels<float>::run(inst, inputs, outputs, context);
    case plan::DType::F64:
      return Kernels<double>::run(inst, inputs, outputs, context);
    default:
      return Status::failure(cat("cpu backend: ", plan::EnumNameOpcode(inst.opcode()),
                                 " in ", plan::EnumNameDType(outputs[0].dtype),
                                 " is not supported"));
    }
  }
};

} // namespace

std::unique_ptr<Backend> makeCpuBackend() { return std::make_unique<CpuBackend>(); }

} // namespace mt
