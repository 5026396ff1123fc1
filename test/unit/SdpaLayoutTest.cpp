// cuDNN's strided views of attention's operands address exactly the elements our
// kernels address through QkvLayout (core/SharedMath.h): every query, key, value and
// output element of multi-head, multi-query and single-head attention; grouped-query
// attention with unevenly spaced query heads is refused.
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
  SdpaLayout view;
  ASSERT_TRUE(sdpaLayout(layout, batch, s, view));
  EXPECT_EQ(view.q.dim, (std::array<int64_t, 4>{batch, heads, s, d}));
  EXPECT_EQ(view.k.dim, (std::array<int64_t, 4>{batch, kv, s, d}));
  EXPECT_EQ(view.v.dim, view.k.dim);
  EXPECT_EQ(view.o.dim, view.q.dim);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < s; ++t) {
      const int64_t row = (b * s + t) * layout.width();
      for (int64_t c = 0; c < d; ++c) {
        for (int64_t h = 0; h < heads; ++h) {
          EXPECT_EQ(address(view.q, b, h, t, c), row + layout.query(h) + c);
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

TEST(SdpaLayout, GroupedQueryHeadsAreRefused) {
  SdpaLayout view;
  EXPECT_FALSE(sdpaLayout(QkvLayout{4, 2, 8}, 2, 3, view));
  EXPECT_FALSE(sdpaLayout(QkvLayout{32, 8, 128}, 1, 2048, view));
}

} // namespace
} // namespace mt
