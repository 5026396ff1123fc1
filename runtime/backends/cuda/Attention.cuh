// Attention: one warp per (batch, head, query row). qkv [B, S, (heads + 2·kv)·d] holds,
// per token, its heads by key/value group (core/SharedMath.h: QkvLayout); the warp's
// lanes split d (at most 32·kMaxPerLane). The kernels that write key and value gradients
// run one warp per (batch, group, key row) and sum the group's query heads in head order.
// The fused kernels never materialise the S×S scores (online softmax; the backward
// recomputes the probabilities); the unfused chain, for selective recomputation, keeps
// the probabilities [B, heads, S, S]. Probability dropout draws from Dropout.cuh's
// counters.
//
// Under context parallelism (core/Tensor.h: SequenceMap) the query rows are a context
// rank's share of the sequence: gathered, at their positions in the whole sequence's
// qkv (the all-gather form); or in a ring step (RingAttention), the rank's own share of
// qkv against the keys and values of another rank's (kv). Masks compare positions
// (core/SharedMath.h: AttentionMask); positions ascend along both maps' rows, so the keys
// a query sees, and the queries that see a key, are spans of rows.
#ifndef MT_RUNTIME_BACKENDS_CUDA_ATTENTION_CUH
#define MT_RUNTIME_BACKENDS_CUDA_ATTENTION_CUH

#include "backends/cuda/Common.cuh"
#include "backends/cuda/Dropout.cuh"
#include "core/Rng.h"

#include <cmath>

namespace mt {
namespace {

constexpr int kMaxPerLane = 8; // head_dim up to 256

struct AttentionShape {
  int64_t b, s, h, heads, d; // s: rows of qkv (and kv); h = heads·d, the output's width
  int64_t rows;              // query (and output) rows: s, or a context rank's share
  SequenceMap queries, keys; // the positions of query rows and of key rows
  bool gathered = false;     // queries read from qkv at their positions (all-gather form)
  int64_t whole;             // the sequence's length, of the dropout masks' indices
  QkvLayout layout;
  float scale;
  AttentionMask mask;
  // Probability dropout: the keep mask of global element ((b·A + head)·S + i)·S + j, at
  // the query's and key's positions.
  double rate;
  uint32_t stream;
  ProbsMaskIndex maskIndex;
  const StepCounters *counters; // in device memory

