// Where cuDNN's attention finds its operands in ours: query, key and value as
// [batch, heads, sequence, head_dim] views of the fused qkv [B, S, (heads + 2·kv)·d]
// (core/SharedMath.h: QkvLayout), and the output as a view of [B, S, heads·d]. A view
// is one offset and one stride per dimension, so the query heads must be evenly spaced:
// true of one key/value group (multi-query) and of one query head per group
// (multi-head). Grouped-query attention with several of each has two spacings: its
// queries (and their gradient) are copied to and from a packed [B, S, heads·d], each
// group's heads one row of a pitched copy. Host code only: tested without a GPU.
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

/// The queries' copy between the fused qkv and a packed [B, S, heads·d]: `rows` rows of
/// `length` elements, `fusedPitch` apart in qkv (from its first query) and `length` apart
/// packed.
struct QueryPacking {
  int64_t rows = 0, length = 0, fusedPitch = 0;
};

struct SdpaLayout {
  SdpaView q, k, v, o; // o: the output, and its gradient likewise
  /// Whether q's view (and its gradient's) is of the packed queries, not of qkv.
  bool packedQuery = false;
  QueryPacking packing;
};

/// The views of attention over `layout` for batch b and sequence s.
inline SdpaLayout sdpaLayout(const QkvLayout &layout, int64_t b, int64_t s) {
  const int64_t d = layout.d, width = layout.width(), heads = layout.heads;
  const int64_t groupStride = (layout.perGroup() + 2) * d;
  SdpaLayout out;
  out.k = {layout.key(0), {b, layout.kv, s, d}, {s * width, groupStride, width, 1}};
  out.v = {layout.value(0), {b, layout.kv, s, d}, {s * width, groupStride, width, 1}};
  out.o = {0, {b, heads, s, d}, {s * heads * d, d, heads * d, 1}};
  if (layout.kv != 1 && layout.perGroup() != 1) {
    // Each position's groups in turn, a group's queries contiguous: as o is laid out.
    out.packedQuery = true;
    out.packing = {b * s * layout.kv, layout.perGroup() * d, groupStride};
    out.q = out.o;
    return out;
  }
  // Head h's query lies at query(h) = query(0) + h·(query(1) − query(0)).
  const int64_t queryStride = heads > 1 ? layout.query(1) - layout.query(0) : d;
  out.q = {layout.query(0), {b, heads, s, d}, {s * width, queryStride, width, 1}};
  return out;
}

} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_SDPALAYOUT_H
