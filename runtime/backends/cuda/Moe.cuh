// Mixture of experts on the GPU (plan.fbs: MoeRouter to MoeCombineGrad, and MoeDrop), as the CPU
// backend computes it (backends/cpu/MoeKernels.cpp) and deterministically: a warp per
// token routes it (top-k by rounds of a warp's argmax, ties to the lower expert, a NaN
// the largest); each slot's dispatched row comes from a stable counting sort, one block
// per expert scanning the slots in order (integer counts, the same whatever the
// schedule); a token's slots are summed in slot order; the experts' GEMMs are the
// backend's, one per expert (GroupedLinear, in CudaBackend.cu). A slot whose expert id
// is outside the experts (-1: MoeDrop dropped it; any other, a corrupt plan's, never the
// router's) has no row: nothing is read or written for it.
#ifndef MT_RUNTIME_BACKENDS_CUDA_MOE_CUH
#define MT_RUNTIME_BACKENDS_CUDA_MOE_CUH

#include "backends/cuda/Common.cuh"

#include <cmath>

namespace mt {
namespace {

/// Top-k a warp computes at most (Mixtral's 2, DeepSeek's and Qwen's 8).
constexpr int kMaxTopk = 64;
constexpr int kMoeThreads = 1024;

/// A NaN counts as the largest logit, so that it reaches the loss.
__device__ __forceinline__ float routingKey(float x) { return isnan(x) ? INFINITY : x; }

/// Whether expert a (logit key ka) comes before expert b: larger first, then lower index.
__device__ __forceinline__ bool before(float ka, int a, float kb, int b) {
  return ka > kb || (ka == kb && a < b);
}

/// The k chosen experts of one token's logits [e], in order, into `chosen` (every lane).
template <typename T>
__device__ void warpTopk(const T *logits, int e, int k, int *chosen) {
  const int lane = threadIdx.x & 31;
  for (int s = 0; s < k; ++s) {
    float best = -INFINITY;
    int index = -1;
    for (int j = lane; j < e; j += 32) {
      bool taken = false;
      for (int r = 0; r < s; ++r)
        taken |= chosen[r] == j;
      const float key = routingKey(ld(logits, j));
      if (!taken && (index < 0 || before(key, j, best, index))) {
        best = key;
        index = j;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float otherKey = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other = __shfl_xor_sync(0xffffffffu, index, offset);
      if (other >= 0 && (index < 0 || before(otherKey, other, best, index))) {
        best = otherKey;
        index = other;
      }
    }
    chosen[s] = index;
  }
}

/// The softmax over all e logits: its maximum and sum of exponentials (every lane).
template <typename T>
__device__ void warpSoftmaxStats(const T *logits, int e, float &max, float &sum) {
  const int lane = threadIdx.x & 31;
  max = -INFINITY;
  for (int j = lane; j < e; j += 32)
    max = fmaxf(max, ld(logits, j));
  max = warpReduce(max, MaxOp{});
  sum = 0;
  for (int j = lane; j < e; j += 32)
    sum += expf(ld(logits, j) - max);
  sum = warpSum(sum);
}

/// Gate s of the chosen: the softmax over the chosen logits (Mixtral's), or with `pre`
/// the softmax over all at it.
template <typename T>
__device__ float gateOf(const T *logits, const int *chosen, int k, int s, bool pre, float max,
                        float sum) {
  if (pre)
    return expf(ld(logits, chosen[s]) - max) / sum;
  const float top = ld(logits, chosen[0]);
  float total = 0;
  for (int r = 0; r < k; ++r)
    total += expf(ld(logits, chosen[r]) - top);
  return expf(ld(logits, chosen[s]) - top) / total;
}

/// logits [tokens, e] -> gates [tokens, k] (T), experts [tokens, k] (I); a warp a token.
template <typename T, typename I>
__global__ void moeRouterKernel(const T *logits, T *gates, I *experts, int64_t tokens, int e,
                                int k, bool pre) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (t >= tokens)
    return;
  const T *l = logits + t * e;
  int chosen[kMaxTopk];
  warpTopk(l, e, k, chosen);
  float max = 0, sum = 1;
  if (pre)
    warpSoftmaxStats(l, e, max, sum);
  if ((threadIdx.x & 31) == 0)
    for (int s = 0; s < k; ++s) {
      st(gates, t * k + s, gateOf(l, chosen, k, s, pre, max, sum));
      experts[t * k + s] = static_cast<I>(chosen[s]);
    }
}

/// The slots of each expert: block e counts the slots routed to it (a block reduction of
/// integers: the same whatever the order).
template <typename I>
__global__ void moeCountKernel(const I *experts, int64_t slots, int *counts) {
  __shared__ int total;
  if (threadIdx.x == 0)
    total = 0;
  __syncthreads();
  int mine = 0;
  for (int64_t i = threadIdx.x; i < slots; i += blockDim.x)
    mine += experts[i] == static_cast<I>(blockIdx.x);
  atomicAdd(&total, mine);
  __syncthreads();
  if (threadIdx.x == 0)
    counts[blockIdx.x] = total;
}

/// Each slot's dispatched row: block e gives expert e's slots rows from the experts
/// before it on, in slot order (a block-wide scan of each chunk of slots), its first
/// `capacity` of them (0: all), and writes their number to kept[e]; a dropped slot, or
/// one of no expert (from block 0), gets -1.
template <typename I>
__global__ void moeRowsKernel(const I *experts, int64_t slots, int e, int64_t capacity,
                              const int *counts, int *kept, int *rows) {
  __shared__ int scan[kMoeThreads];
  const int me = blockIdx.x;
  auto keep = [&](int64_t c) { return capacity > 0 && c > capacity ? capacity : c; };
  int64_t first = 0, seen = 0; // the row of this expert's first slot; its slots so far
  for (int r = 0; r < me; ++r)
    first += keep(counts[r]);
  if (threadIdx.x == 0)
    kept[me] = static_cast<int>(keep(counts[me]));
  for (int64_t chunk = 0; chunk < slots; chunk += blockDim.x) {
    const int64_t i = chunk + threadIdx.x;
    const I id = i < slots ? experts[i] : I(-1);
    const int flag = i < slots && id == static_cast<I>(me);
    if (me == 0 && i < slots && (id < 0 || id >= static_cast<I>(e)))
      rows[i] = -1;
    scan[threadIdx.x] = flag;
    __syncthreads();
    for (int offset = 1; offset < blockDim.x; offset <<= 1) { // inclusive scan
      const int add = threadIdx.x >= offset ? scan[threadIdx.x - offset] : 0;
      __syncthreads();
      scan[threadIdx.x] += add;
      __syncthreads();
    }
    const int64_t position = seen + scan[threadIdx.x] - 1;
    if (flag)
      rows[i] = capacity > 0 && position >= capacity ? -1 : static_cast<int>(first + position);
    seen += scan[blockDim.x - 1];
    __syncthreads();
  }
}

/// Each expert's slots in slot order: order[rows[i]] = i (rows from moeRowsKernel without
/// a capacity).
__global__ void moeOrderKernel(const int *rows, int64_t slots, int *order) {
  GRID_STRIDE(i, slots) if (rows[i] >= 0) order[rows[i]] = static_cast<int>(i);
}

/// Megatron's probs drop policy, a thread a slot: slot i of expert e keeps e if fewer than
/// `capacity` of e's slots (`order`, from the experts before it on: `counts`) come before
/// it, by larger gate (a NaN the largest) or, of an equal gate, by an earlier slot;
/// otherwise its expert becomes -1. The slots of no expert are copied.
template <typename T, typename I>
__global__ void moeDropKernel(const T *gates, const I *experts, I *out, int64_t slots, int e,
                              int64_t capacity, const int *counts, const int *order) {
  auto key = [&](int64_t j) {
    const float g = ld(gates, j);
    return isnan(g) ? INFINITY : g;
  };
  GRID_STRIDE(i, slots) {
    const I id = experts[i];
    if (id < 0 || id >= static_cast<I>(e)) {
      out[i] = id;
      continue;
    }
    int64_t first = 0;
    for (I r = 0; r < id; ++r)
      first += counts[r];
    const float mine = key(i);
    int64_t before = 0;
    for (int64_t at = first; at < first + counts[id]; ++at) {
      const int64_t j = order[at];
      const float other = key(j);
      before += other > mine || (other == mine && j < i);
    }
    out[i] = before < capacity ? id : I(-1);
  }
}

/// dlogits of one token a warp: the gates' gradient through their softmax, plus the
/// load-balancing loss's through the softmax over all: d loss/d p_te = scale·n_e/(Σn)²,
/// n = `counts` (null: no such loss), Σn = k·T.
template <typename T, typename I>
__global__ void moeRouterGradKernel(const T *dgates, const T *logits, const I *experts,
                                    const int *counts, double coefficient, const StepCounters *step,
                                    T *dlogits, int64_t tokens, int e, int k, bool pre) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (t >= tokens)
    return;
  const int lane = threadIdx.x & 31;
  long long slots = 0; // Σn = k·T, summed exactly
  for (int j = lane; counts && j < e; j += 32)
    slots += counts[j];
  for (int offset = 16; offset > 0; offset >>= 1)
    slots += __shfl_xor_sync(0xffffffffu, slots, offset);
  // The loss's c·E·k times the seed's scale, read from the step's counters (a recording
  // replays with each step's), in double and rounded once, as the host computes it.
  const float scale =
      counts ? static_cast<float>(__dmul_rn(__dmul_rn(coefficient, step->lossScale),
                                            static_cast<double>(e) * static_cast<double>(k)))
             : 0.f;
  const double squared = static_cast<double>(slots) * static_cast<double>(slots);
  const float perSlot = slots > 0 ? static_cast<float>(scale / squared) : 0.f;
  auto aux = [&](int j) { return perSlot * static_cast<float>(counts[j]); };
  const T *l = logits + t * e, *dg = dgates + t * k;
  int chosen[kMaxTopk];
  bool valid = true;
  for (int s = 0; s < k; ++s) {
    const I id = experts[t * k + s];
    valid &= id >= 0 && id < static_cast<I>(e);
    chosen[s] = valid ? static_cast<int>(id) : 0;
  }
  float max, sum;
  warpSoftmaxStats(l, e, max, sum);
  float dot = 0;
  for (int s = 0; s < k; ++s)
    dot += gateOf(l, chosen, k, s, pre, max, sum) * ld(dg, s);
  float auxDot = 0;
  if (counts) {
    for (int j = lane; j < e; j += 32)
      auxDot += expf(ld(l, j) - max) / sum * aux(j);
    auxDot = warpSum(auxDot);
  }
  for (int j = lane; j < e; j += 32) {
    const float p = expf(ld(l, j) - max) / sum;
    float d = pre ? -p * dot : 0.f;
    for (int s = 0; s < k && valid; ++s)
      if (chosen[s] == j) {
        const float g = gateOf(l, chosen, k, s, pre, max, sum);
        d += g * ld(dg, s) - (pre ? 0.f : g * dot);
      }
    if (counts)
      d += p * (aux(j) - auxDot);
    st(dlogits, t * e + j, valid ? d : 0.f);
  }
}

/// rows[row of slot i] = x[token of i], element by element.
template <typename T>
__global__ void moeDispatchKernel(const T *x, const int *rows, T *out, int64_t slots, int k,
                                  int64_t h) {
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       idx < slots * h; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / h, c = idx % h;
    if (rows[i] >= 0)
      out[rows[i] * h + c] = x[(i / k) * h + c];
  }
}

