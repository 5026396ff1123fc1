// The estimator's cost model: its exact parts (bytes a ring sends, the placement of
// groups on links, matrix-product waves) and its sanity (bigger products are no less
// efficient; more GPUs for the same batch are never slower), on systems/*.json and on a
// lowered gpt-tiny.
#include "compiler/Estimate.h"
#include "compiler/GemmModel.h"
#include "compiler/Registration.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

using namespace mtc;

namespace {

SystemSpec a100() {
  SystemSpec s;
  std::string error;
  EXPECT_TRUE(SystemSpec::load(systemPath("dgx-a100-80gb"), s, error)) << error;
  return s;
}
/// The A100 at its datasheet's rates: the tile-and-wave model's shape alone.
SystemSpec a100AtDatasheetRates() {
  SystemSpec s = a100();
  s.gemmEfficiency = s.memoryEfficiency = 1;
  return s;
}

TEST(CostModel, ARingSendsWhatTheTextbookSays) {
  // All-reduce: reduce-scatter then all-gather, 2(n−1) steps of bytes/n each.
  EXPECT_EQ(ringBytesSent(Collective::AllReduce, 800, 8), 1400);
  EXPECT_EQ(ringBytesSent(Collective::AllGather, 800, 8), 700);
  EXPECT_EQ(ringBytesSent(Collective::ReduceScatter, 800, 8), 700);
  EXPECT_EQ(ringBytesSent(Collective::AllReduce, 800, 1), 0);
  Link link{100e9, 2e-6};
  EXPECT_DOUBLE_EQ(collectiveSeconds(Collective::AllReduce, 800e6, 8, link),
                   1400e6 / 100e9 + 14 * 2e-6);
  EXPECT_DOUBLE_EQ(collectiveSeconds(Collective::AllGather, 800e6, 4, link),
                   600e6 / 100e9 + 3 * 2e-6);
  EXPECT_EQ(collectiveSeconds(Collective::AllReduce, 800e6, 1, link), 0.0);
}

TEST(CostModel, WholeWavesOfTilesRunAtThePeakAndOneTileMoreTakesAWave) {
  SystemSpec s = a100AtDatasheetRates();
  const int64_t k = 8192;
  // 108 SMs: 12 x 9 tiles of 256 x 128 fill one wave.
  mlir::mt::GemmShape full{1, 12 * s.tileM, 9 * s.tileN, k};
  EXPECT_NEAR(static_cast<double>(full.flops()) / gemmSeconds(s, full, "bf16", 2),
              s.peakBf16 * s.gemmEfficiency, 1e3);
  mlir::mt::GemmShape oneMore{1, 12 * s.tileM + 1, 9 * s.tileN, k};
  EXPECT_DOUBLE_EQ(gemmSeconds(s, oneMore, "bf16", 2), 2 * gemmSeconds(s, full, "bf16", 2));
  // A product over a short k is bound by its bytes, not its FLOPs.
  mlir::mt::GemmShape shallow{1, 8192, 8192, 16};
  EXPECT_DOUBLE_EQ(gemmSeconds(s, shallow, "bf16", 2),
                   2.0 * (8192 * 16 * 2 + 8192.0 * 8192) / s.memoryBandwidth);
  // A thin one computes a whole tile per row of tiles: one wave here.
  mlir::mt::GemmShape thin{1, 1, 4096, 4096};
  EXPECT_DOUBLE_EQ(gemmSeconds(s, thin, "bf16", 2),
                   2.0 * s.tileM * s.tileN * 4096 / (s.peakBf16 / s.multiprocessors));
}

TEST(CostModel, AMaskedKernelComputesTheBlocksItsMaskKeepsAPairOf) {
  EXPECT_DOUBLE_EQ(blockShare(1024, 128, true), 36.0 / 64); // 8 x 8 blocks, 36 kept
  EXPECT_DOUBLE_EQ(blockShare(129, 128, true), 3.0 / 4);
  EXPECT_DOUBLE_EQ(blockShare(100, 128, true), 1.0); // one block: the diagonal's
  EXPECT_NEAR(blockShare(1 << 20, 128, true), 0.5, 1e-3);
  EXPECT_DOUBLE_EQ(blockShare(1024, 128, false), 1.0);
  // A window of 512 keys over 16 x 16 blocks: the diagonal and the 4 below it, whose
  // nearest pairs are 1, 129, 257 and 385 apart (the fifth's, 513, is not within it).
  EXPECT_DOUBLE_EQ(blockShare(2048, 128, true, 512), (16.0 + 15 + 14 + 13 + 12) / 256);
  EXPECT_DOUBLE_EQ(blockShare(2048, 128, true, 513), (16.0 + 15 + 14 + 13 + 12) / 256);
  EXPECT_DOUBLE_EQ(blockShare(2048, 128, true, 514), (16.0 + 15 + 14 + 13 + 12 + 11) / 256);
  EXPECT_DOUBLE_EQ(blockShare(1024, 128, true, 1), 8.0 / 64); // the diagonal's alone
}

TEST(CostModel, BiggerSquareProductsAreNoLessEfficient) {
  SystemSpec s = a100AtDatasheetRates();
  double previous = 0;
  for (int64_t n = 128; n <= 32768; n *= 2) {
    mlir::mt::GemmShape g{1, n, n, n};
    const double efficiency =
        static_cast<double>(g.flops()) / gemmSeconds(s, g, "bf16", 2) / s.peakBf16;
    EXPECT_GE(efficiency, previous) << n;
    EXPECT_LE(efficiency, 1.0);
    previous = efficiency;
  }
  EXPECT_GT(previous, 0.9);
}

/// A system file of a100()'s with `table` as gpu.gemm_table.
std::string withGemmTable(const std::string &table) {
  std::ifstream in(systemPath("dgx-a100-80gb"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"gemm_tile\"";
  return text.insert(text.find(key), "\"gemm_table\": " + table + ", ");
}

TEST(CostModel, AMeasuredTableCostsSingle16BitProductsBetweenItsPoints) {
  // Rates over dims {256, 1024} in the order [m][n][k], each point its own:
  // (256, 256, 256) 10 TFLOP/s, (256, 256, 1024) 11, (256, 1024, 256) 12, ... (1024,
  // 1024, 1024) 80.
  SystemSpec s;
  std::string error;
  ASSERT_TRUE(SystemSpec::parse(
      withGemmTable(R"({"dims": [256, 1024], "tflops": [10, 11, 12, 13, 40, 41, 42, 80]})"), s,
      error))
      << error;
  auto rate = [&](int64_t batch, int64_t m, int64_t n, int64_t k, const char *type = "bf16") {
    mlir::mt::GemmShape g{batch, m, n, k};
    return static_cast<double>(g.flops()) / gemmSeconds(s, g, type, 2);
  };
  auto near = [](double a, double b) { return std::abs(a - b) <= 1e-9 * b; };
  EXPECT_PRED2(near, rate(1, 256, 256, 256), 10e12);
  EXPECT_PRED2(near, rate(1, 256, 256, 1024), 11e12);
  EXPECT_PRED2(near, rate(1, 256, 1024, 256), 12e12);
  EXPECT_PRED2(near, rate(1, 1024, 256, 256), 40e12);
  EXPECT_PRED2(near, rate(1, 1024, 1024, 1024), 80e12);
  // Half way in logarithms: the geometric mean; beyond the grid: its edge.
  EXPECT_PRED2(near, rate(1, 512, 256, 256), 20e12);
  EXPECT_PRED2(near, rate(1, 1024, 1024, 512), std::sqrt(42e12 * 80e12));
  EXPECT_PRED2(near, rate(1, 1 << 20, 4096, 1 << 16), 80e12);
  EXPECT_PRED2(near, rate(1, 4096, 4096, 4096, "f16"), 80e12);
  // Below the grid a product costs as the grid's smallest point.
  mlir::mt::GemmShape small{1, 64, 100, 128}, smallest{1, 256, 256, 256};
  EXPECT_EQ(gemmSeconds(s, small, "bf16", 2), gemmSeconds(s, smallest, "bf16", 2));
  // Batched products (attention's) and other types keep the tile-and-wave model.
  SystemSpec plain = a100();
  for (auto [batch, type] : {std::pair{8, "bf16"}, std::pair{1, "f32"}}) {
    mlir::mt::GemmShape g{batch, 1024, 1024, 1024};
    EXPECT_EQ(gemmSeconds(s, g, type, 2), gemmSeconds(plain, g, type, 2)) << type;
  }
}

TEST(CostModel, AMalformedGemmTableIsRefusedByItsPath) {
  const std::pair<const char *, const char *> cases[] = {
      {R"({"dims": [256], "tflops": [1]})", "'gpu.gemm_table.dims' must hold 2 to 64"},
      {R"({"dims": [1024, 256], "tflops": [1, 1, 1, 1, 1, 1, 1, 1]})",
       "'gpu.gemm_table.dims' must be ascending positive integers"},
      {R"({"dims": [256, 1024], "tflops": [1, 1, 1, 1, 1, 1, 1]})",
       "'gpu.gemm_table.tflops' must hold a rate for each m, n and k of 'dims': 8"},
      {R"({"dims": [256, 1024], "tflops": [1, 1, 1, 1, 1, 1, 1, 0]})",
       "'gpu.gemm_table.tflops' must be numbers in [1e-6, 1e9]"},
      {R"({"dims": [256, 1024]})", "'gpu.gemm_table.tflops' is missing"},
      {R"({"dims": [256, 1024], "tflops": [1, 1, 1, 1, 1, 1, 1, 1], "n": 1})",
       "'gpu.gemm_table.n' is not a field"},
  };
  for (auto [table, message] : cases) {
    SystemSpec s;
    std::string error;
    EXPECT_FALSE(SystemSpec::parse(withGemmTable(table), s, error)) << table;
    EXPECT_NE(error.find(message), std::string::npos) << error;
  }
}

TEST(CostModel, GroupsStayOnNvlinkWhileTheyFitInANode) {
  SystemSpec s = a100();
  auto placed = [&](int64_t tp, int64_t dp, int64_t pp) {
    StepLayout l;
    l.options.tp = tp;
    l.options.dp = dp;
    l.options.pp = pp;
    return placeGroups(s, l);
  };
  Placement p = placed(8, 4, 2);
  EXPECT_EQ(p.tensor.bandwidth, s.intraNode.bandwidth);
  EXPECT_EQ(p.data.bandwidth, s.interNode.bandwidth);
  EXPECT_EQ(p.pipeline.bandwidth, s.interNode.bandwidth);
  p = placed(2, 2, 2);
  EXPECT_EQ(p.tensor.bandwidth, s.intraNode.bandwidth);
  EXPECT_EQ(p.data.bandwidth, s.intraNode.bandwidth);
  EXPECT_EQ(p.pipeline.bandwidth, s.intraNode.bandwidth);
  EXPECT_EQ(placed(16, 2, 2).tensor.bandwidth, s.interNode.bandwidth);
  // Groups that do not divide a node stay in it while the whole job does (6 of 8)...
  p = placed(3, 2, 1);
  EXPECT_EQ(p.tensor.bandwidth, s.intraNode.bandwidth);
  EXPECT_EQ(p.data.bandwidth, s.intraNode.bandwidth);
  // ... and cross nodes when blocks of 3 straddle them (24 ranks on nodes of 8).
  EXPECT_EQ(placed(3, 8, 1).tensor.bandwidth, s.interNode.bandwidth);
}

struct LoweredTest : ::testing::Test {
  LoweredTest() : context(registry()) { context.loadAllAvailableDialects(); }
  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry r;
    registerAll(r);
    return r;
  }
  /// The ops with results of `source`'s functions, in order (the module kept in `held`).
  std::vector<mlir::Operation *> opsOf(llvm::StringRef source) {
    held = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
    std::vector<mlir::Operation *> ops;
    if (held)
      held->walk([&](mlir::Operation *op) {
        if (op->getNumResults() > 0)
          ops.push_back(op);
      });
    return ops;
  }
  /// A zoo model's (gpt-tiny's) step lowered under `layout`; null where it fails.
  mlir::OwningOpRef<mlir::ModuleOp> lowered(const StepLayout &layout,
                                            const std::string &model = "gpt-tiny") {
    mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceFile<mlir::ModuleOp>(
        std::string(MTC_MODELS_DIR "/") + model + ".mlir", &context);
    if (!module || mlir::failed(prepareModel(*module, layout.options)) ||
        mlir::failed(lowerToTrainStep(*module, layout.options)))
      return nullptr;
    return module;
  }
  /// Its step estimated on `system`.
  StepEstimate estimate(const StepLayout &layout, const SystemSpec &system,
                        const std::string &model = "gpt-tiny") {
    mlir::OwningOpRef<mlir::ModuleOp> module = lowered(layout, model);
    EXPECT_TRUE(module);
    if (!module)
      return {};
    StepEstimate e;
    EXPECT_EQ(estimateStep(profileChunks(*module, system, layout.options), system, layout, e),
              "");
    return e;
  }
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> held; // opsOf's, destroyed before the context
};

// Within a node; across nodes, gpt-tiny's step is so short that the network's latency
// outweighs the halved work, as it should.
TEST_F(LoweredTest, MoreDataParallelGpusForTheSameBatchAreNeverSlower) {
  SystemSpec s = a100();
  for (bool distributed : {false, true}) {
    double previous = 1e30;
    for (int64_t dp : {1, 2, 4}) {
      StepLayout l;
      l.options.microBatchSize = 1;
      l.options.globalBatchSize = 64;
      l.options.tp = 2;
      l.options.dp = dp;
      l.options.precision = "bf16";
      l.distributedOptimizer = distributed && dp > 1;
      const double iteration = estimate(l, s).iteration;
      EXPECT_LE(iteration, previous) << "dp " << dp;
      previous = iteration;
    }
  }
}

TEST_F(LoweredTest, TheModelsFlopsAreTheCompilersAndThePartsAddUp) {
  SystemSpec s = a100();
  StepLayout l;
  l.options.microBatchSize = 2;
  l.options.globalBatchSize = 16;
  l.options.tp = 2;
  l.options.pp = 2;
  l.options.dp = 2;
  l.options.sequenceParallel = true;
  l.options.precision = "bf16";
  StepEstimate e = estimate(l, s);
  // Megatron's formula for gpt-tiny (l 2, h 64, V 512, s 32) at B = 16.
  DecoderShape g;
  g.layers = 2;
  g.hidden = 64;
  g.vocab = 512;
  g.heads = 4;
  g.kvHeads = 4;
  g.headDim = 16;
  g.ffn = 256;
  EXPECT_TRUE(e.modelFlops == decoderModelFlops(g, 16, 32));
  const StepEstimate::Parts &p = e.parts;
  EXPECT_NEAR(p.forward + p.backward + p.recompute + p.tensorParallel + p.sequenceParallel +
                  p.host + p.pipeline + p.gradients + p.optimizer,
              e.iteration, 1e-12);
  EXPECT_GT(p.pipeline, 0.0);
  EXPECT_GT(p.sequenceParallel, 0.0);
}

// Fused attention costs what the CUDA backend runs. Through cuDNN (bf16, no context-
// parallel share): flash kernels on tensor cores, blocks above the diagonal skipped under
// a causal mask (and those beyond a sliding window), a backward that runs the forward
// again before its own five products, and where probabilities are dropped, our keep mask
// written and read by each call. Otherwise mtrun's kernels on CUDA cores: rows up to
// their last key, 2 products forward and 8 backward.
TEST_F(LoweredTest, FusedAttentionCostsWhatTheCudaBackendRuns) {
  SystemSpec s = a100();
  s.kernelOverhead = 3e-6;
  const std::vector<mlir::Operation *> ops = opsOf(R"(
    func.func @f(%qkv: tensor<2x2048x3072xbf16>, %dy: tensor<2x2048x1024xbf16>, %gqkv: tensor<2x2048x1536xbf16>) {
      %c = mt.attention %qkv {causal, heads = 16 : i64} : (tensor<2x2048x3072xbf16>) -> tensor<2x2048x1024xbf16>
      %g = mt.attention_grad %dy, %qkv, %c {causal, heads = 16 : i64} : (tensor<2x2048x1024xbf16>, tensor<2x2048x3072xbf16>, tensor<2x2048x1024xbf16>) -> tensor<2x2048x3072xbf16>
      %f = mt.attention %qkv {heads = 16 : i64} : (tensor<2x2048x3072xbf16>) -> tensor<2x2048x1024xbf16>
      %h = mt.attention_grad %dy, %qkv, %f {heads = 16 : i64} : (tensor<2x2048x1024xbf16>, tensor<2x2048x3072xbf16>, tensor<2x2048x1024xbf16>) -> tensor<2x2048x3072xbf16>
      %d = mt.attention %qkv {causal, dropout = 1.000000e-01 : f64, heads = 16 : i64, stream = 1 : i64} : (tensor<2x2048x3072xbf16>) -> tensor<2x2048x1024xbf16>
      %e = mt.attention_grad %dy, %qkv, %d {causal, dropout = 1.000000e-01 : f64, heads = 16 : i64, stream = 1 : i64} : (tensor<2x2048x1024xbf16>, tensor<2x2048x3072xbf16>, tensor<2x2048x1024xbf16>) -> tensor<2x2048x3072xbf16>
      %w = mt.attention %qkv {causal, heads = 16 : i64, window = 512 : i64} : (tensor<2x2048x3072xbf16>) -> tensor<2x2048x1024xbf16>
      %x = mt.attention_grad %dy, %qkv, %w {causal, heads = 16 : i64, window = 512 : i64} : (tensor<2x2048x1024xbf16>, tensor<2x2048x3072xbf16>, tensor<2x2048x1024xbf16>) -> tensor<2x2048x3072xbf16>
      %y = mt.attention %qkv {causal, dropout = 1.000000e-01 : f64, heads = 16 : i64, stream = 2 : i64, window = 512 : i64} : (tensor<2x2048x3072xbf16>) -> tensor<2x2048x1024xbf16>
      %q = mt.attention %gqkv {causal, heads = 16 : i64, kv_heads = 4 : i64} : (tensor<2x2048x1536xbf16>) -> tensor<2x2048x1024xbf16>
      %r = mt.attention_grad %dy, %gqkv, %q {causal, heads = 16 : i64, kv_heads = 4 : i64} : (tensor<2x2048x1024xbf16>, tensor<2x2048x1536xbf16>, tensor<2x2048x1024xbf16>) -> tensor<2x2048x1536xbf16>
      %z = mt.attention %qkv {causal, context_parallel = 2 : i64, heads = 16 : i64} : (tensor<2x2048x3072xbf16>) -> tensor<2x1024x1024xbf16>
      return
    })");
  ASSERT_TRUE(held);
  // 32 products each (batch 2 x 16 heads): QKᵀ is 2048 x 2048 over 64, P·V 2048 x 64
  // over 2048; the scores stay on chip, so each product costs its waves of tiles, not the
  // bytes of a 2048 x 2048 result (which would bind QKᵀ here).
  auto waves = [&](int64_t m, int64_t n, int64_t k) {
    return ::mt::gemmWaveSeconds(32, m, n, k, s.tileM, s.tileN, s.multiprocessors,
                                 s.peakBf16 * s.gemmEfficiency);
  };
  const double scores = waves(2048, 2048, 64), values = waves(2048, 64, 2048);
  ASSERT_LT(scores, gemmSeconds(s, {32, 2048, 2048, 64}, "bf16", 2));
  const double causal = 17.0 / 32; // 16 x 16 blocks of 128, 136 kept
  ASSERT_EQ(ops.size(), 12u);
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[0], s), 3e-6 + causal * (scores + values));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[1], s), 2 * 3e-6 + causal * (3 * scores + 4 * values));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[2], s), 3e-6 + scores + values);
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[3], s), 2 * 3e-6 + 3 * scores + 4 * values);
  // Dropped probabilities: cuDNN's, each call after a launch writing the keep mask,
  // 2 x 16 heads x 2048² in bf16, whose blocks each of cuDNN's kernels reads where it
  // computes (backward's two here: the forward again, then its own).
  const int64_t keep = int64_t{2} * 16 * 2048 * 2048 * 2;
  const double mask = memorySeconds(s, keep);
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[4], s),
                   3e-6 + (3e-6 + mask + causal * mask) + causal * (scores + values));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[5], s), 2 * 3e-6 + (3e-6 + mask + 2 * causal * mask) +
                                                 causal * (3 * scores + 4 * values));
  // A sliding window of 512 keys: cuDNN's blocks near the diagonal, 70 of the 256.
  const double band = 70.0 / 256;
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[6], s), 3e-6 + band * (scores + values));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[7], s), 2 * 3e-6 + band * (3 * scores + 4 * values));
  // Dropped within the window: cuDNN's band, and the keep mask's.
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[8], s),
                   3e-6 + (3e-6 + mask + band * mask) + band * (scores + values));
  // Grouped-query heads (4 of 16 keys and values): cuDNN's, with the queries copied to
  // a packed [2, 2048, 1024] by each of its graphs' runs, forward's again before the
  // backward here (no kept statistics), whose dQ is copied back: each copy a launch, read
  // and written.
  const double copy = 3e-6 + memorySeconds(s, 2 * int64_t{2} * 2048 * 1024 * 2);
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[9], s), 3e-6 + copy + causal * (scores + values));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[10], s),
                   2 * 3e-6 + 3 * copy + causal * (3 * scores + 4 * values));
  // A context-parallel share of the queries (1024 rows of each sequence's 2048), which
  // cuDNN is not given: our kernels, its rows' causal share of the keys, 2 x 32 x 2048²
  // x 64 FLOPs a product over the whole square.
  const double product = 2.0 * 32 * 2048 * 2048 * 64 / s.peakFp32;
  const double rows = 2049.0 / 4096;
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[11], s), 3e-6 + rows * 2 * product / 2);
  // cuDNN's workspace beyond the plan: backward's dP, 2 x 16 heads x 2048² in bf16, with
  // each row's sum in f32, grouped queries packed (and their gradient), and the keep
  // mask where probabilities are dropped; none for what our kernels run.
  const int64_t dp = int64_t{2} * 16 * 2048 * (2048 * 2 + 4), packed = int64_t{2} * 2048 * 1024 * 2;
  EXPECT_EQ(attentionWorkspaceBytes(ops[0]), 0);
  EXPECT_EQ(attentionWorkspaceBytes(ops[1]), dp);
  EXPECT_EQ(attentionWorkspaceBytes(ops[4]), keep);
  EXPECT_EQ(attentionWorkspaceBytes(ops[5]), keep + dp);
  EXPECT_EQ(attentionWorkspaceBytes(ops[9]), packed);
  EXPECT_EQ(attentionWorkspaceBytes(ops[10]), dp + 2 * packed);
  EXPECT_EQ(attentionWorkspaceBytes(ops[11]), 0);
}

