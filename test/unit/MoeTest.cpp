// Mixture of experts on the CPU backend, op by op, against statements written here from
// the definitions: the load-balancing loss's gradient (Megatron-Core's Switch form)
// against central differences of that loss; uneven routing (one expert given every
// token's first slot, one given none) through dispatch, the experts' grouped GEMMs and
// the gated combine, against a token-by-token computation; a share of the tokens with the
// whole's load against the whole; routing outside the experts refused with a message.
#include "StatusAssertions.h"
#include "TestInstruction.h"
#include "backends/Backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace mt {
namespace {

using plan::Opcode;

/// One mixture-of-experts instruction with its attributes.
struct MoeInstruction : test::TestInstruction {
  MoeInstruction(Opcode opcode, int inputs, int outputs, int64_t topk, int64_t experts,
                 double coeff = 0, bool preSoftmax = false, int64_t capacity = 0)
      : TestInstruction(opcode, inputs, outputs, [&](plan::InstructionBuilder &b) {
          b.add_topk(topk);
          b.add_num_experts(experts);
          b.add_aux_loss_coeff(coeff);
          b.add_pre_softmax(preSoftmax);
          b.add_capacity(capacity);
        }) {}
};

template <typename T> TensorView view(std::vector<T> &data, std::vector<int64_t> shape) {
  TensorView v;
  v.data = data.data();
  v.dtype = std::is_same_v<T, double>    ? plan::DType::F64
            : std::is_same_v<T, int32_t> ? plan::DType::I32
                                         : plan::DType::F32;
  v.rank = static_cast<int>(shape.size());
  for (int i = 0; i < v.rank; ++i)
    v.shape[i] = shape[i];
  return v;
}

std::vector<double> normals(size_t n, double scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double &x : v)
    x = normal(rng);
  return v;
}

constexpr int64_t kTokens = 6, kExperts = 4, kSlots = 2;

/// Megatron-Core's load-balancing loss of logits [T, E] routed to `experts` [T, k]:
/// c·E/(k·T²)·Σ_e n_e·Σ_t softmax(logits_t)_e.
double auxLoss(const std::vector<double> &logits, const std::vector<int32_t> &experts,
               double coeff) {
  std::vector<double> counts(kExperts, 0.0), probs(kExperts, 0.0);
  for (int32_t e : experts)
    ++counts[e];
  for (int64_t t = 0; t < kTokens; ++t) {
    double sum = 0;
    for (int64_t e = 0; e < kExperts; ++e)
      sum += std::exp(logits[t * kExperts + e]);
    for (int64_t e = 0; e < kExperts; ++e)
      probs[e] += std::exp(logits[t * kExperts + e]) / sum;
  }
  double loss = 0;
  for (int64_t e = 0; e < kExperts; ++e)
    loss += counts[e] * probs[e];
  return coeff * kExperts / (kSlots * double(kTokens) * kTokens) * loss;
}

