// A non-owning view of one plan buffer: where it lives, its element type and shape.
#ifndef MT_RUNTIME_CORE_TENSOR_H
#define MT_RUNTIME_CORE_TENSOR_H

#include "core/DType.h"
#include "core/SharedMath.h"

#include <array>
#include <cstdint>

namespace mt {

struct TensorView {
  static constexpr int kMaxRank = mt::kMaxRank;

  void *data = nullptr;
  plan::DType dtype = plan::DType::F32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i)
      n *= shape[i];
    return n;
  }
  /// Bytes of the elements (element size × count).
  size_t bytes() const { return dtypeBytes(dtype) * static_cast<size_t>(numel()); }
  int64_t dim(int i) const { return shape[i < 0 ? rank + i : i]; }
  /// The last dimension, and the product of all others (a row-major matrix view).
  int64_t cols() const { return rank ? shape[rank - 1] : 1; }
  int64_t rows() const { return rank ? numel() / cols() : 1; }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

/// Elements [begin, end) of `t` seen as a vector; `bytesPerElement` of t's type.
inline TensorView sliceOf(const TensorView &t, size_t bytesPerElement, int64_t begin,
                          int64_t end) {
  TensorView v = t;
  v.data = static_cast<char *>(t.data) + bytesPerElement * begin;
  v.rank = 1;
  v.shape[0] = end - begin;
  return v;
}

/// A block of a larger tensor: the local tensor is block `index` of `parts` equal
/// blocks of the global one along `dim`. Maps local element indices to global ones, so
/// that anything defined per global element (initial values, dropout masks) is the
/// same under every layout.
struct ShardMap {
  int64_t outer = 1, localAxis = 1, inner = 1, offset = 0, globalAxis = 1;

  ShardMap() = default;
  ShardMap(const TensorView &local, int dim, int index, int parts) {
    if (dim < 0 || parts == 1)
      return; // replicated: global index = local index
    for (int i = 0; i < dim; ++i)
      outer *= local.shape[i];
    localAxis = local.shape[dim];
    for (int i = dim + 1; i < local.rank; ++i)
      inner *= local.shape[i];
    offset = static_cast<int64_t>(index) * localAxis;
    globalAxis = localAxis * parts;
  }
  /// Local elements from a multiple of run() on, run() of them, have consecutive global
  /// indices (a shard's whole block along its axis).
  MT_HOST_DEVICE int64_t run() const {
    return globalAxis == localAxis ? INT64_MAX : localAxis * inner;
  }
  MT_HOST_DEVICE int64_t global(int64_t local) const {
    if (globalAxis == localAxis)
      return local;
    const int64_t in = local % inner, rest = local / inner;
    const int64_t axis = rest % localAxis, out = rest / localAxis;
    return (out * globalAxis + axis + offset) * inner + in;
  }
};

} // namespace mt

#endif