// A GELU epilogue costs one kernel in 16 bits (cuBLASLt's epilogue), and in f32 exactly
// what the unfused pair costs: the CUDA backend runs the GEMM, then GELU's kernel.
TEST_F(LoweredTest, GeluEpiloguesCostWhatTheCudaBackendRuns) {
  SystemSpec s = a100();
  s.kernelOverhead = 3e-6;
  for (const char *type : {"f32", "bf16"}) {
    SCOPED_TRACE(type);
    const std::string t = type;
    auto ty = [&](const char *shape) { return "tensor<" + std::string(shape) + "x" + t + ">"; };
    const std::string source =
        "func.func @f(%x: " + ty("4x512x1024") + ", %w: " + ty("4096x1024") + ", %b: " +
        ty("4096") + ", %w2: " + ty("1024x4096") + ", %dy: " + ty("4x512x1024") + ") {\n" +
        "  %h = mt.linear %x, %w, %b : (" + ty("4x512x1024") + ", " + ty("4096x1024") + ", " +
        ty("4096") + ") -> " + ty("4x512x4096") + "\n" +
        "  %a = mt.gelu %h : (" + ty("4x512x4096") + ") -> " + ty("4x512x4096") + "\n" +
        "  %p, %g = mt.linear_gelu %x, %w, %b : (" + ty("4x512x1024") + ", " + ty("4096x1024") +
        ", " + ty("4096") + ") -> (" + ty("4x512x4096") + ", " + ty("4x512x4096") + ")\n" +
        "  %d = mt.linear_grad_input %dy, %w2 : (" + ty("4x512x1024") + ", " + ty("1024x4096") +
        ") -> " + ty("4x512x4096") + "\n" +
        "  %dh = mt.gelu_grad %d, %h : (" + ty("4x512x4096") + ", " + ty("4x512x4096") + ") -> " +
        ty("4x512x4096") + "\n" +
        "  %f = mt.linear_grad_input_gelu %dy, %w2, %h : (" + ty("4x512x1024") + ", " +
        ty("1024x4096") + ", " + ty("4x512x4096") + ") -> " + ty("4x512x4096") + "\n" +
        "  return\n}\n";
    const std::vector<mlir::Operation *> ops = opsOf(source);
    ASSERT_TRUE(held);
    ASSERT_EQ(ops.size(), 6u);
    const double forwardPair = kernelSeconds(ops[0], s) + kernelSeconds(ops[1], s);
    const double backwardPair = kernelSeconds(ops[3], s) + kernelSeconds(ops[4], s);
    if (t == "f32") {
      EXPECT_DOUBLE_EQ(kernelSeconds(ops[2], s), forwardPair);
      EXPECT_DOUBLE_EQ(kernelSeconds(ops[5], s), backwardPair);
    } else {
      // One launch, and neither the pre-activation nor dy·W read back.
      const int64_t x = 4 * 512 * 1024 * 2, w = 4096 * 1024 * 2, bias = 4096 * 2,
                    h = 4 * 512 * 4096 * 2;
      EXPECT_DOUBLE_EQ(kernelSeconds(ops[2], s),
                       std::max(kernelSeconds(ops[0], s),
                                3e-6 + memorySeconds(s, x + w + bias + 2 * h)));
      EXPECT_LT(kernelSeconds(ops[2], s), forwardPair - 3e-6);
      EXPECT_LT(kernelSeconds(ops[5], s), backwardPair - 3e-6);
    }
  }
}