  __device__ int64_t qkvRow(int64_t bi, int64_t t) const { return (bi * s + t) * layout.width(); }
  /// Query head hi of query row i; the key and value it reads at key row t.
  template <typename T> __device__ T *query(T *qkv, int64_t bi, int64_t hi, int64_t i) const {
    return qkv + qkvRow(bi, gathered ? queries(i) : i) + layout.query(hi);
  }
  template <typename T> __device__ T *key(T *qkv, int64_t bi, int64_t hi, int64_t t) const {
    return qkv + qkvRow(bi, t) + layout.key(layout.group(hi));
  }
  template <typename T> __device__ T *value(T *qkv, int64_t bi, int64_t hi, int64_t t) const {
    return qkv + qkvRow(bi, t) + layout.value(layout.group(hi));
  }
  /// Query row i's output row of head hi, and its statistics' place [B, heads, rows].
  __device__ int64_t outAt(int64_t bi, int64_t hi, int64_t i) const {
    return (bi * rows + i) * h + hi * d;
  }
  __device__ int64_t statAt(int64_t bi, int64_t hi, int64_t i) const {
    return (bi * heads + hi) * rows + i;
  }
  /// mask/(1 − rate) of probability (query row i, key row j), or 1 without dropout.
  __device__ float dropFactor(int64_t bi, int64_t hi, int64_t i, int64_t j) const {
    if (rate == 0)
      return 1.f;
    return rng::dropoutKeeps(counters->seed, counters->step, counters->microBatch, stream,
                             maskIndex(bi, hi, queries(i), keys(j), whole), rate)
               ? keptScale(rate)
               : 0.f;
  }
  /// The keys query row i sees: rows [firstKey(i), endKey(i)) of kv.
  __device__ int64_t firstKey(int64_t i) const {
    return keys.rowsBefore(mask.firstKey(queries(i)), s);
  }
  __device__ int64_t endKey(int64_t i) const {
    return keys.rowsBefore(mask.endKey(queries(i), whole), s);
  }
  /// The queries that see key row j: rows [firstQuery(j), endQuery(j)).
  __device__ int64_t firstQuery(int64_t j) const {
    return queries.rowsBefore(mask.firstQuery(keys(j)), rows);
  }
  __device__ int64_t endQuery(int64_t j) const {
    return queries.rowsBefore(mask.endQuery(keys(j), whole), rows);
  }
  /// The row this warp works on: (batch, head, query row); false past the last one.
  __device__ bool warpRow(int64_t &row, int64_t &bi, int64_t &hi, int64_t &t) const {
    row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    t = row % rows;
    hi = (row / rows) % heads;
    bi = row / (rows * heads);
    return row < b * heads * rows;
  }
  /// The key row this warp works on: (batch, key/value group, position).
  __device__ bool warpKeyRow(int64_t &bi, int64_t &g, int64_t &t) const {
    const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    t = row % s;
    g = (row / s) % layout.kv;
    bi = row / (s * layout.kv);
    return row < b * layout.kv * s;
  }
  /// The query heads of group g: [first, end).
  __device__ int64_t firstHead(int64_t g) const { return g * layout.perGroup(); }
  __device__ int64_t endHead(int64_t g) const { return (g + 1) * layout.perGroup(); }
};

/// Loads head_dim values of one row into registers, lane-strided.
template <typename T>
__device__ void loadRow(const T *p, int64_t d, float (&r)[kMaxPerLane]) {
  const int lane = threadIdx.x & 31;
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int64_t c = lane + 32 * k;
    r[k] = c < d ? ld(p, c) : 0.f;
  }
}

/// Stores head_dim values of one row from registers, lane-strided: loadRow's inverse.
template <typename T>
__device__ void storeRow(T *p, int64_t d, const float (&r)[kMaxPerLane]) {
  const int lane = threadIdx.x & 31;
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int64_t c = lane + 32 * k;
    if (c < d)
      st(p, c, r[k]);
  }
}

/// Adds head_dim values of one row from registers, lane-strided.
template <typename T> __device__ void addToRow(T *p, int64_t d, const float (&r)[kMaxPerLane]) {
  const int lane = threadIdx.x & 31;
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int64_t c = lane + 32 * k;
    if (c < d)
      st(p, c, ld(p, c) + r[k]);
  }
}

/// A row of zeros, for the parts of dqkv an operation gives no gradient.
__device__ constexpr float kZeroRow[kMaxPerLane] = {};

template <typename T>
__device__ float rowDot(const float (&q)[kMaxPerLane], const T *k, int64_t d) {
  const int lane = threadIdx.x & 31;
  float acc = 0;
  for (int c = 0; c < kMaxPerLane; ++c) {
    const int64_t col = lane + 32 * c;
    if (col < d)
      acc += q[c] * ld(k, col);
  }
  return warpSum(acc);
}

/// The row's softmax statistics: max and Σ exp(score − max), over the keys of kv it sees.
template <typename T>
__device__ void rowStatistics(const T *kv, const AttentionShape &a, int64_t bi, int64_t hi,
                              int64_t i, const float (&q)[kMaxPerLane], float &max, float &sum) {
  max = -INFINITY;
  sum = 0;
  for (int64_t j = a.firstKey(i); j < a.endKey(i); ++j) {
    const float score = a.scale * rowDot(q, a.key(kv, bi, hi, j), a.d);
    const float next = fmaxf(max, score);
    sum = sum * expf(max - next) + expf(score - next);
    max = next;
  }
}