/// With no gradient from the gates, the router's gradient is the load-balancing loss's,
/// times the loss seed's scale; for either gating.
TEST(MoeRouter, AuxiliaryLossGradientIsTheFiniteDifference) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  for (bool pre : {false, true})
    for (double lossScale : {1.0, 8.0}) {
      SCOPED_TRACE(std::string(pre ? "pre-softmax" : "top-k softmax") + ", loss scale " +
                   std::to_string(lossScale));
      const double coeff = 0.3;
      std::vector<double> logits = normals(kTokens * kExperts, 1.0, 5), gates(kTokens * kSlots),
                          dgates(kTokens * kSlots, 0.0), dlogits(logits.size());
      std::vector<int32_t> experts(kTokens * kSlots);
      const std::vector<int64_t> slots = {2, 3, kSlots}, all = {2, 3, kExperts};
      MoeInstruction router(Opcode::MoeRouter, 1, 2, kSlots, kExperts, coeff, pre);
      MoeInstruction grad(Opcode::MoeRouterGrad, 3, 1, kSlots, kExperts, coeff, pre);
      const TensorView routerIn[1] = {view(logits, all)};
      const TensorView routerOut[2] = {view(gates, slots), view(experts, slots)};
      ASSERT_OK(cpu->run(*router.inst, routerIn, routerOut, StepContext{}));
      StepContext ctx;
      ctx.lossScale = lossScale;
      const TensorView gradIn[3] = {view(dgates, slots), view(logits, all), view(experts, slots)};
      const TensorView gradOut[1] = {view(dlogits, all)};
      ASSERT_OK(cpu->run(*grad.inst, gradIn, gradOut, ctx));
      double diff = 0, norm = 0;
      for (size_t i = 0; i < logits.size(); ++i) {
        const double h = 1e-6, saved = logits[i];
        logits[i] = saved + h;
        const double up = auxLoss(logits, experts, coeff);
        logits[i] = saved - h;
        const double down = auxLoss(logits, experts, coeff);
        logits[i] = saved;
        const double numeric = lossScale * (up - down) / (2 * h);
        diff += (dlogits[i] - numeric) * (dlogits[i] - numeric);
        norm += numeric * numeric;
      }
      ASSERT_GT(norm, 0);
      EXPECT_LE(std::sqrt(diff / norm), 1e-8);
    }
}

/// Each share of the tokens (a sequence-parallel block), given the whole micro-batch's
/// counts as its load, gets the whole's gradient for its rows; a negative load is refused.
TEST(MoeRouter, ASharesGradientWithTheLoadIsTheWholes) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  const double coeff = 0.3;
  std::vector<double> logits = normals(kTokens * kExperts, 1.0, 7), gates(kTokens * kSlots),
                      dgates = normals(kTokens * kSlots, 1.0, 8), whole(logits.size());
  std::vector<int32_t> experts(kTokens * kSlots), load(kExperts, 0);
  const std::vector<int64_t> slots = {1, kTokens, kSlots}, all = {1, kTokens, kExperts};
  MoeInstruction router(Opcode::MoeRouter, 1, 2, kSlots, kExperts, coeff);
  const TensorView routerIn[1] = {view(logits, all)};
  const TensorView routerOut[2] = {view(gates, slots), view(experts, slots)};
  ASSERT_OK(cpu->run(*router.inst, routerIn, routerOut, StepContext{}));
  for (int32_t e : experts)
    ++load[e];
  MoeInstruction grad(Opcode::MoeRouterGrad, 3, 1, kSlots, kExperts, coeff);
  const TensorView wholeIn[3] = {view(dgates, slots), view(logits, all), view(experts, slots)};
  const TensorView wholeOut[1] = {view(whole, all)};
  ASSERT_OK(cpu->run(*grad.inst, wholeIn, wholeOut, StepContext{}));
  MoeInstruction shared(Opcode::MoeRouterGrad, 4, 1, kSlots, kExperts, coeff);
  const int64_t half = kTokens / 2;
  for (int64_t first : {int64_t{0}, half}) {
    SCOPED_TRACE("the share from token " + std::to_string(first));
    std::vector<double> part(half * kExperts);
    TensorView in[4] = {view(dgates, {1, half, kSlots}), view(logits, {1, half, kExperts}),
                        view(experts, {1, half, kSlots}), view(load, {kExperts})};
    in[0].data = dgates.data() + first * kSlots;
    in[1].data = logits.data() + first * kExperts;
    in[2].data = experts.data() + first * kSlots;
    const TensorView out[1] = {view(part, {1, half, kExperts})};
    ASSERT_OK(cpu->run(*shared.inst, in, out, StepContext{}));
    for (int64_t i = 0; i < half * kExperts; ++i)
      EXPECT_NEAR(part[i], whole[first * kExperts + i], 1e-15) << i;
  }
  load[1] = -1;
  const TensorView in[4] = {view(dgates, slots), view(logits, all), view(experts, slots),
                            view(load, {kExperts})};
  const Status s = cpu->run(*shared.inst, in, wholeOut, StepContext{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("a load of -1 slots"), std::string::npos) << s.message();
}