// A bias gradient summed by its weight gradient's GEMM (cuBLASLt's BGRADB) costs that
// GEMM, reading dy once: less than the pair. Accumulating, the CUDA backend adds the
// epilogue's f32 sums into the parameter's gradient with a kernel of its own.
TEST_F(LoweredTest, TheBiasGradientEpilogueCostsWhatTheCudaBackendRuns) {
  SystemSpec s = a100();
  s.kernelOverhead = 3e-6;
  const std::vector<mlir::Operation *> ops = opsOf(R"(
    func.func @f(%dy: tensor<4x512x4096xbf16>, %x: tensor<4x512x1024xbf16>) {
      %w = mt.linear_grad_weight %dy, %x : (tensor<4x512x4096xbf16>, tensor<4x512x1024xbf16>) -> tensor<4096x1024xbf16>
      %b = mt.bias_grad %dy : (tensor<4x512x4096xbf16>) -> tensor<4096xbf16>
      %fw, %fb = mt.linear_grad_weight_bias %dy, %x : (tensor<4x512x4096xbf16>, tensor<4x512x1024xbf16>) -> (tensor<4096x1024xbf16>, tensor<4096xbf16>)
      %aw = mt.linear_grad_weight %dy, %x {accumulate} : (tensor<4x512x4096xbf16>, tensor<4x512x1024xbf16>) -> tensor<4096x1024xf32>
      mt.param_grad "w", %aw : tensor<4096x1024xf32>
      %gw, %gb = mt.linear_grad_weight_bias %dy, %x {accumulate} : (tensor<4x512x4096xbf16>, tensor<4x512x1024xbf16>) -> (tensor<4096x1024xf32>, tensor<4096xf32>)
      mt.param_grad "w2", %gw : tensor<4096x1024xf32>
      mt.param_grad "b2", %gb : tensor<4096xf32>
      return
    })");
  ASSERT_TRUE(held);
  ASSERT_EQ(ops.size(), 5u);
  const int64_t dy = 4 * 512 * 4096 * 2, x = 4 * 512 * 1024 * 2, dw = 4096 * 1024 * 2,
                db = 4096 * 2;
  const double weight = kernelSeconds(ops[0], s), pair = weight + kernelSeconds(ops[1], s);
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[2], s),
                   3e-6 + std::max(weight - 3e-6, memorySeconds(s, dy + x + dw + db)));
  EXPECT_LT(kernelSeconds(ops[2], s), pair - 3e-6);
  // Accumulated: the f32 gradients read and written, and the sums' kernel: its launch,
  // the scratch read, the gradient read and written.
  const double accumulated = kernelSeconds(ops[3], s);
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[4], s),
                   2 * 3e-6 +
                       std::max(accumulated - 3e-6,
                                memorySeconds(s, dy + x + 2 * (2 * dw) + 2 * (2 * db))) +
                       memorySeconds(s, 3 * (2 * db)));
}

