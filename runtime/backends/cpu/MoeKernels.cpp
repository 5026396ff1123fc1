#include "backends/cpu/MoeKernels.h"
#include "backends/cpu/Blas.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace mt::cpu {
namespace {

using plan::Opcode;

/// The experts of experts [B, S, k], each checked to be one of `count`, or with
/// `dropped` -1 (a slot MoeDrop dropped: the router's gradient never reads one).
Status expertsOf(const TensorView &experts, int64_t count, std::vector<int64_t> &ids,
                 bool dropped = true) {
  ids.resize(experts.numel());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = experts.index(static_cast<int64_t>(i));
    if (ids[i] < (dropped ? -1 : 0) || ids[i] >= count)
      return Status::failure(cat("mixture of experts: expert ", ids[i], " of ", count));
  }
  return Status::success();
}

/// Where each slot of experts [B, S, k] goes among the dispatched rows: sorted by expert,
/// within an expert by token, then slot (a stable counting sort); counts[e] per expert.
/// With a capacity each expert keeps its first `capacity` slots; the rest, and the slots
/// of expert -1, get row -1.
struct Routing {
  std::vector<int64_t> row, counts;
  bool dropped = false; // some slot has no row
};

Status routing(const TensorView &experts, const plan::Instruction &inst, Routing &r) {
  const int64_t count = inst.num_experts(), capacity = inst.capacity();
  std::vector<int64_t> ids;
  MT_TRY(expertsOf(experts, count, ids));
  r.counts.assign(count, 0);
  for (int64_t e : ids)
    if (e >= 0)
      ++r.counts[e];
  if (capacity > 0)
    for (int64_t &c : r.counts)
      c = std::min(c, capacity);
  std::vector<int64_t> next(count), kept(count, 0);
  for (int64_t e = 0, at = 0; e < count; at += r.counts[e++])
    next[e] = at;
  r.row.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    r.row[i] = ids[i] >= 0 && kept[ids[i]]++ < r.counts[ids[i]] ? next[ids[i]]++ : -1;
    r.dropped = r.dropped || r.row[i] < 0;
  }
  return Status::success();
}

/// A grouped linear's rows per each of `experts` experts, from its counts [E] or
/// [sources, E] (an expert's rows their sum over the sources): each at least 0, and
/// together at most the `rows` there are.
Status groups(const TensorView &counts, int64_t experts, int64_t rows, std::vector<int64_t> &c) {
  c.assign(experts, 0);
  for (int64_t i = 0; i < counts.numel(); ++i) {
    const int64_t n = counts.index(i);
    if (n < 0 || n > rows)
      return Status::failure(cat("grouped linear: a count of ", n, " rows, of ", rows));
    c[i % experts] += n;
  }
  int64_t total = 0;
  for (size_t e = 0; e < c.size(); ++e) {
    if (c[e] > rows - total)
      return Status::failure(cat("grouped linear: expert ", e, "'s ", c[e], " rows, of ", rows,
                                 " (", total, " before it)"));
    total += c[e];
  }
  return Status::success();
}