/// Every token's first slot goes to expert 0 and its second to expert 1 or 2, none to
/// expert 3: dispatch, the grouped GEMM over uneven groups (one empty) and the combine
/// give y_t = Σ_s g_ts·W[e_ts]·x_t, and backward the gates', the weights' and the
/// tokens' gradients of it; the counts are the routing's.
void unevenRouting(int64_t capacity);

/// With a capacity of 4, expert 0 keeps tokens 0-3's first slots: tokens 4 and 5 lose
/// theirs (no row, nothing combined, no gradient), and the others keep all of theirs.
TEST(MoeLayer, UnevenRoutingAsTokenByToken) {
  for (int64_t capacity : {0, 4}) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    unevenRouting(capacity);
  }
}

void unevenRouting(int64_t capacity) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  const int64_t h = 3, o = 5, n = kTokens * kSlots;
  std::vector<double> x = normals(kTokens * h, 1.0, 7), w = normals(kExperts * o * h, 1.0, 8);
  std::vector<double> gates = normals(n, 1.0, 9), dy = normals(kTokens * o, 1.0, 10);
  std::vector<int32_t> experts(n), counts(kExperts);
  for (int64_t t = 0; t < kTokens; ++t) {
    experts[t * kSlots] = 0;
    experts[t * kSlots + 1] = 1 + static_cast<int32_t>(t % 2);
  }
  // What the kernels must write, even where nothing is routed, starts as garbage.
  std::vector<double> rows(n * h, 7.0), out(n * o), y(kTokens * o), drows(n * o, 7.0),
      dgates(n, 7.0), dx(n * h), dw(kExperts * o * h);
  const std::vector<int64_t> slots = {2, 3, kSlots};
  auto run = [&](Opcode opcode, std::vector<TensorView> in, std::vector<TensorView> outs) {
    MoeInstruction inst(opcode, static_cast<int>(in.size()), static_cast<int>(outs.size()), kSlots,
                        kExperts, 0, false, capacity);
    ASSERT_OK(cpu->run(*inst.inst, in.data(), outs.data(), StepContext{}));
  };
  // Whether slot s of token t keeps its row.
  auto kept = [&](int64_t t, int64_t s) { return !(capacity > 0 && s == 0 && t >= capacity); };
  run(Opcode::MoeDispatch, {view(x, {2, 3, h}), view(experts, slots)},
      {view(rows, {n, h}), view(counts, {kExperts})});
  EXPECT_EQ(counts, (std::vector<int32_t>{capacity > 0 ? 4 : 6, 3, 3, 0}));
  run(Opcode::GroupedLinear, {view(rows, {n, h}), view(counts, {kExperts}), view(w, {kExperts, o, h})},
      {view(out, {n, o})});
  run(Opcode::MoeCombine, {view(out, {n, o}), view(gates, slots), view(experts, slots)},
      {view(y, {2, 3, o})});
  run(Opcode::MoeCombineGrad,
      {view(dy, {2, 3, o}), view(out, {n, o}), view(gates, slots), view(experts, slots)},
      {view(drows, {n, o}), view(dgates, slots)});
  // The rows past the 10 kept ones (4 + 3 + 3) are zero, and so are their gradients.
  for (int64_t i = (capacity > 0 ? 10 : n) * h; i < n * h; ++i)
    EXPECT_EQ(rows[i], 0.0) << "dispatched row element " << i;
  for (int64_t i = (capacity > 0 ? 10 : n) * o; i < n * o; ++i)
    EXPECT_EQ(drows[i], 0.0) << "row gradient element " << i;
  run(Opcode::GroupedLinearGradInput,
      {view(drows, {n, o}), view(counts, {kExperts}), view(w, {kExperts, o, h})},
      {view(dx, {n, h})});
  run(Opcode::GroupedLinearGradWeight,
      {view(drows, {n, o}), view(rows, {n, h}), view(counts, {kExperts})},
      {view(dw, {kExperts, o, h})});
  std::vector<double> wantDw(dw.size(), 0.0);
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t s = 0; s < kSlots; ++s) {
      const int64_t e = experts[t * kSlots + s];
      double dgate = 0;
      for (int64_t r = 0; r < o && kept(t, s); ++r) {
        double product = 0;
        for (int64_t c = 0; c < h; ++c)
          product += w[(e * o + r) * h + c] * x[t * h + c];
        dgate += dy[t * o + r] * product;
        for (int64_t c = 0; c < h; ++c)
          wantDw[(e * o + r) * h + c] += gates[t * kSlots + s] * dy[t * o + r] * x[t * h + c];
      }
      EXPECT_NEAR(dgates[t * kSlots + s], dgate, 1e-12) << "token " << t << " slot " << s;
    }
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t r = 0; r < o; ++r) {
      double want = 0;
      for (int64_t s = 0; s < kSlots; ++s) {
        const int64_t e = experts[t * kSlots + s];
        for (int64_t c = 0; c < h && kept(t, s); ++c)
          want += gates[t * kSlots + s] * w[(e * o + r) * h + c] * x[t * h + c];
      }
      EXPECT_NEAR(y[t * o + r], want, 1e-12) << "token " << t << " output " << r;
    }
  for (size_t i = 0; i < dw.size(); ++i)
    EXPECT_NEAR(dw[i], wantDw[i], 1e-12) << "weight gradient element " << i;
  for (int64_t i = 3 * o * h; i < kExperts * o * h; ++i)
    EXPECT_EQ(dw[i], 0.0) << "expert 3 got no tokens";
  // Back to the tokens: dx_t = Σ_s g_ts·W[e_ts]ᵀ·dy_t.
  std::vector<double> dtokens(kTokens * h);
  run(Opcode::MoeDispatchGrad, {view(dx, {n, h}), view(experts, slots)},
      {view(dtokens, {2, 3, h})});
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t c = 0; c < h; ++c) {
      double want = 0;
      for (int64_t s = 0; s < kSlots; ++s)
        for (int64_t r = 0; r < o && kept(t, s); ++r)
          want += gates[t * kSlots + s] * w[(experts[t * kSlots + s] * o + r) * h + c] *
                  dy[t * o + r];
      EXPECT_NEAR(dtokens[t * h + c], want, 1e-12) << "token " << t << " feature " << c;
    }
}