// An odd vocabulary's LM head (50,257 classes): its logits' rows, and dy's, are not a whole
// number of 16 bytes in bf16 or f32, and the CUDA backend copies them to rows padded to
// 16 bytes around its GEMMs (50,264 in bf16, 50,260 in f32), a GEMM rereading the copy
// of dy the instruction just before it made; 50,304 classes need no copy.
// On a GPU each pipeline stage holds the CUDA backend's buffers for its own kernels: under
// pp 2 the odd vocabulary's copies only on the last stage (1 x 64 tokens of 50,264 bf16
// values), cuDNN's dP on both (12 heads x 64² in bf16 and a row sum of 64 in f32 each).
TEST_F(LoweredTest, EachStageHoldsItsOwnWorkspaces) {
  StepLayout l;
  l.options.microBatchSize = 1;
  l.options.globalBatchSize = 2;
  l.options.pp = 2;
  l.options.seqLength = 64;
  l.options.vocabMultiple = 1;
  l.options.attentionDropout = 0;
  l.options.precision = "bf16";
  const StepEstimate e = estimate(l, a100(), "gpt2-124m");
  ASSERT_EQ(e.account.stages.size(), 2u);
  const int64_t dp = int64_t{12} * 64 * (64 * 2 + 4), staging = int64_t{64} * 50264 * 2;
  const int64_t first = e.account.stages[0].total() + dp,
                last = e.account.stages[1].total() + dp + staging;
  EXPECT_EQ(e.gpuBytes, std::max(first, last));
  EXPECT_EQ(e.workspaceBytes, first > last ? dp : dp + staging);
}