/// Reads the queries of qkv and the keys and values of kv (qkv itself but in a ring
/// step), writes out: scores, softmax, dropout and the weighted sum of values in one pass
/// over the keys (online softmax), so the scores never reach memory. With `merge` (a ring
/// step after the first), out and stats hold the steps before, and the step's part joins
/// them weighted by the rows' log-sum-exps.
template <typename T>
__global__ void attentionForwardKernel(const T *qkv, const T *kv, T *out, float *stats,
                                       AttentionShape a, bool merge) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float q[kMaxPerLane], acc[kMaxPerLane] = {};
  loadRow(a.query(qkv, bi, hi, i), a.d, q);
  float max = -INFINITY, sum = 0;
  const int64_t from = a.firstKey(i), to = a.endKey(i);
  for (int64_t j = from; j < to; ++j) {
    const T *k = a.key(kv, bi, hi, j), *v = k + a.d;
    const float score = a.scale * rowDot(q, k, a.d);
    const float next = fmaxf(max, score), correction = expf(max - next), p = expf(score - next);
    sum = sum * correction + p;
    const float kept = p * a.dropFactor(bi, hi, i, j);
    float vr[kMaxPerLane];
    loadRow(v, a.d, vr);
    for (int c = 0; c < kMaxPerLane; ++c)
      acc[c] = acc[c] * correction + kept * vr[c];
    max = next;
  }
  for (int c = 0; c < kMaxPerLane; ++c)
    acc[c] /= sum;
  T *y = out + a.outAt(bi, hi, i);
  float logSumExp = max + logf(sum);
  if (merge) {
    if (from == to)
      return;
    // Each part's weight: its share of the merged row's sum of exponentials.
    const float total = stats[a.statAt(bi, hi, i)];
    const float merged = fmaxf(total, logSumExp);
    const float before = expf(total - merged), part = expf(logSumExp - merged);
    float old[kMaxPerLane];
    loadRow(y, a.d, old);
    for (int c = 0; c < kMaxPerLane; ++c)
      acc[c] = (old[c] * before + acc[c] * part) / (before + part);
    logSumExp = merged + logf(before + part);
    __syncwarp(); // every lane has read the total before lane 0 writes it
  }
  storeRow(y, a.d, acc);
  if (stats && (threadIdx.x & 31) == 0) // the row's log-sum-exp, [B, heads, rows]
    stats[a.statAt(bi, hi, i)] = logSumExp;
}

/// Backward, per query row i: logsumexp L_i and delta_i = dO_i·O_i (kept for the key
/// pass), and dQ_i = scale·Σ_j dS_ij·K_j with dS_ij = P_ij·(dP_ij − delta_i) over the
/// keys of kv; with `accumulate` (a ring step), dQ_i is added to dqkv's.
template <typename T>
__global__ void attentionBackwardQueryKernel(const T *qkv, const T *kv, const T *out, const T *dout,
                                             T *dqkv, const float *stats, float2 *rowStats,
                                             AttentionShape a, bool accumulate) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float q[kMaxPerLane], dO[kMaxPerLane], o[kMaxPerLane], dq[kMaxPerLane] = {};
  loadRow(a.query(qkv, bi, hi, i), a.d, q);
  loadRow(dout + a.outAt(bi, hi, i), a.d, dO);
  loadRow(out + a.outAt(bi, hi, i), a.d, o);
  float delta = 0;
  for (int c = 0; c < kMaxPerLane; ++c)
    delta += dO[c] * o[c];
  delta = warpSum(delta);
  float logSumExp;
  if (stats) { // the forward's
    logSumExp = stats[a.statAt(bi, hi, i)];
  } else {
    float max, sum;
    rowStatistics(kv, a, bi, hi, i, q, max, sum);
    logSumExp = max + logf(sum);
  }
  for (int64_t j = a.firstKey(i); j < a.endKey(i); ++j) {
    const T *k = a.key(kv, bi, hi, j), *v = k + a.d;
    const float p = expf(a.scale * rowDot(q, k, a.d) - logSumExp);
    float dP = 0;
    {
      float vr[kMaxPerLane];
      loadRow(v, a.d, vr);
      for (int c = 0; c < kMaxPerLane; ++c)
        dP += dO[c] * vr[c];
      dP = warpSum(dP) * a.dropFactor(bi, hi, i, j);
    }
    const float dS = p * (dP - delta);
    float kr[kMaxPerLane];
    loadRow(k, a.d, kr);
    for (int c = 0; c < kMaxPerLane; ++c)
      dq[c] += a.scale * dS * kr[c];
  }
  if (accumulate)
    addToRow(a.query(dqkv, bi, hi, i), a.d, dq);
  else
    storeRow(a.query(dqkv, bi, hi, i), a.d, dq);
  if ((threadIdx.x & 31) == 0)
    rowStats[row] = make_float2(logSumExp, delta);
}

