// Math the CPU and the CUDA backends share, written once and compiled for both: the
// CPU kernels call it in T (f32 or f64), the CUDA kernels in f32 (AdamW in f64 on both).
#ifndef MT_RUNTIME_CORE_SHAREDMATH_H
#define MT_RUNTIME_CORE_SHAREDMATH_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

namespace mt {

MT_HOST_DEVICE inline float tanhOf(float x) { return tanhf(x); }
MT_HOST_DEVICE inline double tanhOf(double x) { return tanh(x); }
MT_HOST_DEVICE inline float expOf(float x) { return expf(x); }
MT_HOST_DEVICE inline double expOf(double x) { return exp(x); }
MT_HOST_DEVICE inline float erfOf(float x) { return erff(x); }
MT_HOST_DEVICE inline double erfOf(double x) { return erf(x); }

/// What dropout scales a kept element by in f32, 1/(1 − rate) (1 at rate 0): the GPU's
/// dropouts, attention's among them and cuDNN's with our keep mask, alike.
MT_HOST_DEVICE inline float keptScale(double rate) {
  return static_cast<float>(1.0 / (1.0 - rate));
}

/// `ld` elements of `bytes` each rounded up to a whole number of 16 bytes: cuBLASLt runs
/// at a fraction of its speed on a matrix whose columns (column-major) start misaligned,
/// and the CUDA backend copies such a GEMM operand to columns of this length (mtc
/// estimate costs the copies and counts the buffer); the rows of attention's keep mask
/// for cuDNN are as long.
inline int64_t paddedColumn(int64_t ld, int64_t bytes) {
  const int64_t per = 16 / bytes;
  return (ld + per - 1) / per * per;
}

// Activations: value(x) and derivative(x), so that dx = dy · derivative(x).

/// GELU (Hendrycks & Gimpel 2016), x·Φ(x): exactly, 0.5·x·(1 + erf(x/√2)), as BERT and
/// PyTorch's default compute it, or by the tanh approximation GPT-2 and Megatron use,
/// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). An instruction's `approximate` chooses.
struct Gelu {
  bool exact = false;
  Gelu() = default;
  template <typename Instruction>
  explicit Gelu(const Instruction &inst)
      : exact(inst.approximate() == decltype(inst.approximate())::None) {}

  template <typename T> MT_HOST_DEVICE T value(T x) const {
    if (exact)
      return T(0.5) * x * (T(1) + erfOf(x * static_cast<T>(0.70710678118654752440))); // 1/√2
    const T c = static_cast<T>(0.79788456080286535588), a = static_cast<T>(0.044715); // √(2/π)
    return T(0.5) * x * (T(1) + tanhOf(c * (x + a * x * x * x)));
  }
  /// Φ(x) + x·φ(x) exactly.
  template <typename T> MT_HOST_DEVICE T derivative(T x) const {
    if (exact) {
      const T cdf = T(0.5) * (T(1) + erfOf(x * static_cast<T>(0.70710678118654752440)));
      return cdf + x * expOf(T(-0.5) * x * x) * static_cast<T>(0.39894228040143267794); // 1/√(2π)
    }
    const T c = static_cast<T>(0.79788456080286535588), a = static_cast<T>(0.044715);
    const T t = tanhOf(c * (x + a * x * x * x));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * a * x * x);
  }
};

/// SiLU (swish), x·σ(x) (Elfwing et al. 2018): the gate of LLaMA's SwiGLU. Its
/// derivative is σ(x)·(1 + x·(1 − σ(x))). For finite x far below 0, exp(−x) overflows
/// to infinity and both give 0, as they should.
struct Silu {
  template <typename T> MT_HOST_DEVICE static T value(T x) { return x / (T(1) + expOf(-x)); }
  template <typename T> MT_HOST_DEVICE static T derivative(T x) {
    const T s = T(1) / (T(1) + expOf(-x));
    return s * (T(1) + x * (T(1) - s));
  }
};

/// SwiGLU's gating (Shazeer 2020), silu(gate)·up, and its gradients: dgate =
/// dy·up·silu'(gate), dup = dy·silu(gate).
struct Swiglu {
  template <typename T> MT_HOST_DEVICE static T value(T gate, T up) {
    return Silu::value(gate) * up;
  }
  template <typename T> MT_HOST_DEVICE static T gateGrad(T dy, T gate, T up) {
    return dy * up * Silu::derivative(gate);
  }
  template <typename T> MT_HOST_DEVICE static T upGrad(T dy, T gate) {
    return dy * Silu::value(gate);
  }
};

