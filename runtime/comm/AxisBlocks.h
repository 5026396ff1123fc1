// A tensor [outer, axis, inner] seen as `parts` equal blocks along `axis`, and the
// rank-major layout collectives exchange: block p (rows [p·axis/parts, (p+1)·axis/parts)
// of every outer slice) contiguous. Gathers and scatters along a dimension other than the
// first reorder between the two, on the host or on a device.
#ifndef MT_RUNTIME_COMM_AXISBLOCKS_H
#define MT_RUNTIME_COMM_AXISBLOCKS_H

#include "core/DType.h"
#include "core/Tensor.h"

#include <cstddef>

namespace mt {

struct AxisBlocks {
  size_t outer = 1, inner = 1, axisLength, elementBytes;

  AxisBlocks(const TensorView &t, int axis)
      : axisLength(t.shape[axis]), elementBytes(dtypeBytes(t.dtype)) {
    for (int i = 0; i < axis; ++i)
      outer *= t.shape[i];
    for (int i = axis + 1; i < t.rank; ++i)
      inner *= t.shape[i];
  }

  /// Copies between the two layouts with copy2d(dst, dstPitch, src, srcPitch, width,
  /// height), one strided copy per block: a 2-D memcpy on the host or on a device.
  template <typename Copy2D>
  void copy(char *tensor, char *blocks, int parts, bool toBlocks, Copy2D copy2d) const {
    const size_t width = axisLength / parts * inner * elementBytes;
    const size_t pitch = axisLength * inner * elementBytes;
    for (int p = 0; p < parts; ++p) {
      char *t = tensor + p * width, *b = blocks + p * outer * width;
      if (toBlocks)
        copy2d(b, width, t, pitch, width, outer);
      else
        copy2d(t, pitch, b, width, width, outer);
    }
  }
};

} // namespace mt

#endif