/// Backward, per key row j of a group of kv: dK_j = scale·Σ_h Σ_i dS_ij·Q_i and
/// dV_j = Σ_h Σ_i P'_ij·dO_i over the group's query heads h, into dkv (added to what it
/// holds with `accumulate`).
template <typename T>
__global__ void attentionBackwardKeyKernel(const T *qkv, const T *kv, const T *dout, T *dkv,
                                           const float2 *rowStats, AttentionShape a,
                                           bool accumulate) {
  int64_t bi, g, j;
  if (!a.warpKeyRow(bi, g, j))
    return;
  float k[kMaxPerLane], v[kMaxPerLane], dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
  const int64_t first = a.firstHead(g);
  loadRow(a.key(kv, bi, first, j), a.d, k);
  loadRow(a.value(kv, bi, first, j), a.d, v);
  for (int64_t hi = first; hi < a.endHead(g); ++hi)
    for (int64_t i = a.firstQuery(j); i < a.endQuery(j); ++i) {
      const float2 stats = rowStats[a.statAt(bi, hi, i)];
      float q[kMaxPerLane], dO[kMaxPerLane];
      loadRow(a.query(qkv, bi, hi, i), a.d, q);
      loadRow(dout + a.outAt(bi, hi, i), a.d, dO);
      float score = 0, dPv = 0;
      for (int c = 0; c < kMaxPerLane; ++c) {
        score += q[c] * k[c];
        dPv += dO[c] * v[c];
      }
      const float p = expf(a.scale * warpSum(score) - stats.x);
      const float drop = a.dropFactor(bi, hi, i, j);
      const float dS = p * (warpSum(dPv) * drop - stats.y);
      for (int c = 0; c < kMaxPerLane; ++c) {
        dk[c] += a.scale * dS * q[c];
        dv[c] += p * drop * dO[c];
      }
    }
  if (accumulate) {
    addToRow(a.key(dkv, bi, first, j), a.d, dk);
    addToRow(a.value(dkv, bi, first, j), a.d, dv);
  } else {
    storeRow(a.key(dkv, bi, first, j), a.d, dk);
    storeRow(a.value(dkv, bi, first, j), a.d, dv);
  }
}

// The unfused chain (selective recomputation's path): probabilities [B, heads, S, S].

/// Reads qkv, writes the row's probabilities (zero past the last key it sees).
template <typename T>
__global__ void attentionProbsKernel(const T *qkv, T *probs, AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float q[kMaxPerLane];
  loadRow(a.query(qkv, bi, hi, i), a.d, q);
  float max, sum;
  rowStatistics(qkv, a, bi, hi, i, q, max, sum);
  T *p = probs + row * a.s;
  const int lane = threadIdx.x & 31;
  for (int64_t j = 0; j < a.s; ++j) {
    float value = 0;
    if (j >= a.firstKey(i) && j < a.endKey(i))
      value = expf(a.scale * rowDot(q, a.key(qkv, bi, hi, j), a.d) - max) / sum;
    if (lane == 0)
      st(p, j, value);
  }
}

/// Reads the probabilities and V, writes out = Σ_j P_ij·V_j.
template <typename T>
__global__ void attentionContextKernel(const T *probs, const T *qkv, T *out, AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float acc[kMaxPerLane] = {};
  for (int64_t j = 0; j < a.s; ++j) {
    const float p = ld(probs, row * a.s + j);
    float v[kMaxPerLane];
    loadRow(a.value(qkv, bi, hi, j), a.d, v);
    for (int c = 0; c < kMaxPerLane; ++c)
      acc[c] += p * v[c];
  }
  storeRow(out + a.outAt(bi, hi, i), a.d, acc);
}