/// Rotary position embeddings (Su et al. 2021) as LLaMA applies them: dims i and i + d/2
/// of a head of d form pair i, turned at position p by the angle p·frequency(i, d), in
/// double on both backends. The layout of a fused QKV by key/value group is attention's
/// (plan.fbs: Rotary).
struct Rope {
  double theta = 10000;
  double scalingFactor = 0; // > 0: LLaMA 3.1's frequency scaling, with the three below
  double lowFreqFactor = 1, highFreqFactor = 4, originalPositions = 8192;
  double sign = 1;          // −1: the inverse rotation (the gradient)

  /// theta^(−2i/d); scaled, wavelengths above originalPositions/lowFreqFactor are
  /// stretched by scalingFactor, those below originalPositions/highFreqFactor kept, and
  /// those between blended (Hugging Face's `llama3` rope type).
  MT_HOST_DEVICE double frequency(int64_t i, int64_t d) const {
    const double f = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    if (scalingFactor <= 0)
      return f;
    const double wavelength = 2 * 3.14159265358979323846 / f;
    if (wavelength < originalPositions / highFreqFactor)
      return f;
    if (wavelength > originalPositions / lowFreqFactor)
      return f / scalingFactor;
    const double smooth =
        (originalPositions / wavelength - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
    return (1 - smooth) * f / scalingFactor + smooth * f;
  }
  /// The angle of pair i at position p, given its frequency.
  MT_HOST_DEVICE double angle(int64_t p, double frequency) const {
    return sign * static_cast<double>(p) * frequency;
  }
  /// Pair (a, b) = (x[i], x[i + d/2]) of a head, turned by `angle`.
  template <typename T, typename O>
  MT_HOST_DEVICE static void turn(T a, T b, double angle, O &outA, O &outB) {
    turn(a, b, cos(angle), sin(angle), outA, outB);
  }
  /// The same, given the angle's cosine c and sine s.
  template <typename T, typename O>
  MT_HOST_DEVICE static void turn(T a, T b, double c, double s, O &outA, O &outB) {
    outA = static_cast<O>(a * c - b * s);
    outB = static_cast<O>(b * c + a * s);
  }
  /// Whether head j of a key/value group of `perGroup` query heads is turned: the query
  /// heads and the key are, the value (the last) is not.
  MT_HOST_DEVICE static bool turns(int64_t j, int64_t perGroup) { return j <= perGroup; }
};

/// Where the heads lie in one token's row of a fused QKV [(heads + 2·kv)·d], laid out by
/// key/value group: (group, {its heads/kv query heads, its key, its value}, d), as
/// Megatron lays out grouped-query attention (plan.fbs: Attention). With kv = heads that
/// is (head, {q, k, v}, d); kv = 1 is multi-query attention.
struct QkvLayout {
  int64_t heads = 1, kv = 1, d = 0;

  MT_HOST_DEVICE int64_t perGroup() const { return heads / kv; }
  MT_HOST_DEVICE int64_t width() const { return (heads + 2 * kv) * d; }
  /// The key/value group of query head h.
  MT_HOST_DEVICE int64_t group(int64_t h) const { return h / perGroup(); }
  /// The offsets of query head h, and of group g's key and value.
  MT_HOST_DEVICE int64_t query(int64_t h) const {
    return (group(h) * (perGroup() + 2) + h % perGroup()) * d;
  }
  MT_HOST_DEVICE int64_t key(int64_t g) const { return (g * (perGroup() + 2) + perGroup()) * d; }
  MT_HOST_DEVICE int64_t value(int64_t g) const { return key(g) + d; }
  /// The heads of a row, d apiece: query heads, keys and values alike.
  MT_HOST_DEVICE int64_t slots() const { return kv * (perGroup() + 2); }
  /// Which head of the rows (row · slots() + its place in the row) is the n-th query head,
  /// counting the rows in order and each row's heads in order; or with `keys`, the n-th
  /// key.
  MT_HOST_DEVICE int64_t slot(int64_t n, bool keys) const {
    const int64_t per = keys ? kv : heads, h = n % per;
    return n / per * slots() + (keys ? key(h) : query(h)) / d;
  }
};

/// The keys a query sees, by position (mt.attention's mask): every one; under a causal
/// mask those at or before its own position; with a sliding window of w as well only the
/// last w of those, its own included (Hugging Face's `sliding_window` w).
struct AttentionMask {
  bool causal = false;
  int64_t window = 0; // 0: none

