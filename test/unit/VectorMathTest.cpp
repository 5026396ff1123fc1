// The CPU backend's vectorised f32 math (backends/cpu/VectorMath.h): the same bits however
// an array is cut (AVX, SSE2 and scalar variants alike), within 2 ulp of erf and exp
// in f64, and the activations equal to core/SharedMath.h's formulas evaluated in f64.
#include "backends/cpu/VectorMath.h"

#include <sleef.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace mt::cpu {
namespace {

/// Random values over [-12, 12], and the edges: zeros, infinities, NaN, the smallest
/// and largest floats.
std::vector<float> inputs() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-12.0f, 12.0f);
  std::vector<float> x(4099);
  for (float &v : x)
    v = u(rng);
  const float edges[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::denorm_min(),
                         std::numeric_limits<float>::max(), -88.0f, 88.0f, 1e-30f};
  std::copy(std::begin(edges), std::end(edges), x.begin() + 100);
  return x;
}

bool sameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

using Function = void (*)(const float *, float *, int64_t);

TEST(VectorMath, EveryCutGivesTheSameBits) {
  const std::vector<float> x = inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  const std::pair<Function, float (*)(float)> functions[] = {
      {erfOf, [](float v) { return Sleef_cinz_erff1_u10purec(v); }},
      {expOf, [](float v) { return Sleef_cinz_expf1_u10purec(v); }}};
  for (auto [f, scalar] : functions) {
    std::vector<float> whole(n);
    f(x.data(), whole.data(), n);
    // SLEEF's scalar variant, one at a time (a padded vector), and in pieces of every
    // length to 17 from every offset to 8 (the vector variants meeting at every place).
    for (int64_t i = 0; i < n; ++i) {
      float one;
      f(&x[i], &one, 1);
      ASSERT_TRUE(sameBits(one, whole[i])) << i;
      ASSERT_TRUE(sameBits(scalar(x[i]), whole[i])) << i;
    }
    for (int64_t piece = 1; piece <= 17; ++piece)
      for (int64_t offset = 0; offset < 8; ++offset) {
        std::vector<float> cut(n);
        std::copy(whole.begin(), whole.begin() + offset, cut.begin());
        for (int64_t b = offset; b < n; b += piece)
          f(&x[b], &cut[b], std::min(piece, n - b));
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(sameBits(cut[i], whole[i])) << "piece " << piece << ", offset " << offset;
      }
  }
}

TEST(VectorMath, WithinTwoUlpOfDoublePrecision) {
  const std::vector<float> x = inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  const std::pair<Function, double (*)(double)> functions[] = {
      {erfOf, [](double v) { return std::erf(v); }}, {expOf, [](double v) { return std::exp(v); }}};
  for (auto [f, reference] : functions) {
    std::vector<float> y(n);
    f(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = static_cast<float>(reference(x[i]));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[i])) << x[i];
      } else if (std::isinf(want) || want == 0) {
        EXPECT_EQ(y[i], want) << x[i];
      } else {
        const float ulp = std::nextafter(std::fabs(want), std::numeric_limits<float>::max()) -
                          std::fabs(want);
        EXPECT_LE(std::fabs(y[i] - want), 2 * ulp) << x[i];
      }
    }
  }
}

/// The activations and their gradients against SharedMath's, in f64.
TEST(VectorMath, ActivationsAreSharedMathsFormulas) {
  std::vector<float> x = inputs();
  x.erase(x.begin() + 100, x.begin() + 110); // the random values only
  std::vector<float> dy(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    dy[i] = 0.25f + static_cast<float>(i % 7) * 0.125f;
  const int64_t n = static_cast<int64_t>(x.size());
  auto close = [](double got, double want) {
    EXPECT_NEAR(got, want, 2e-6 * std::max(1.0, std::fabs(want)));
  };
  for (const Gelu &gelu : {Gelu{}, [] {
                             Gelu g;
                             g.exact = true;
                             return g;
                           }()}) {
    std::vector<float> y(n), dx(n);
    values(gelu, x.data(), y.data(), n);
    gradients(gelu, dy.data(), x.data(), dx.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE(x[i]);
      close(y[i], gelu.value(static_cast<double>(x[i])));
      close(dx[i], dy[i] * gelu.derivative(static_cast<double>(x[i])));
    }
  }
  std::vector<float> y(n), dx(n), up(n), out(n), dgate(n), dup(n);
  values(Silu{}, x.data(), y.data(), n);
  gradients(Silu{}, dy.data(), x.data(), dx.data(), n);
  for (int64_t i = 0; i < n; ++i)
    up[i] = 1.5f - dy[i];
  swiglu(x.data(), up.data(), out.data(), n);
  swigluGrad(dy.data(), x.data(), up.data(), dgate.data(), dup.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE(x[i]);
    const double v = x[i];
    close(y[i], Silu::value(v));
    close(dx[i], dy[i] * Silu::derivative(v));
    close(out[i], Swiglu::value(v, static_cast<double>(up[i])));
    close(dgate[i], Swiglu::gateGrad(static_cast<double>(dy[i]), v, static_cast<double>(up[i])));
    close(dup[i], Swiglu::upGrad(static_cast<double>(dy[i]), v));
  }
}

} // namespace
} // namespace mt::cpu