/// dS_ij = P_ij·(dP_ij − Σ_j dP_ij·P_ij) and dQ_i; delta kept for the key pass.
template <typename T>
__global__ void attentionProbsGradQueryKernel(const T *dprobs, const T *probs, const T *qkv,
                                              T *dqkv, float *deltas, AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  const int lane = threadIdx.x & 31;
  float delta = 0;
  for (int64_t j = lane; j < a.s; j += 32)
    delta += ld(dprobs, row * a.s + j) * ld(probs, row * a.s + j);
  delta = warpSum(delta);
  float dq[kMaxPerLane] = {};
  for (int64_t j = 0; j < a.s; ++j) {
    const float dS = ld(probs, row * a.s + j) * (ld(dprobs, row * a.s + j) - delta);
    float k[kMaxPerLane];
    loadRow(a.key(qkv, bi, hi, j), a.d, k);
    for (int c = 0; c < kMaxPerLane; ++c)
      dq[c] += a.scale * dS * k[c];
  }
  storeRow(a.query(dqkv, bi, hi, i), a.d, dq);
  if (lane == 0)
    deltas[row] = delta;
}

/// Per key row j of a group: reads dP, P, Q and the deltas, writes
/// dK_j = scale·Σ_h Σ_i dS_ij·Q_i over the group's query heads h, and a zero V part (no
/// gradient through P).
template <typename T>
__global__ void attentionProbsGradKeyKernel(const T *dprobs, const T *probs, const T *qkv,
                                            T *dqkv, const float *deltas, AttentionShape a) {
  int64_t bi, g, j;
  if (!a.warpKeyRow(bi, g, j))
    return;
  float dk[kMaxPerLane] = {};
  for (int64_t hi = a.firstHead(g); hi < a.endHead(g); ++hi) {
    const int64_t base = (bi * a.heads + hi) * a.s;
    for (int64_t i = 0; i < a.s; ++i) {
      const int64_t at = (base + i) * a.s + j;
      const float dS = ld(probs, at) * (ld(dprobs, at) - deltas[base + i]);
      float q[kMaxPerLane];
      loadRow(a.query(qkv, bi, hi, i), a.d, q);
      for (int c = 0; c < kMaxPerLane; ++c)
        dk[c] += a.scale * dS * q[c];
    }
  }
  storeRow(a.key(dqkv, bi, a.firstHead(g), j), a.d, dk);
  storeRow(a.value(dqkv, bi, a.firstHead(g), j), a.d, kZeroRow);
}

/// dP_ij = dO_i·V_j, per query row.
template <typename T>
__global__ void attentionContextGradProbsKernel(const T *dout, const T *qkv, T *dprobs,
                                                AttentionShape a) {
  int64_t row, bi, hi, i;
  if (!a.warpRow(row, bi, hi, i))
    return;
  float dO[kMaxPerLane];
  loadRow(dout + a.outAt(bi, hi, i), a.d, dO);
  const int lane = threadIdx.x & 31;
  for (int64_t j = 0; j < a.s; ++j) {
    const float dP = rowDot(dO, a.value(qkv, bi, hi, j), a.d);
    if (lane == 0)
      st(dprobs, row * a.s + j, dP);
  }
}

/// dV_j = Σ_h Σ_i P_ij·dO_i over the group's query heads h, per key row of a group; the
/// Q and K parts of dqkv are zero.
template <typename T>
__global__ void attentionContextGradValuesKernel(const T *dout, const T *probs, T *dqkv,
                                                 AttentionShape a) {
  int64_t bi, g, j;
  if (!a.warpKeyRow(bi, g, j))
    return;
  float dv[kMaxPerLane] = {};
  for (int64_t hi = a.firstHead(g); hi < a.endHead(g); ++hi) {
    const int64_t base = (bi * a.heads + hi) * a.s;
    for (int64_t i = 0; i < a.s; ++i) {
      const float p = ld(probs, (base + i) * a.s + j);
      float dO[kMaxPerLane];
      loadRow(dout + a.outAt(bi, hi, i), a.d, dO);
      for (int c = 0; c < kMaxPerLane; ++c)
        dv[c] += p * dO[c];
    }
    storeRow(a.query(dqkv, bi, hi, j), a.d, kZeroRow);
  }
  storeRow(a.key(dqkv, bi, a.firstHead(g), j), a.d, kZeroRow);
  storeRow(a.value(dqkv, bi, a.firstHead(g), j), a.d, dv);
}

