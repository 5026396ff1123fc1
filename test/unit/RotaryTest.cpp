// Rotary embeddings against an independent statement of Hugging Face's LLaMA rotation
// (modeling_llama.py's rotate_half; modeling_rope_utils.py's `llama3` frequencies),
// written here as that code computes it: the CPU backend's Rotary instruction on a
// grouped-query QKV, LLaMA 3.1's frequency bands, and the inverse rotation. (The CUDA
// backend is held to the CPU one by cuda_backend_test.)
#include "StatusAssertions.h"
#include "backends/Backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mt {
namespace {

/// LLaMA 3.1's 64 frequencies of a 128-dim head: 29 kept, 29 divided by the factor and 6
/// blended between, as Hugging Face's `llama3` rope type gives them.
TEST(Rope, Llama31FrequencyBands) {
  Rope rope;
  rope.theta = 500000;
  rope.scalingFactor = 8;
  rope.lowFreqFactor = 1;
  rope.highFreqFactor = 4;
  rope.originalPositions = 8192;
  int kept = 0, divided = 0, blended = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double plain = std::pow(500000.0, -2.0 * i / 128), scaled = rope.frequency(i, 128);
    if (scaled == plain)
      ++kept;
    else if (std::abs(scaled - plain / 8) <= 1e-15 * plain)
      ++divided;
    else if (scaled > plain / 8 && scaled < plain)
      ++blended;
  }
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(divided, 29);
  EXPECT_EQ(blended, 6);
  EXPECT_NEAR(rope.frequency(30, 128), 0.0013718935677611381, 1e-17);
}

/// Hugging Face's inverse frequencies, `llama3` scaled when factor > 0: the formula of
/// _compute_llama3_parameters, branch for branch.
std::vector<double> hfInverseFrequencies(double theta, int64_t d, double factor, double low,
                                         double high, double original) {
  std::vector<double> inv(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) {
    inv[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / d);
    if (factor <= 0)
      continue;
    const double wavelen = 2 * M_PI / inv[i];
    const double lowWavelen = original / low, highWavelen = original / high;
    double llama = wavelen > lowWavelen ? inv[i] / factor : inv[i];
    const double smooth = (original / wavelen - low) / (high - low);
    const double smoothed = (1 - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wavelen < highWavelen) && !(wavelen > lowWavelen);
    inv[i] = medium ? smoothed : llama;
  }
  return inv;
}

/// q·cos + rotate_half(q)·sin over one head, with emb = cat(freqs, freqs).
void hfRotate(const double *x, double *y, int64_t d, int64_t p, const std::vector<double> &inv) {
  for (int64_t k = 0; k < d; ++k) {
    const double angle = p * inv[k % (d / 2)];
    const double rotated = k < d / 2 ? -x[k + d / 2] : x[k - d / 2];
    y[k] = x[k] * std::cos(angle) + rotated * std::sin(angle);
  }
}

TensorView view(std::vector<double> &data, int64_t b, int64_t s, int64_t w) {
  TensorView v;
  v.data = data.data();
  v.dtype = plan::DType::F64;
  v.rank = 3;
  v.shape[0] = b;
  v.shape[1] = s;
  v.shape[2] = w;
  return v;
}

/// One Rotary instruction, as the compiler writes it.
struct RotaryInstruction {
  flatbuffers::FlatBufferBuilder fbb;
  const plan::Instruction *inst = nullptr;
  RotaryInstruction(int64_t heads, int64_t kv, double theta, double factor, bool inverse,
                    int64_t contextParallel = 0) {
    std::vector<uint32_t> in{0}, out{1};
    auto inputs = fbb.CreateVector(in), outputs = fbb.CreateVector(out);
    plan::InstructionBuilder rotary(fbb);
    rotary.add_opcode(plan::Opcode::Rotary);
    rotary.add_inputs(inputs);
    rotary.add_outputs(outputs);
    rotary.add_heads(heads);
    rotary.add_theta(theta);
    rotary.add_kv_heads(kv);
    rotary.add_scaling_factor(factor);
    rotary.add_low_freq_factor(1.0);
    rotary.add_high_freq_factor(4.0);
    rotary.add_original_positions(64);
    rotary.add_inverse(inverse);
    rotary.add_context_parallel(contextParallel);
    fbb.Finish(rotary.Finish());
    inst = flatbuffers::GetRoot<plan::Instruction>(fbb.GetBufferPointer());
  }
};