// A runtime that materializes attention's scores (Megatron-LM before flash attention):
// batched products on tensor cores over the whole square whatever the mask, the scores
// [2, 16, 2048, 2048] in bf16 written and read between memory-bound kernels: softmax
// (2 bytes a score each way), dropout where the fused op drops (and a byte of mask),
// backward softmax's gradient (3 x 2 bytes) and dropout's (2 x 2 + 1). The unfused
// plan's ops cost the same products and passes, its dropout being an op of its own.
TEST_F(LoweredTest, MaterializedAttentionCostsItsProductsAndItsScoresPasses) {
  SystemSpec s = a100();
  s.kernelOverhead = 3e-6;
  s.runtime.materializedAttention = true;
  const std::vector<mlir::Operation *> ops = opsOf(R"(
    func.func @f(%qkv: tensor<2x2048x3072xbf16>, %dy: tensor<2x2048x1024xbf16>, %p: tensor<2x16x2048x2048xbf16>) {
      %c = mt.attention %qkv {causal, heads = 16 : i64} : (tensor<2x2048x3072xbf16>) -> tensor<2x2048x1024xbf16>
      %g = mt.attention_grad %dy, %qkv, %c {causal, heads = 16 : i64} : (tensor<2x2048x1024xbf16>, tensor<2x2048x3072xbf16>, tensor<2x2048x1024xbf16>) -> tensor<2x2048x3072xbf16>
      %d = mt.attention %qkv {causal, dropout = 1.000000e-01 : f64, heads = 16 : i64, stream = 1 : i64} : (tensor<2x2048x3072xbf16>) -> tensor<2x2048x1024xbf16>
      %e = mt.attention_grad %dy, %qkv, %d {causal, dropout = 1.000000e-01 : f64, heads = 16 : i64, stream = 1 : i64} : (tensor<2x2048x1024xbf16>, tensor<2x2048x3072xbf16>, tensor<2x2048x1024xbf16>) -> tensor<2x2048x3072xbf16>
      %probs = mt.attention_probs %qkv {causal, heads = 16 : i64} : (tensor<2x2048x3072xbf16>) -> tensor<2x16x2048x2048xbf16>
      %ctx = mt.attention_context %p, %qkv : (tensor<2x16x2048x2048xbf16>, tensor<2x2048x3072xbf16>) -> tensor<2x2048x1024xbf16>
      %dp, %dv = mt.attention_context_grad %dy, %p, %qkv : (tensor<2x2048x1024xbf16>, tensor<2x16x2048x2048xbf16>, tensor<2x2048x3072xbf16>) -> (tensor<2x16x2048x2048xbf16>, tensor<2x2048x3072xbf16>)
      %dqk = mt.attention_probs_grad %p, %p, %qkv : (tensor<2x16x2048x2048xbf16>, tensor<2x16x2048x2048xbf16>, tensor<2x2048x3072xbf16>) -> tensor<2x2048x3072xbf16>
      return
    })");
  ASSERT_TRUE(held);
  ASSERT_EQ(ops.size(), 8u); // %dp, %dv: one op
  const double scores = 3e-6 + gemmSeconds(s, {32, 2048, 2048, 64}, "bf16", 2),
               values = 3e-6 + gemmSeconds(s, {32, 2048, 64, 2048}, "bf16", 2);
  auto pass = [&](int64_t bytesPerScore) {
    return 3e-6 + memorySeconds(s, bytesPerScore * int64_t{32} * 2048 * 2048);
  };
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[0], s), scores + values + pass(4));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[1], s), scores + 3 * values + pass(6));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[2], s), scores + values + pass(4) + pass(5));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[3], s), scores + 3 * values + pass(6) + pass(5));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[4], s), scores + pass(4));
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[5], s), values);
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[6], s), scores + values);
  EXPECT_DOUBLE_EQ(kernelSeconds(ops[7], s), 2 * values + pass(6));
  // The square in memory outweighs flash attention's blocks on chip.
  s.runtime.materializedAttention = false;
  const double flash = kernelSeconds(ops[0], s);
  s.runtime.materializedAttention = true;
  EXPECT_GT(kernelSeconds(ops[0], s), 2 * flash);
}