/// The shape of an attention instruction over a fused QKV with `heads` query heads and
/// `rows` query rows, masked as it says; `dropout`: whether its probabilities are dropped
/// (the fused kernels) or not (the unfused chain). A context-parallel instruction's queries are
/// this context rank's share; a ring step's keys are ctx.ringOwner's.
inline AttentionShape attentionShape(const TensorView &qkv, int64_t rows, int64_t heads,
                                     const plan::Instruction &inst, const StepContext &ctx,
                                     const StepCounters *counters, bool dropout) {
  AttentionShape a;
  a.b = qkv.dim(0);
  a.s = qkv.dim(1);
  a.rows = rows;
  a.whole = a.s;
  const bool ring = inst.opcode() == plan::Opcode::RingAttention ||
                    inst.opcode() == plan::Opcode::RingAttentionGrad;
  if (ring || inst.context_parallel() > 0) {
    a.queries = SequenceMap(rows, 0, 1, ctx.cpRank, ctx.cpSize);
    a.whole = a.queries.total;
    a.gathered = !ring;
    if (ring)
      a.keys = SequenceMap(rows, 0, 1, ctx.ringOwner, ctx.cpSize);
  }
  a.layout = qkvLayoutOf(inst, heads, qkv.dim(2));
  a.heads = heads;
  a.d = a.layout.d;
  a.h = heads * a.d;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.d)));
  a.mask = attentionMaskOf(inst);
  a.rate = dropout ? dropoutRate(inst, ctx) : 0.0;
  a.stream = static_cast<uint32_t>(inst.stream());
  a.maskIndex = ProbsMaskIndex(heads, inst.head_parallel(), ctx);
  a.counters = counters;
  if (a.d > 32 * kMaxPerLane)
    throw std::runtime_error("cuda backend: attention head_dim " + std::to_string(a.d) +
                             " exceeds " + std::to_string(32 * kMaxPerLane));
  return a;
}

/// The keep mask of a's dropped probabilities, as cuDNN's flash attention multiplies
/// them by it: keep[((bi·heads + hi)·s + i)·pitch + j] = 1 where dropout keeps
/// probability (i, j) — dropFactor's draw, the CPU backend's — else 0, and 0 where the
/// mask hides key j from query i, and 0 in each row's padding [s, pitch) (nothing left
/// undefined: 0 times a NaN's bits is NaN, should an engine read a whole vector past s).
/// Queries and keys are the whole sequence's rows (no context parallelism). A block a
/// row; a thread four keys (rng::attentionKeeps). `pitch`, a multiple of 4, keeps every
/// row's quads aligned where the mask's first is.
template <typename T>
__global__ void attentionKeepMaskKernel(T *keep, int64_t pitch, AttentionShape a) {
  const StepCounters c = *a.counters;
  const bool vector = quadAligned(keep);
  for (int64_t row = blockIdx.x; row < a.b * a.heads * a.s; row += gridDim.x) {
    const int64_t i = row % a.s, hi = row / a.s % a.heads, bi = row / a.s / a.heads;
    const int64_t first = a.mask.firstKey(i), end = a.mask.endKey(i, a.s);
    for (int64_t j = 4 * static_cast<int64_t>(threadIdx.x); j < pitch; j += 4 * blockDim.x) {
      float kept[4] = {};
      if (j < a.s) {
        const int count = quadCount(a.s, j);
        bool keeps[4];
        rng::attentionKeeps(c.seed, c.step, c.microBatch, a.stream, a.maskIndex(bi, hi, i, j, a.s),
                            j, count, first, end, a.rate, keeps);
        forQuad(count, [&](int k) { kept[k] = keeps[k]; });
      }
      storeQuad(keep + row * pitch, j, 4, vector, kept);
    }
  }
}

