// A non-owning view of one plan buffer: where it lives, its element type and shape.
#ifndef MT_RUNTIME_CORE_TENSOR_H
#define MT_RUNTIME_CORE_TENSOR_H

#include "plan_generated.h"

#include <array>
#include <cstdint>

namespace mt {

struct TensorView {
  static constexpr int kMaxRank = 8;

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
  int64_t dim(int i) const { return shape[i < 0 ? rank + i : i]; }
  /// The last dimension, and the product of all others (a row-major matrix view).
  int64_t cols() const { return rank ? shape[rank - 1] : 1; }
  int64_t rows() const { return rank ? numel() / cols() : 1; }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

} // namespace mt

#endif