// Under a runtime that reruns each recomputed layer's whole forward (Megatron's
// CheckpointFunction), full recomputation costs every layer's forward again — the ops
// whose results backward never reads (the MLP's second linear, its residual add)
// included — in place of mt-recompute's copies of what backward reads.
TEST_F(LoweredTest, WholeLayerRecomputationCostsEachLayersForwardAgain) {
  SystemSpec s = a100();
  StepLayout l;
  l.options.microBatchSize = 2;
  l.options.globalBatchSize = 2;
  l.options.precision = "bf16";
  l.options.recompute = "full";
  mlir::OwningOpRef<mlir::ModuleOp> module = lowered(l);
  ASSERT_TRUE(module);
  const std::vector<ChunkProfile> pruned = profileChunks(*module, s, l.options);
  s.runtime.recomputeWholeLayers = true;
  const std::vector<ChunkProfile> whole = profileChunks(*module, s, l.options);
  ASSERT_EQ(whole.size(), 1u);
  // mt-recompute's copies, and the forward ops of gpt-tiny's two layers, costed one by one.
  double copies = 0, forwardOfLayers = 0;
  module->walk([&](mlir::Operation *op) {
    if (op->hasAttr(mlir::mt::kLayerAttr) && op->hasAttr(mlir::mt::kRecomputedAttr))
      copies += kernelSeconds(op, s);
  });
  mlir::func::FuncOp step = module->lookupSymbol<mlir::func::FuncOp>("train_step");
  ASSERT_TRUE(step);
  llvm::DenseMap<mlir::Operation *, int64_t> position;
  const int64_t backwardStart = mlir::mt::numberOps(step.getFunctionBody().front(), position);
  for (mlir::Operation &op : step.getFunctionBody().front())
    if (op.hasAttr(mlir::mt::kLayerAttr) && position[&op] < backwardStart)
      forwardOfLayers += kernelSeconds(&op, s);
  EXPECT_DOUBLE_EQ(pruned[0].backward.recompute, copies);
  EXPECT_NEAR(whole[0].backward.recompute, forwardOfLayers, 1e-18);
  EXPECT_GT(whole[0].backward.recompute, pruned[0].backward.recompute);
  EXPECT_EQ(whole[0].forward.compute, pruned[0].forward.compute);
  EXPECT_EQ(whole[0].backward.compute, pruned[0].backward.compute);
  // The hardware's FLOPs count the layers' forward products again.
  double forwardLayerFlops = 0;
  for (mlir::Operation &op : step.getFunctionBody().front())
    if (auto cost = mlir::dyn_cast<mlir::mt::CostOpInterface>(&op);
        cost && op.hasAttr(mlir::mt::kLayerAttr) && position[&op] < backwardStart)
      forwardLayerFlops += static_cast<double>(cost.getGemmFlops());
  EXPECT_EQ(whole[0].backward.wholeLayerFlops, static_cast<int64_t>(forwardLayerFlops));
  StepEstimate e;
  ASSERT_EQ(estimateStep(whole, s, l, e), "");
  EXPECT_EQ(static_cast<double>(e.hardwareFlops - e.modelFlops), forwardLayerFlops);
  // Sequence parallelism's gathers, copied for backward without recomputation, and
  // selective recomputation's copies (the attention core) are what the runtime reruns.
  StepLayout sp = l;
  sp.options.tp = 2;
  sp.options.sequenceParallel = true;
  sp.options.recompute = "none";
  StepEstimate gathers = estimate(sp, s), own;
  s.runtime.recomputeWholeLayers = false;
  own = estimate(sp, s);
  EXPECT_EQ(gathers.parts.recompute, own.parts.recompute);
  EXPECT_EQ(gathers.hardwareFlops, own.hardwareFlops);
  s.runtime.recomputeWholeLayers = true;
  l.options.recompute = "selective";
  l.options.attention = "unfused";
  mlir::OwningOpRef<mlir::ModuleOp> selective = lowered(l);
  ASSERT_TRUE(selective);
  const double rerun = profileChunks(*selective, s, l.options)[0].backward.recompute;
  s.runtime.recomputeWholeLayers = false;
  EXPECT_GT(rerun, 0.0);
  EXPECT_EQ(rerun, profileChunks(*selective, s, l.options)[0].backward.recompute);
  // Each layer's second MLP linear, whose result backward never reads (mt-recompute
  // copies the rest), runs again: 2 more Linear runs.
  EXPECT_EQ(whole[0].backward.families.at("Linear").runs -
                pruned[0].backward.families.at("Linear").runs,
            2.0);
}

