// The geometry of a sharded checkpoint: the pieces of a tensor that ranks hold are
// boxes (an offset and a size per dimension, in the global tensor's coordinates). A
// tensor-parallel shard is one box; the distributed optimizer's share of a parameter (a
// contiguous run of its row-major elements) is a few. A checkpoint stores boxes, so a
// run under any layout can find the parts of each tensor it needs by intersecting its
// own boxes with the stored ones (as PyTorch's Distributed Checkpoint plans its reads).
#ifndef MT_RUNTIME_TRAIN_BOXES_H
#define MT_RUNTIME_TRAIN_BOXES_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mt {

struct Box {
  std::vector<int64_t> offsets, sizes;

  int64_t numel() const;
  bool operator==(const Box &other) const {
    return offsets == other.offsets && sizes == other.sizes;
  }
};

/// The whole of a tensor of `shape`.
Box wholeBox(const std::vector<int64_t> &shape);

/// Elements [begin, end) of a tensor of `shape`, in row-major order, as at most
/// 2·rank − 1 boxes (a partial first row of each dimension, the full rows between, a
/// partial last row), in that order.
std::vector<Box> boxesOfRange(const std::vector<int64_t> &shape, int64_t begin, int64_t end);

/// The elements both boxes hold, if any.
std::optional<Box> intersect(const Box &a, const Box &b);

/// Whether `boxes` cover a tensor of `shape` exactly once; otherwise `problem` says
/// where they leave a gap, overlap or reach outside it.
bool tilesExactly(const std::vector<Box> &boxes, const std::vector<int64_t> &shape,
                  std::string &problem);

/// Copies the elements of `region` (inside both `from` and `to`) from `source`, which
/// holds box `from` in row-major order, into `target`, which holds box `to`.
void copyRegion(const Box &region, const Box &from, const void *source, const Box &to,
                void *target, size_t elementBytes);

} // namespace mt

#endif
