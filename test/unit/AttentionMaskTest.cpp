// Attention's masks by position (core/SharedMath.h: AttentionMask) against their
// definition, pair by pair: a causal query sees the keys at or before it, and under a
// window of w only the last w of those. The backends take spans of rows from the masks
// (a ring step's share of keys, the queries of a context rank's share), which must be
// exactly the rows whose positions the definition lets through. And the CPU backend's
// fused attention under a window, which runs in blocks of query rows each over its own
// span of keys, against the unfused chain, which masks the whole square.
#include "StatusAssertions.h"
#include "TestInstruction.h"
#include "backends/Backend.h"
#include "core/SharedMath.h"
#include "core/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

namespace mt {
namespace {

bool sees(bool causal, int64_t window, int64_t q, int64_t k) {
  return (!causal || k <= q) && (window == 0 || q - k < window);
}

TEST(AttentionMask, SpansArePositionsTheDefinitionLetsThrough) {
  const int64_t s = 24;
  for (bool causal : {false, true})
    for (int64_t window : {0, 1, 2, 5, 6, 24, 30}) {
      if (window && !causal)
        continue; // a window is causal only (the ops' verifier)
      const AttentionMask mask{causal, window};
      for (int64_t p = 0; p < s; ++p)
        for (int64_t t = 0; t < s; ++t) {
          const bool key = t >= mask.firstKey(p) && t < mask.endKey(p, s);
          const bool query = p >= mask.firstQuery(t) && p < mask.endQuery(t, s);
          EXPECT_EQ(key, sees(causal, window, p, t)) << window << " " << p << " " << t;
          EXPECT_EQ(query, sees(causal, window, p, t)) << window << " " << p << " " << t;
        }
    }
}

/// A ring step: context rank `rank`'s queries against rank `owner`'s keys, each a share
/// of two chunks. The rows a span covers are those the definition lets through.
TEST(AttentionMask, ContextParallelSharesSeeSpansOfRows) {
  for (int64_t cp : {2, 4})
    for (int64_t window : {0, 3, 6, 9})
      for (int rank = 0; rank < cp; ++rank)
        for (int owner = 0; owner < cp; ++owner) {
          const int64_t s = 32, rows = s / cp;
          const SequenceMap queries(rows, 0, 1, rank, static_cast<int>(cp)),
              keys(rows, 0, 1, owner, static_cast<int>(cp));
          const AttentionMask mask{true, window};
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < rows; ++j) {
              const int64_t p = queries(i), t = keys(j);
              const bool key = j >= keys.rowsBefore(mask.firstKey(p), rows) &&
                               j < keys.rowsBefore(mask.endKey(p, s), rows);
              const bool query = i >= queries.rowsBefore(mask.firstQuery(t), rows) &&
                                 i < queries.rowsBefore(mask.endQuery(t, s), rows);
              EXPECT_EQ(key, sees(true, window, p, t))
                  << cp << " " << window << " " << i << " " << j;
              EXPECT_EQ(query, sees(true, window, p, t))
                  << cp << " " << window << " " << i << " " << j;
            }
        }
}

/// FLOPs count a mask's share of the s×s scores as areas: all, half, and the band of a
/// window, which is half again as it spans the sequence.
TEST(AttentionMask, ShareOfTheScores) {
  EXPECT_EQ((AttentionMask{false, 0}.share(1024)), 1.0);
  EXPECT_EQ((AttentionMask{true, 0}.share(1024)), 0.5);
  EXPECT_EQ((AttentionMask{true, 1024}.share(1024)), 0.5);
  EXPECT_EQ((AttentionMask{true, 4096}.share(1024)), 0.5);
  // w = s/4: the band's area is s²/2 − (3s/4)²/2 = 7s²/32.
  EXPECT_DOUBLE_EQ((AttentionMask{true, 256}.share(1024)), 7.0 / 32);
}

/// An f64 tensor of `shape` over `data`, sized to it.
TensorView tensor(std::vector<double> &data, std::vector<int64_t> shape, double phase = -1) {
  TensorView v;
  v.dtype = plan::DType::F64;
  v.rank = static_cast<int>(shape.size());
  for (int d = 0; d < v.rank; ++d)
    v.shape[d] = shape[d];
  data.assign(v.numel(), 0.0);
  for (size_t i = 0; phase >= 0 && i < data.size(); ++i)
    data[i] = std::sin(phase + 0.37 * static_cast<double>(i)) + 0.05 * static_cast<double>(i % 7);
  v.data = data.data();
  return v;
}

/// Windows of 5 (blocks of 5 rows) and 300 (blocks of 256, the largest, whose keys start
/// part way along the sequence) over 600 positions, grouped queries (2 heads sharing a
/// key and value of 8), with dropped probabilities: the fused forward, its row statistics,
/// and the fused backward (from the statistics, and recomputing them) give the unfused
/// chain's output and gradient, in f64.
TEST(WindowedAttention, TheFusedBlocksGiveTheUnfusedChainsResults) {
  const int64_t s = 600, heads = 2, width = (heads + 2) * 8, h = heads * 8;
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  StepContext ctx;
  ctx.seed = 3;
  for (int64_t window : {5, 300})
    for (double rate : {0.0, 0.2}) {
      SCOPED_TRACE(::testing::Message() << "window " << window << ", rate " << rate);
      auto instruction = [&](plan::Opcode opcode, int inputs, int outputs) {
        return test::TestInstruction(opcode, inputs, outputs, [&](plan::InstructionBuilder &b) {
          b.add_heads(heads);
          b.add_kv_heads(1);
          b.add_causal(true);
          b.add_window(window);
          b.add_rate(rate);
          b.add_stream(4);
        });
      };
      std::vector<double> qkv, dy, out, stats, dqkv, dqkvAgain, probs, dropped, context, dprobs,
          ddropped, dv, dqk;
      TensorView fwdIn[] = {tensor(qkv, {1, s, width}, 0.1)};
      TensorView fwdOut[] = {tensor(out, {1, s, h}), tensor(stats, {1, heads, s})};
      ASSERT_OK(cpu->run(*instruction(plan::Opcode::Attention, 1, 2).inst, fwdIn, fwdOut, ctx));
      TensorView grad = tensor(dy, {1, s, h}, 0.7);
      TensorView bwdIn[] = {grad, fwdIn[0], fwdOut[0], fwdOut[1]};
      TensorView bwdOut[] = {tensor(dqkv, {1, s, width})},
                 again[] = {tensor(dqkvAgain, {1, s, width})};
      ASSERT_OK(cpu->run(*instruction(plan::Opcode::AttentionGrad, 4, 1).inst, bwdIn, bwdOut, ctx));
      ASSERT_OK(cpu->run(*instruction(plan::Opcode::AttentionGrad, 3, 1).inst, bwdIn, again, ctx));

      // The chain: probabilities, their dropout, the context; back through each.
      TensorView p = tensor(probs, {1, heads, s, s}), pd = tensor(dropped, {1, heads, s, s});
      TensorView y = tensor(context, {1, s, h});
      ASSERT_OK(cpu->run(*instruction(plan::Opcode::AttentionProbs, 1, 1).inst, fwdIn, &p, ctx));
      TensorView pv = p;
      if (rate > 0) {
        ASSERT_OK(cpu->run(*instruction(plan::Opcode::Dropout, 1, 1).inst, &p, &pd, ctx));
        pv = pd;
      }
      TensorView ctxIn[] = {pv, fwdIn[0]};
      ASSERT_OK(cpu->run(*instruction(plan::Opcode::AttentionContext, 2, 1).inst, ctxIn, &y, ctx));
      TensorView cgIn[] = {grad, pv, fwdIn[0]};
      TensorView cgOut[] = {tensor(dprobs, {1, heads, s, s}), tensor(dv, {1, s, width})};
      ASSERT_OK(
          cpu->run(*instruction(plan::Opcode::AttentionContextGrad, 3, 2).inst, cgIn, cgOut, ctx));
      TensorView dp = cgOut[0];
      if (rate > 0) {
        dp = tensor(ddropped, {1, heads, s, s});
        ASSERT_OK(cpu->run(*instruction(plan::Opcode::DropoutGrad, 1, 1).inst, cgOut, &dp, ctx));
      }
      TensorView pgIn[] = {dp, p, fwdIn[0]};
      TensorView pgOut = tensor(dqk, {1, s, width});
      ASSERT_OK(
          cpu->run(*instruction(plan::Opcode::AttentionProbsGrad, 3, 1).inst, pgIn, &pgOut, ctx));

      for (int64_t i = 0; i < s * h; ++i)
        ASSERT_NEAR(out[i], context[i], 1e-12 * (1 + std::fabs(context[i]))) << "output " << i;
      for (int64_t i = 0; i < s * width; ++i) {
        const double want = dv[i] + dqk[i];
        ASSERT_NEAR(dqkv[i], want, 1e-11 * (1 + std::fabs(want))) << "gradient " << i;
        ASSERT_NEAR(dqkvAgain[i], want, 1e-11 * (1 + std::fabs(want))) << "gradient " << i;
      }
    }
}

} // namespace
} // namespace mt