TEST_F(LoweredTest, TheOddVocabularysCopiesCostWhatTheCudaBackendRuns) {
  SystemSpec s = a100();
  s.kernelOverhead = 3e-6;
  for (const auto &[type, vocab, size, padded] :
       {std::tuple{"bf16", 50257, 2, 50264}, {"f32", 50257, 4, 50260}, {"bf16", 50304, 2, 0}}) {
    SCOPED_TRACE(std::string(type) + " " + std::to_string(vocab));
    auto ty = [&, type = type](const std::string &shape) {
      return "tensor<" + shape + "x" + type + ">";
    };
    const std::string v = std::to_string(vocab), x = ty("4x512x1024"), w = ty(v + "x1024"),
                      y = ty("4x512x" + v);
    const std::string weightGrad =
        " = mt.linear_grad_weight %dy, %x : (" + y + ", " + x + ") -> " + w + "\n";
    const std::string source = "func.func @f(%x: " + x + ", %w: " + w + ", %dy: " + y + ") {\n" +
                               "  %y = mt.linear %x, %w : (" + x + ", " + w + ") -> " + y + "\n" +
                               "  %dx = mt.linear_grad_input %dy, %w : (" + y + ", " + w + ") -> " +
                               x + "\n" + "  %dw" + weightGrad + "  %dw2" + weightGrad +
                               "  %g = mt.gelu %dy : (" + y + ") -> " + y + "\n" + "  %dw3" +
                               weightGrad + "  return\n}\n";
    const std::vector<mlir::Operation *> ops = opsOf(source);
    ASSERT_TRUE(held);
    ASSERT_EQ(ops.size(), 6u);
    // One copy of the logits (or of dy): read and written, with its launch; into a buffer
    // of their rows padded.
    const double copy = padded ? 3e-6 + memorySeconds(s, 2 * int64_t{4} * 512 * vocab * size) : 0;
    for (int i : {0, 1, 2, 3, 5})
      EXPECT_EQ(stagingBytes(ops[i]), int64_t{4} * 512 * padded * size) << "op " << i;
    EXPECT_DOUBLE_EQ(stagingSeconds(ops[0], s), copy);
    EXPECT_DOUBLE_EQ(stagingSeconds(ops[1], s), copy);
    EXPECT_DOUBLE_EQ(stagingSeconds(ops[2], s), 0); // dy's copy read again
    EXPECT_DOUBLE_EQ(stagingSeconds(ops[3], s), 0);
    EXPECT_DOUBLE_EQ(stagingSeconds(ops[5], s), copy); // GELU's instruction between
    // In the kernel's time: the two weight gradients differ by the copy alone.
    EXPECT_NEAR(kernelSeconds(ops[5], s) - kernelSeconds(ops[2], s), copy, 1e-15);
  }
}

} // namespace

