// Where cuDNN's attention finds its operands in ours: query, key and value as
// [batch, heads, sequence, head_dim] views of the fused qkv [B, S, (heads + 2·kv)·d]
// (core/SharedMath.h: QkvLayout), and the output as a view of [B, S, heads·d]. A view
// is one offset and one stride per dimension, so the query heads must be evenly spaced:
// true of one key/value group (multi-query) and of one query head per group
// (multi-head); grouped-query attention with several of each has two spacings.
// Host code only: tested without a GPU.
#ifndef MT_RUNTIME_BACKENDS_CUDA_SDPALAYOUT_H
#define MT_RUNTIME_BACKENDS_CUDA_SDPALAYOUT_H

#include "core/SharedMath.h"

#include <array>
#include <cstdint>

namespace mt {

/// A strided 4-d view: element (i0, i1, i2, i3) lies at offset + Σ ik·stride[k].
struct SdpaView {
  int64_t offset = 0;
  std::array<int64_t, 4> dim{}, stride{};
};

struct SdpaLayout {
  SdpaView q, k, v, o; // o: the output, and its gradient likewise
};

/// The views of attention over `layout` for batch b and sequence s; false where the query
/// heads are not evenly spaced.
inline bool sdpaLayout(const QkvLayout &layout, int64_t b, int64_t s, SdpaLayout &out) {
  const int64_t d = layout.d, width = layout.width(), heads = layout.heads;
  if (layout.kv != 1 && layout.perGroup() != 1)
    return false;
  // Head h's query lies at query(h) = query(0) + h·(query(1) − query(0)).
  const int64_t queryStride = heads > 1 ? layout.query(1) - layout.query(0) : d;
  const int64_t groupStride = (layout.perGroup() + 2) * d;
  out.q = {layout.query(0), {b, heads, s, d}, {s * width, queryStride, width, 1}};
  out.k = {layout.key(0), {b, layout.kv, s, d}, {s * width, groupStride, width, 1}};
  out.v = {layout.value(0), {b, layout.kv, s, d}, {s * width, groupStride, width, 1}};
  out.o = {0, {b, heads, s, d}, {s * heads * d, d, heads * d, 1}};
  return true;
}

} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_SDPALAYOUT_H