/// An expert id outside the experts, and counts past the rows, are refused by name: by
/// the dispatch, the grouped GEMM, and the router's gradient without the load-balancing
/// loss (which would otherwise index the logits by it).
TEST(MoeLayer, RoutingOutsideTheExpertsIsRefused) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  // The router's gradient refuses a dropped slot's -1 too: a router never routes one.
  for (int32_t bad : {7, -1}) {
    std::vector<double> dgates(12, 1.0), logits(24, 0.5), dlogits(24);
    std::vector<int32_t> experts(12, 1);
    experts[7] = bad;
    MoeInstruction grad(Opcode::MoeRouterGrad, 3, 1, 2, 4);
    const TensorView in[3] = {view(dgates, {2, 3, 2}), view(logits, {2, 3, 4}),
                              view(experts, {2, 3, 2})};
    const TensorView out[1] = {view(dlogits, {2, 3, 4})};
    Status s = cpu->run(*grad.inst, in, out, StepContext{});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("expert " + std::to_string(bad) + " of 4"), std::string::npos)
        << s.message();
  }
  std::vector<double> x(2 * 3 * 2, 1.0), rows(12 * 2), w(4 * 2 * 2, 1.0), out(12 * 2);
  std::vector<int32_t> experts(12, 1), counts(4);
  experts[5] = 4;
  MoeInstruction dispatch(Opcode::MoeDispatch, 2, 2, 2, 4);
  const TensorView in[2] = {view(x, {2, 3, 2}), view(experts, {2, 3, 2})};
  const TensorView outs[2] = {view(rows, {12, 2}), view(counts, {4})};
  Status s = cpu->run(*dispatch.inst, in, outs, StepContext{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expert 4 of 4"), std::string::npos) << s.message();
  counts = {5, 5, 5, 0};
  MoeInstruction grouped(Opcode::GroupedLinear, 3, 1, 2, 4);
  const TensorView gin[3] = {view(rows, {12, 2}), view(counts, {4}), view(w, {4, 2, 2})};
  const TensorView gout[1] = {view(out, {12, 2})};
  s = cpu->run(*grouped.inst, gin, gout, StepContext{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expert 2's 5 rows, of 12"), std::string::npos) << s.message();
}

/// Megatron's probs policy by hand: 6 tokens of 2 slots, capacity 2. Expert 1 has 5 slots,
/// gates 0.4 (t0 s0), 0.9 (t1 s0), 0.4 (t2 s1), NaN (t3 s0), 0.7 (t4 s1): it keeps the NaN
/// (the largest) and 0.9; expert 2 has t0 s1, t1 s1 and t2 s0, all 0.6: it keeps the
/// earlier two. Expert 3's one slot stays. Then
/// the dispatch gives the dropped slots no row, and the rows past the kept ones are 0.
TEST(MoeLayer, TheProbsPolicyKeepsTheLargestGates) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  const double nan = std::nan("");
  std::vector<double> gates = {0.4, 0.6, 0.9, 0.6, 0.6, 0.4, nan, 0.5, 0.2, 0.7, 0.3, 0.8};
  std::vector<int32_t> experts = {1, 2, 1, 2, 2, 1, 1, 0, 0, 1, 0, 3}, kept(12, 5);
  MoeInstruction drop(Opcode::MoeDrop, 2, 1, 2, 4, 0, false, 2);
  const TensorView in[2] = {view(gates, {1, 6, 2}), view(experts, {1, 6, 2})};
  const TensorView out[1] = {view(kept, {1, 6, 2})};
  ASSERT_OK(cpu->run(*drop.inst, in, out, StepContext{}));
  // Expert 0 (t3 s1 0.5, t4 s0 0.2, t5 s0 0.3) keeps 0.5 and 0.3.
  EXPECT_EQ(kept, (std::vector<int32_t>{-1, 2, 1, 2, -1, -1, 1, 0, -1, -1, 0, 3}));
  std::vector<double> x(6 * 2), rows(12 * 2, 9.0);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<double>(i);
  std::vector<int32_t> counts(4);
  MoeInstruction dispatch(Opcode::MoeDispatch, 2, 2, 2, 4);
  const TensorView din[2] = {view(x, {1, 6, 2}), view(kept, {1, 6, 2})};
  const TensorView dout[2] = {view(rows, {12, 2}), view(counts, {4})};
  ASSERT_OK(cpu->run(*dispatch.inst, din, dout, StepContext{}));
  EXPECT_EQ(counts, (std::vector<int32_t>{2, 2, 2, 1}));
  // By expert, then token: expert 0's t3 and t5, expert 1's t1 and t3, expert 2's t0 and
  // t1, expert 3's t5; the rest 0.
  const std::vector<int> tokens = {3, 5, 1, 3, 0, 1, 5};
  for (size_t r = 0; r < 12; ++r)
    for (int j = 0; j < 2; ++j)
      EXPECT_EQ(rows[r * 2 + j], r < tokens.size() ? x[tokens[r] * 2 + j] : 0.0) << r;
  // An expert below -1 is no expert.
  experts[4] = -2;
  Status s = cpu->run(*drop.inst, in, out, StepContext{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expert -2 of 4"), std::string::npos) << s.message();
}

} // namespace
} // namespace mt