template <typename T> struct Moe {
  static T *p(const TensorView &t) { return t.as<T>(); }

  /// The k experts of the largest logits among e, ties to the lower index, in that order
  /// (a NaN counts as the largest, so that it reaches the loss); `order` is scratch of e.
  static void topk(const T *logits, int64_t e, int64_t k, int64_t *order, int64_t *chosen) {
    auto key = [&](int64_t j) {
      return std::isnan(logits[j]) ? std::numeric_limits<T>::infinity() : logits[j];
    };
    for (int64_t j = 0; j < e; ++j)
      order[j] = j;
    std::partial_sort(order, order + k, order + e, [&](int64_t a, int64_t b) {
      return key(a) > key(b) || (key(a) == key(b) && a < b);
    });
    std::copy_n(order, k, chosen);
  }

  /// probs = the softmax of logits[0, e).
  static void softmax(const T *logits, int64_t e, double *probs) {
    const T max = *std::max_element(logits, logits + e);
    double sum = 0;
    for (int64_t j = 0; j < e; ++j)
      sum += probs[j] = std::exp(static_cast<double>(logits[j] - max));
    for (int64_t j = 0; j < e; ++j)
      probs[j] /= sum;
  }

  /// The gates of the chosen experts: the softmax over their logits, or with `pre` the
  /// softmax over all taken at them.
  static void gatesOf(const T *logits, int64_t e, const int64_t *chosen, int64_t k, bool pre,
                      double *probs, double *gates) {
    if (pre) {
      softmax(logits, e, probs);
      for (int64_t s = 0; s < k; ++s)
        gates[s] = probs[chosen[s]];
      return;
    }
    double sum = 0;
    for (int64_t s = 0; s < k; ++s) // chosen[0]'s logit is the largest
      sum += gates[s] = std::exp(static_cast<double>(logits[chosen[s]] - logits[chosen[0]]));
    for (int64_t s = 0; s < k; ++s)
      gates[s] /= sum;
  }

  static void router(const plan::Instruction &inst, const TensorView &logits,
                     const TensorView &gates, const TensorView &experts) {
    const int64_t e = logits.dim(2), k = inst.topk(), tokens = logits.numel() / e;
#pragma omp parallel
    {
      std::vector<double> probs(e), g(k);
      std::vector<int64_t> order(e), chosen(k);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tokens; ++t) {
        const T *l = p(logits) + t * e;
        topk(l, e, k, order.data(), chosen.data());
        gatesOf(l, e, chosen.data(), k, inst.pre_softmax(), probs.data(), g.data());
        for (int64_t s = 0; s < k; ++s) {
          p(gates)[t * k + s] = static_cast<T>(g[s]);
          experts.setIndex(t * k + s, chosen[s]);
        }
      }
    }
  }

  /// dlogits: the gates' gradient through their softmax, plus the load-balancing loss's
  /// c·E/(k·T²)·Σ_e n_e·Σ_t p_te through the softmax over all experts, times the loss
  /// seed's scale. n_e is `load` where there is one (the whole micro-batch's, of which
  /// these tokens are a share), else counted from `experts`; T is Σ_e n_e / k.
  static Status routerGrad(const plan::Instruction &inst, const TensorView &dgates,
                           const TensorView &logits, const TensorView &experts,
                           const TensorView *load, const StepContext &ctx,
                           const TensorView &dlogits) {
    const int64_t e = logits.dim(2), k = inst.topk(), tokens = logits.numel() / e;
    const double coeff = inst.aux_loss_coeff();
    std::vector<int64_t> ids; // read once, checked, before dlogits is written
    MT_TRY(expertsOf(experts, e, ids, /*dropped=*/false));
    std::vector<double> aux(e, 0.0); // d(loss)/d(p_te), the same for every token
    if (coeff > 0) {
      std::vector<int64_t> slots(e, 0); // n_e
      if (!load)
        for (int64_t id : ids)
          ++slots[id];
      for (int64_t j = 0; load && j < e; ++j)
        if ((slots[j] = load->index(j)) < 0)
          return Status::failure(cat("mixture of experts: a load of ", slots[j], " slots"));
      const double all = std::accumulate(slots.begin(), slots.end(), 0.0); // k·T
      const double scale =
          all > 0 ? coeff * ctx.lossScale * static_cast<double>(e * k) / (all * all) : 0;
      for (int64_t j = 0; j < e; ++j)
        aux[j] = scale * static_cast<double>(slots[j]);
    }
#pragma omp parallel
    {
      std::vector<double> probs(e), g(k), d(e);
      std::vector<int64_t> chosen(k);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tokens; ++t) {
        const T *l = p(logits) + t * e, *dg = p(dgates) + t * k;
        std::copy_n(ids.begin() + t * k, k, chosen.begin());
        gatesOf(l, e, chosen.data(), k, inst.pre_softmax(), probs.data(), g.data());
        double dot = 0;
        for (int64_t s = 0; s < k; ++s)
          dot += g[s] * dg[s];
        std::fill(d.begin(), d.end(), 0.0);
        for (int64_t s = 0; s < k; ++s) // the softmax the gates were taken from
          d[chosen[s]] += g[s] * dg[s] - (inst.pre_softmax() ? 0.0 : g[s] * dot);
        if (inst.pre_softmax())
          for (int64_t j = 0; j < e; ++j)
            d[j] -= probs[j] * dot;
        if (coeff > 0) {
          if (!inst.pre_softmax())
            softmax(l, e, probs.data());
          double auxDot = 0;
          for (int64_t j = 0; j < e; ++j)
            auxDot += probs[j] * aux[j];
          for (int64_t j = 0; j < e; ++j)
            d[j] += probs[j] * (aux[j] - auxDot);
        }
        for (int64_t j = 0; j < e; ++j)
          p(dlogits)[t * e + j] = static_cast<T>(d[j]);
      }
    }
    return Status::success();
  }

  /// Megatron's probs drop policy: each expert keeps the `capacity` of its slots of the
  /// largest gates (a NaN the largest; of equal gates the earlier slot), the others'
  /// expert becomes -1.
  static Status drop(const plan::Instruction &inst, const TensorView &gates,
                     const TensorView &experts, const TensorView &out) {
    std::vector<int64_t> ids;
    MT_TRY(expertsOf(experts, inst.num_experts(), ids));
    std::vector<std::vector<int64_t>> slots(inst.num_experts());
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= 0)
        slots[ids[i]].push_back(static_cast<int64_t>(i));
    auto key = [&](int64_t i) {
      const T g = p(gates)[i];
      return std::isnan(g) ? std::numeric_limits<T>::infinity() : g;
    };
    for (std::vector<int64_t> &mine : slots) {
      std::sort(mine.begin(), mine.end(), [&](int64_t a, int64_t b) {
        return key(a) > key(b) || (key(a) == key(b) && a < b);
      });
      for (size_t r = static_cast<size_t>(inst.capacity()); r < mine.size(); ++r)
        ids[mine[r]] = -1;
    }
    for (size_t i = 0; i < ids.size(); ++i)
      out.setIndex(static_cast<int64_t>(i), ids[i]);
    return Status::success();
  }

  /// rows[row of slot (t, s)] = x[t], the rows past the kept ones 0; counts per expert.
  static Status dispatch(const plan::Instruction &inst, const TensorView &x,
                         const TensorView &experts, const TensorView &rows,
                         const TensorView &counts) {
    Routing r;
    MT_TRY(routing(experts, inst, r));
    const int64_t h = x.dim(2), k = experts.dim(2);
    if (r.dropped) // the rows past the kept ones
      std::fill_n(p(rows), rows.numel(), T(0));
    for (int64_t i = 0; i < experts.numel(); ++i)
      if (r.row[i] >= 0)
        std::copy_n(p(x) + (i / k) * h, h, p(rows) + r.row[i] * h);
    for (int64_t e = 0; e < inst.num_experts(); ++e)
      counts.setIndex(e, r.counts[e]);
    return Status::success();
  }

  /// out[t] = Σ over t's slots, in order, of gate·from[its row] (gate 1 without
  /// `gates`): the combine, and the dispatch's gradient.
  static Status gather(const plan::Instruction &inst, const TensorView &from,
                       const TensorView *gates, const TensorView &experts, const TensorView &out) {
    Routing r;
    MT_TRY(routing(experts, inst, r));
    const int64_t h = out.dim(2), k = experts.dim(2), tokens = experts.numel() / k;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      T *y = p(out) + t * h;
      std::fill_n(y, h, T(0));
      for (int64_t s = 0; s < k; ++s) {
        if (r.row[t * k + s] < 0)
          continue; // dropped
        const T g = gates ? p(*gates)[t * k + s] : T(1), *row = p(from) + r.row[t * k + s] * h;
        for (int64_t j = 0; j < h; ++j)
          y[j] += g * row[j];
      }
    }
    return Status::success();
  }

  /// drows[row of (t, s)] = gate·dy[t]; dgates[t, s] = dy[t]·rows[its row] (a dropped
  /// slot's 0, and the rows past the kept ones 0).
  static Status combineGrad(const plan::Instruction &inst, const TensorView &dy,
                            const TensorView &rows, const TensorView &gates,
                            const TensorView &experts, const TensorView &drows,
                            const TensorView &dgates) {
    Routing r;
    MT_TRY(routing(experts, inst, r));
    const int64_t h = dy.dim(2), k = experts.dim(2);
    if (r.dropped) // the rows past the kept ones
      std::fill_n(p(drows), drows.numel(), T(0));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < experts.numel(); ++i) {
      if (r.row[i] < 0) {
        p(dgates)[i] = T(0);
        continue;
      }
      const T g = p(gates)[i], *d = p(dy) + (i / k) * h, *row = p(rows) + r.row[i] * h;
      T *dr = p(drows) + r.row[i] * h;
      double dot = 0;
      for (int64_t j = 0; j < h; ++j) {
        dot += static_cast<double>(d[j]) * row[j];
        dr[j] = g * d[j];
      }
      p(dgates)[i] = static_cast<T>(dot);
    }
    return Status::success();
  }

  /// Expert by expert over its rows: y = x·w[e]ᵀ (GroupedLinear), dx = dy·w[e]
  /// (GradInput), dw[e] = dyᵀ·x (GradWeight); rows past the counted ones are 0.
  static Status grouped(const plan::Instruction &inst, const TensorView *in,
                        const TensorView &out) {
    const bool weights = inst.opcode() == Opcode::GroupedLinearGradWeight;
    const TensorView &w = weights ? out : in[2], &lhs = in[0];
    const int64_t n = lhs.dim(0), o = w.dim(1), i = w.dim(2);
    std::vector<int64_t> c;
    MT_TRY(groups(in[weights ? 2 : 1], w.dim(0), n, c));
    int64_t at = 0;
    for (size_t e = 0; e < c.size(); at += c[e++]) {
      const T *we = p(w) + static_cast<int64_t>(e) * o * i;
      if (weights && c[e] == 0)
        std::fill_n(p(out) + e * o * i, o * i, T(0));
      else if (weights)
        gemm(true, false, o, i, c[e], T(1), p(lhs) + at * o, o, p(in[1]) + at * i, i, T(0),
             p(out) + e * o * i, i);
      else if (c[e] > 0 && inst.opcode() == Opcode::GroupedLinear)
        gemm(false, true, c[e], o, i, T(1), p(lhs) + at * i, i, we, i, T(0), p(out) + at * o, o);
      else if (c[e] > 0)
        gemm(false, false, c[e], i, o, T(1), p(lhs) + at * o, o, we, i, T(0), p(out) + at * i, i);
    }
    if (!weights) {
      const int64_t width = out.dim(1);
      std::fill(p(out) + at * width, p(out) + n * width, T(0));
    }
    return Status::success();
  }
};

} // namespace