  /// Query position q sees key positions [firstKey(q), endKey(q, keys)) of `keys`.
  MT_HOST_DEVICE int64_t firstKey(int64_t q) const {
    return window > 0 && q >= window ? q - window + 1 : 0;
  }
  MT_HOST_DEVICE int64_t endKey(int64_t q, int64_t keys) const { return causal ? q + 1 : keys; }
  /// Key position t is seen by query positions [firstQuery(t), endQuery(t, queries)).
  MT_HOST_DEVICE int64_t firstQuery(int64_t t) const { return causal ? t : 0; }
  MT_HOST_DEVICE int64_t endQuery(int64_t t, int64_t queries) const {
    return window > 0 && t + window < queries ? t + window : queries;
  }
  /// The (query, key) pairs of a sequence of s the mask lets through, one by one: what
  /// kernels that take each row over its own keys compute.
  double pairs(int64_t s) const {
    const double n = static_cast<double>(s);
    if (!causal)
      return n * n;
    const double w = window > 0 && window < s ? static_cast<double>(window) : n;
    return w * (w + 1) / 2 + (n - w) * w;
  }
  /// The share of a sequence of s's s×s scores the mask lets through, as FLOPs count it:
  /// all, half under a causal mask, and the band's w(2s − w)/(2s²) under a window w < s
  /// (areas, as the half is: the diagonal counted once, in neither).
  double share(int64_t s) const {
    if (!causal)
      return 1;
    if (window <= 0 || window >= s)
      return 0.5;
    const double w = static_cast<double>(window), n = static_cast<double>(s);
    return w * (2 * n - w) / (2 * n * n);
  }
};

/// The softmax statistics of one row, merged over `parts` shards of its columns
/// (vocabulary-parallel cross entropy). Shard p's (max, Σ exp(x − max), target logit)
/// lie at stats[3p·stride], stats[(3p + 1)·stride], stats[(3p + 2)·stride]. Each
/// shard's sum is rescaled by exp(its max − the global max) (Milakov & Gimelshein
/// 2018); a shard without valid columns (max −∞) adds nothing. Accumulates in Acc.
template <typename Acc, typename T>
MT_HOST_DEVICE void mergeSoftmaxStats(const T *stats, int64_t stride, int64_t parts, Acc &max,
                                      Acc &sum, Acc &target) {
  max = -static_cast<Acc>(INFINITY);
  for (int64_t p = 0; p < parts; ++p)
    if (max < static_cast<Acc>(stats[3 * p * stride]))
      max = static_cast<Acc>(stats[3 * p * stride]);
  sum = 0;
  target = 0;
  for (int64_t p = 0; p < parts; ++p) {
    const Acc localMax = static_cast<Acc>(stats[3 * p * stride]);
    if (localMax > -static_cast<Acc>(INFINITY))
      sum += static_cast<Acc>(stats[(3 * p + 1) * stride]) * expOf(localMax - max);
    target += static_cast<Acc>(stats[(3 * p + 2) * stride]);
  }
}

/// One AdamW update (Loshchilov & Hutter 2019), with the gradient scaled first
/// (1/micro-batches and the clipping factor folded into one number).
struct AdamWStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  double gradScale = 1;
  int64_t step = 1; // 1-based, for the bias corrections

  /// The reciprocals of Adam's bias corrections, 1/(1 − β₁ᵗ) and 1/(1 − β₂ᵗ) (host only:
  /// computed once per update). The moments are multiplied by them: a division per
  /// element costs the GPU's f64 units several products.
  double inverseCorrection1() const { return 1 / (1 - pow(beta1, static_cast<double>(step))); }
  double inverseCorrection2() const { return 1 / (1 - pow(beta2, static_cast<double>(step))); }

  /// One element, in f64: updates the moments m and v from gradient g and returns the
  /// new weight; r1 and r2 are the bias corrections' reciprocals. The decay is decoupled
  /// from the gradient, applied to the weight before the update.
  MT_HOST_DEVICE double update(double w, double g, double &m, double &v, double r1,
                               double r2) const {
    const double grad = g * gradScale;
    m = beta1 * m + (1 - beta1) * grad;
    v = beta2 * v + (1 - beta2) * grad * grad;
    return w - lr * ((m * r1) / (sqrt(v * r2) + eps) + weightDecay * w);
  }
};

} // namespace mt

#endif