namespace {

// A runtime that overlaps the data-parallel reduction with the last micro-batch's backward
// hides min(all but a bucket, that backward) of it, and nothing else changes. gpt-tiny's
// 134,912 fp32 gradients (539,648 bytes) in buckets of 65,536 bytes: 8 whole and one of
// 15,360, over 2 ranks of a node. The distributed optimizer's gather of the bf16 weights
// (269,824 bytes) likewise behind the first forward, in buckets of 32,768 weights' bytes
// (where it does not overlap it, in one piece).
TEST_F(LoweredTest, AnOverlappedReductionHidesAllButABucketBehindBackward) {
  SystemSpec s = a100();
  StepLayout l;
  l.options.microBatchSize = 1;
  l.options.globalBatchSize = 8;
  l.options.dp = 2;
  l.options.precision = "bf16";
  l.bucketBytes = 65536;
  const Link &link = s.intraNode;
  const double bucket = collectiveSeconds(Collective::AllReduce, 65536, 2, link);
  const double all = 8 * bucket + collectiveSeconds(Collective::AllReduce, 15360, 2, link);
  const StepEstimate plain = estimate(l, s);
  s.runtime.overlapGradientReduction = true;
  const StepEstimate overlapped = estimate(l, s);
  const double backward = plain.parts.backward / 4; // one micro-batch's, of 4
  EXPECT_NEAR(overlapped.parts.overlapped, std::min(all - bucket, backward), 1e-15);
  EXPECT_NEAR(overlapped.parts.gradients + overlapped.parts.overlapped, plain.parts.gradients,
              1e-15);
  EXPECT_NEAR(overlapped.iteration, plain.iteration - overlapped.parts.overlapped, 1e-15);
  EXPECT_EQ(plain.parts.overlapped, 0.0);

  l.distributedOptimizer = true;
  s.runtime = RuntimeSpec();
  const StepEstimate sharded = estimate(l, s);
  s.runtime.overlapParameterGather = true;
  const StepEstimate gathered = estimate(l, s);
  // Unoverlapped, one gather; overlapped, in pieces (each with its latency).
  const double whole = collectiveSeconds(Collective::AllGather, 269824, 2, link);
  const double piece = collectiveSeconds(Collective::AllGather, 32768, 2, link);
  const double gather = 8 * piece + collectiveSeconds(Collective::AllGather, 7680, 2, link);
  const double exposed = std::max(piece, gather - sharded.parts.forward / 4);
  EXPECT_NEAR(gathered.parts.overlapped, gather - exposed, 1e-15);
  EXPECT_NEAR(gathered.parts.gradients, sharded.parts.gradients - whole + exposed, 1e-15);
  EXPECT_NEAR(gathered.iteration, sharded.iteration - whole + exposed, 1e-15);
}

// Under expert parallelism the experts' gradients reduce over the ranks holding the same
// experts: mixtral-tiny (287,552 parameters, 196,608 of them experts') under dp 4 reduces
// all of them over 4 ranks, under ep 2 the other 90,944 over 4 and its 98,304 experts'
// over 2 (and sums the experts' squares of the norm over the expert group); with the
// distributed optimizer each section reduce-scatters and gathers over its ranks.
TEST_F(LoweredTest, TheExpertsGradientsReduceOverTheirOwnGroup) {
  const SystemSpec s = a100();
  StepLayout l;
  l.options.microBatchSize = 1;
  l.options.globalBatchSize = 4;
  l.options.dp = 4;
  const Link &link = s.intraNode;
  auto seconds = [&](Collective kind, int64_t bytes, int64_t ranks) {
    return collectiveSeconds(kind, bytes, ranks, link);
  };
  const double dense = estimate(l, s, "mixtral-tiny").parts.gradients;
  l.options.ep = 2;
  const double experts = estimate(l, s, "mixtral-tiny").parts.gradients;
  EXPECT_NEAR(
      experts - dense,
      seconds(Collective::AllReduce, 4 * 90944, 4) + seconds(Collective::AllReduce, 4 * 98304, 2) +
          seconds(Collective::AllReduce, 8, 2) - seconds(Collective::AllReduce, 4 * 287552, 4),
      1e-15);
  l.distributedOptimizer = true;
  const double sharded = estimate(l, s, "mixtral-tiny").parts.gradients;
  l.options.ep = 1;
  const double shardedDense = estimate(l, s, "mixtral-tiny").parts.gradients;
  auto both = [&](int64_t elements, int64_t ranks) {
    return seconds(Collective::ReduceScatter, 4 * elements, ranks) +
           seconds(Collective::AllGather, 4 * elements, ranks);
  };
  EXPECT_NEAR(sharded - shardedDense, both(90944, 4) + both(98304, 2) - both(287552, 4), 1e-15);
}

// Kernels launched one by one, 10 us of host time each: the device waits at the start,
// and behind a short kernel, but a long one lets the host run ahead. Kernels of 5, 30, 1,
// 1 and 1 us are launched at 10, 20, 30, 40 and 50 and run 10-15, 20-50, 50-51, 51-52 and
// 52-53: 53 us for 38 of kernels.
TEST(CostModel, TheLaunchQueueWaitsOnlyForAHostBehindTheDevice) {
  LaunchQueue q;
  for (double t : {5e-6, 30e-6, 1e-6, 1e-6, 1e-6})
    q.launch(10e-6, t);
  EXPECT_NEAR(q.device, 53e-6, 1e-18);
  EXPECT_NEAR(q.waiting(), 15e-6, 1e-18);
  LaunchQueue free;
  for (double t : {5e-6, 30e-6})
    free.launch(0, t);
  EXPECT_EQ(free.waiting(), 0.0);
}

// A pass of kernels of 1 and 1 us, a collective of 5 us and a kernel of 1 us, 10 us of
// host time a launch. One by one, launched at 10, 20, 30 and 40 us, they run 10-11,
// 20-21, 30-35 and 40-41: 41 us for 8. Recorded in the stretches between collectives,
// three launches, at 10, 20 and 30 us: 10-12, 20-25 and 30-31, 31 us for 8.
TEST(CostModel, GraphsLaunchTheStretchesBetweenCollectives) {
  SystemSpec s = a100();
  s.runtime.launchGap = 10e-6;
  const std::vector<Launch> pass = {{1e-6, true}, {1e-6, true}, {5e-6, false}, {1e-6, true}};
  s.runtime.graphs = false;
  EXPECT_NEAR(hostWaiting(s, pass), 33e-6, 1e-18);
  s.runtime.graphs = true;
  EXPECT_NEAR(hostWaiting(s, pass), 23e-6, 1e-18);
  // Without a collective, a pass is one launch: the device waits for it alone.
  EXPECT_NEAR(hostWaiting(s, {{1e-6, true}, {30e-6, true}}), 10e-6, 1e-18);
}

// A pipeline message scattered over tp ranks crosses the network in tp shares and is
// gathered over NVLink: worth it for a large message between nodes, not for a small one.
TEST(CostModel, AScatteredPipelineMessageSendsAShareAndGathersIt) {
  SystemSpec s = a100();
  StepLayout l;
  l.options.tp = 4;
  l.options.pp = 4;
  Placement p{s.intraNode, s.intraNode, s.intraNode, s.interNode};
  const int64_t bytes = 1 << 24;
  EXPECT_DOUBLE_EQ(pipelineMessageSeconds(s, l, p, bytes),
                   bytes / s.interNode.bandwidth + s.interNode.latency);
  s.runtime.pipelineScatterGather = true;
  EXPECT_DOUBLE_EQ(pipelineMessageSeconds(s, l, p, bytes),
                   bytes / 4 / s.interNode.bandwidth + s.interNode.latency +
                       3.0 * bytes / 4 / s.intraNode.bandwidth + 3 * s.intraNode.latency);
  EXPECT_LT(pipelineMessageSeconds(s, l, p, bytes),
            bytes / s.interNode.bandwidth + s.interNode.latency);
  EXPECT_GT(pipelineMessageSeconds(s, l, p, 1024),
            1024 / s.interNode.bandwidth + s.interNode.latency);
  l.options.tp = 1; // nothing to scatter over
  EXPECT_DOUBLE_EQ(pipelineMessageSeconds(s, l, p, bytes),
                   bytes / s.interNode.bandwidth + s.interNode.latency);
  l.options.tp = 4; // sequence parallelism has split the message already
  l.options.sequenceParallel = true;
  EXPECT_DOUBLE_EQ(pipelineMessageSeconds(s, l, p, bytes),
                   bytes / s.interNode.bandwidth + s.interNode.latency);
}

} // namespace