template <typename T>
Status runMoe(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
              const StepContext &ctx) {
  using K = Moe<T>;
  switch (inst.opcode()) {
  case Opcode::MoeRouter:
    K::router(inst, in[0], out[0], out[1]);
    return Status::success();
  case Opcode::MoeRouterGrad:
    return K::routerGrad(inst, in[0], in[1], in[2], inst.inputs()->size() > 3 ? &in[3] : nullptr,
                         ctx, out[0]);
  case Opcode::MoeCount: {
    std::vector<int64_t> ids;
    MT_TRY(expertsOf(in[0], inst.num_experts(), ids));
    for (int64_t e = 0; e < inst.num_experts(); ++e)
      out[0].setIndex(e, std::count(ids.begin(), ids.end(), e));
    return Status::success();
  }
  case Opcode::MoeDrop:
    return K::drop(inst, in[0], in[1], out[0]);
  case Opcode::MoeDispatch:
    return K::dispatch(inst, in[0], in[1], out[0], out[1]);
  case Opcode::MoeDispatchGrad:
    return K::gather(inst, in[0], nullptr, in[1], out[0]);
  case Opcode::GroupedLinear:
  case Opcode::GroupedLinearGradInput:
  case Opcode::GroupedLinearGradWeight:
    return K::grouped(inst, in, out[0]);
  case Opcode::MoeCombine:
    return K::gather(inst, in[0], &in[1], in[2], out[0]);
  case Opcode::MoeCombineGrad:
    return K::combineGrad(inst, in[0], in[1], in[2], in[3], out[0], out[1]);
  default:
    return Status::failure("not a mixture-of-experts opcode");
  }
}

template Status runMoe<float>(const plan::Instruction &, const TensorView *, const TensorView *,
                              const StepContext &);
template Status runMoe<double>(const plan::Instruction &, const TensorView *, const TensorView *,
                               const StepContext &);

} // namespace mt::cpu