/// Four query heads over two key/value heads of 8 dims, 6 positions, LLaMA 3.1's
/// scaling on a short context (so that the three bands all occur): the queries and keys
/// as Hugging Face turns them, the values untouched; the inverse turns them back.
TEST(Rope, GroupedQkvAsHuggingFaceTurnsIt) {
  const int64_t b = 2, s = 6, heads = 4, kv = 2, d = 8, perGroup = heads / kv;
  const int64_t width = (heads + 2 * kv) * d;
  const double theta = 500, factor = 4;
  std::vector<double> x(b * s * width), y(x.size()), back(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.37 * static_cast<double>(i)) + 0.1 * static_cast<double>(i % 7);
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  TensorView io[2] = {view(x, b, s, width), view(y, b, s, width)};
  RotaryInstruction forward(heads, kv, theta, factor, false);
  ASSERT_OK(cpu->run(*forward.inst, &io[0], &io[1], StepContext{}));

  const std::vector<double> inv = hfInverseFrequencies(theta, d, factor, 1, 4, 64);
  int bands[3] = {0, 0, 0}; // kept, divided, blended
  for (int64_t i = 0; i < d / 2; ++i) {
    const double plain = 1.0 / std::pow(theta, 2.0 * i / d);
    ++bands[inv[i] == plain ? 0 : std::abs(inv[i] - plain / factor) < 1e-15 ? 1 : 2];
  }
  EXPECT_GT(bands[0], 0);
  EXPECT_GT(bands[1], 0);
  EXPECT_GT(bands[2], 0);
  std::vector<double> expected(d);
  for (int64_t row = 0; row < b * s; ++row)
    for (int64_t g = 0; g < kv; ++g)
      for (int64_t j = 0; j < perGroup + 2; ++j) {
        const int64_t at = row * width + (g * (perGroup + 2) + j) * d;
        if (j <= perGroup)
          hfRotate(&x[at], expected.data(), d, row % s, inv);
        else
          expected.assign(x.begin() + at, x.begin() + at + d);
        for (int64_t k = 0; k < d; ++k)
          ASSERT_NEAR(y[at + k], expected[k], 1e-12)
              << "position " << row % s << ", group " << g << ", head " << j << ", dim " << k;
      }

  TensorView undo[2] = {view(y, b, s, width), view(back, b, s, width)};
  RotaryInstruction inverse(heads, kv, theta, factor, true);
  ASSERT_OK(cpu->run(*inverse.inst, &undo[0], &undo[1], StepContext{}));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(back[i], x[i], 1e-12) << "element " << i;
}

/// Under context parallelism a rank's share (chunks r and 2·cp − 1 − r of 2·cp) turns
/// each row at its own position: the rows of the whole sequence's rotation.
TEST(Rope, AContextParallelShareTurnsAtItsPositions) {
  const int64_t b = 2, s = 12, heads = 4, kv = 2, d = 8, width = (heads + 2 * kv) * d;
  const int64_t cp = 3, rows = s / cp, chunk = s / (2 * cp);
  std::vector<double> whole(b * s * width), turned(whole.size());
  for (size_t i = 0; i < whole.size(); ++i)
    whole[i] = std::cos(0.29 * static_cast<double>(i));
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  TensorView all[2] = {view(whole, b, s, width), view(turned, b, s, width)};
  ASSERT_OK(
      cpu->run(*RotaryInstruction(heads, kv, 500, 0, false).inst, &all[0], &all[1], StepContext{}));
  for (int r = 0; r < cp; ++r) {
    const int64_t starts[2] = {r * chunk, (2 * cp - 1 - r) * chunk};
    std::vector<double> share(b * rows * width), out(share.size());
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t t = 0; t < rows; ++t)
        std::copy_n(&whole[(bi * s + starts[t / chunk] + t % chunk) * width], width,
                    &share[(bi * rows + t) * width]);
    StepContext ctx;
    ctx.cpRank = r;
    ctx.cpSize = static_cast<int>(cp);
    TensorView io[2] = {view(share, b, rows, width), view(out, b, rows, width)};
    ASSERT_OK(cpu->run(*RotaryInstruction(heads, kv, 500, 0, false, cp).inst, &io[0], &io[1], ctx));
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t k = 0; k < width; ++k)
          ASSERT_EQ(out[(bi * rows + t) * width + k],
                    turned[(bi * s + starts[t / chunk] + t % chunk) * width + k])
              << "rank " << r << " row " << t;
  }
}

} // namespace
} // namespace mt