/// Per token element: Σ over its slots in order of weight(slot)·rows[its row] (weight 1
/// without gates): the dispatch's gradient, and the combine.
template <typename T>
__global__ void moeGatherKernel(const T *from, const T *gates, const int *rows, T *out,
                                int64_t tokens, int k, int64_t h) {
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       idx < tokens * h; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / h, c = idx % h;
    float acc = 0;
    for (int s = 0; s < k; ++s) {
      const int r = rows[t * k + s];
      if (r >= 0)
        acc += (gates ? ld(gates, t * k + s) : 1.f) * ld(from, r * h + c);
    }
    st(out, idx, acc);
  }
}

/// The combine's gradient: drows[row of slot i] = gate·dy[its token]; dgates[i] =
/// dy[its token]·rows[its row] (a warp a slot).
template <typename T>
__global__ void moeCombineGradKernel(const T *dy, const T *rows, const T *gates,
                                     const int *rowOf, T *drows, T *dgates, int64_t slots, int k,
                                     int64_t h) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (i >= slots)
    return;
  const int lane = threadIdx.x & 31, r = rowOf[i];
  const T *d = dy + (i / k) * h;
  const float g = ld(gates, i);
  float dot = 0;
  for (int64_t c = lane; c < h && r >= 0; c += 32) {
    dot += ld(d, c) * ld(rows, r * h + c);
    st(drows, r * h + c, g * ld(d, c));
  }
  dot = warpSum(dot);
  if (lane == 0)
    st(dgates, i, dot);
}

} // namespace
} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_MOE_CUH
