// cuDNN's strided views of attention's operands address exactly the elements our
// kernels address through QkvLayout (core/SharedMath.h): every query, key, value and
// output element of multi-head, multi-query, single-head and grouped-query attention,
// whose unevenly spaced queries reach their packed view through the pitched copy.
#include "backends/cuda/SdpaLayout.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

int64_t address(const SdpaView &view, int64_t b, int64_t h, int64_t t, int64_t c) {
  return view.offset + b * view.stride[0] + h * view.stride[1] + t * view.stride[2] +
         c * view.stride[3];
}

void expectSameElements(int64_t heads, int64_t kv, int64_t d) {
  SCOPED_TRACE(testing::Message() << heads << " heads, " << kv << " key/value, d " << d);
  const QkvLayout layout{heads, kv, d};
  const int64_t batch = 2, s = 3;
  const SdpaLayout view = sdpaLayout(layout, batch, s);
  const bool grouped = kv > 1 && heads > kv;
  EXPECT_EQ(view.packedQuery, grouped);
  EXPECT_EQ(view.q.dim, (std::array<int64_t, 4>{batch, heads, s, d}));
  EXPECT_EQ(view.k.dim, (std::array<int64_t, 4>{batch, kv, s, d}));
  EXPECT_EQ(view.v.dim, view.k.dim);
  EXPECT_EQ(view.o.dim, view.q.dim);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < s; ++t) {
      const int64_t row = (b * s + t) * layout.width();
      for (int64_t c = 0; c < d; ++c) {
        for (int64_t h = 0; h < heads; ++h) {
          if (grouped) {
            // Row r of the copy holds group g of position (b, t); h's place in it, x.
            const QueryPacking &p = view.packing;
            const int64_t r = (b * s + t) * kv + layout.group(h);
            const int64_t x = h % layout.perGroup() * d + c;
            ASSERT_LT(r, p.rows);
            ASSERT_LT(x, p.length);
            EXPECT_EQ(layout.query(0) + r * p.fusedPitch + x, row + layout.query(h) + c);
            EXPECT_EQ(address(view.q, b, h, t, c), r * p.length + x);
          } else {
            EXPECT_EQ(address(view.q, b, h, t, c), row + layout.query(h) + c);
          }
          EXPECT_EQ(address(view.o, b, h, t, c), (b * s + t) * heads * d + h * d + c);
        }
        for (int64_t g = 0; g < kv; ++g) {
          EXPECT_EQ(address(view.k, b, g, t, c), row + layout.key(g) + c);
          EXPECT_EQ(address(view.v, b, g, t, c), row + layout.value(g) + c);
        }
      }
    }
}

TEST(SdpaLayout, MultiHead) { expectSameElements(3, 3, 8); }
TEST(SdpaLayout, MultiQuery) { expectSameElements(4, 1, 8); }
TEST(SdpaLayout, OneHead) { expectSameElements(1, 1, 16); }

TEST(SdpaLayout, GroupedQueryHeadsArePacked) {
  expectSameElements(4, 2, 8);
  expectSameElements(6, 3, 4);
  // LLaMA 3 8B's: 32 heads in 8 groups of 128.
  const SdpaLayout view = sdpaLayout(QkvLayout{32, 8, 128}, 1, 2048);
  EXPECT_TRUE(view.packedQuery);
  EXPECT_EQ(view.packing.rows, 2048 * 8);
  EXPECT_EQ(view.packing.length, 4 * 128);
  EXPECT_EQ(view.packing.fusedPitch, 6 * 128);
}

} // namespace
} // namespace mt