template <typename T>
void launchAttentionKeepMask(T *keep, int64_t pitch, const AttentionShape &a, cudaStream_t stream) {
  const int64_t rows = a.b * a.heads * a.s;
  if (rows == 0)
    return; // a grid of no blocks is a launch error
  attentionKeepMaskKernel<<<static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 20)),
                            kThreads, 0, stream>>>(keep, pitch, a);
}

/// Blocks of kThreads for one warp per (batch, head, row), or per (batch, group, row).
inline unsigned warpBlocks(const AttentionShape &a) {
  return static_cast<unsigned>((a.b * a.heads * a.rows * 32 + kThreads - 1) / kThreads);
}
inline unsigned keyWarpBlocks(const AttentionShape &a) {
  return static_cast<unsigned>((a.b * a.layout.kv * a.s * 32 + kThreads - 1) / kThreads);
}

// The fused kernels read queries from qkv and keys and values from kv: qkv itself, but
// in a ring step. `merge`, `accumulate`: a ring step's (attentionForwardKernel, and the
// backward kernels).
template <typename T>
void launchAttentionForward(const T *qkv, const T *kv, T *out, float *stats,
                            const AttentionShape &a, bool merge, cudaStream_t stream) {
  attentionForwardKernel<<<warpBlocks(a), kThreads, 0, stream>>>(qkv, kv, out, stats, a, merge);
}

template <typename T>
void launchAttentionBackwardQuery(const T *qkv, const T *kv, const T *out, const T *dout, T *dqkv,
                                  const float *stats, float2 *rowStats, const AttentionShape &a,
                                  bool accumulate, cudaStream_t stream) {
  attentionBackwardQueryKernel<<<warpBlocks(a), kThreads, 0, stream>>>(
      qkv, kv, out, dout, dqkv, stats, rowStats, a, accumulate);
}

template <typename T>
void launchAttentionBackwardKey(const T *qkv, const T *kv, const T *dout, T *dkv,
                                const float2 *rowStats, const AttentionShape &a, bool accumulate,
                                cudaStream_t stream) {
  attentionBackwardKeyKernel<<<keyWarpBlocks(a), kThreads, 0, stream>>>(qkv, kv, dout, dkv,
                                                                        rowStats, a, accumulate);
}

template <typename T>
void launchAttentionProbs(const T *qkv, T *probs, const AttentionShape &a, cudaStream_t stream) {
  attentionProbsKernel<<<warpBlocks(a), kThreads, 0, stream>>>(qkv, probs, a);
}

template <typename T>
void launchAttentionContext(const T *probs, const T *qkv, T *out, const AttentionShape &a,
                            cudaStream_t stream) {
  attentionContextKernel<<<warpBlocks(a), kThreads, 0, stream>>>(probs, qkv, out, a);
}

template <typename T>
void launchAttentionProbsGradQuery(const T *dprobs, const T *probs, const T *qkv, T *dqkv,
                                   float *deltas, const AttentionShape &a, cudaStream_t stream) {
  attentionProbsGradQueryKernel<<<warpBlocks(a), kThreads, 0, stream>>>(dprobs, probs, qkv,
                                                                        dqkv, deltas, a);
}

template <typename T>
void launchAttentionProbsGradKey(const T *dprobs, const T *probs, const T *qkv, T *dqkv,
                                 const float *deltas, const AttentionShape &a,
                                 cudaStream_t stream) {
  attentionProbsGradKeyKernel<<<keyWarpBlocks(a), kThreads, 0, stream>>>(dprobs, probs, qkv, dqkv,
                                                                      deltas, a);
}

template <typename T>
void launchAttentionContextGradProbs(const T *dout, const T *qkv, T *dprobs,
                                     const AttentionShape &a, cudaStream_t stream) {
  attentionContextGradProbsKernel<<<warpBlocks(a), kThreads, 0, stream>>>(dout, qkv, dprobs, a);
}

template <typename T>
void launchAttentionContextGradValues(const T *dout, const T *probs, T *dqkv,
                                      const AttentionShape &a, cudaStream_t stream) {
  attentionContextGradValuesKernel<<<keyWarpBlocks(a), kThreads, 0, stream>>>(dout, probs, dqkv, a);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_ATTENTION_CUH
