#include "train/Boxes.h"

#include "core/Status.h"

#include <algorithm>
#include <cstring>

namespace mt {
namespace {

/// Appends the boxes of elements [begin, end) of the sub-tensor of `shape` from dimension
/// `dim` on, inside the row that `prefix` (one index per earlier dimension) names.
void appendBoxes(const std::vector<int64_t> &shape, size_t dim, std::vector<int64_t> &prefix,
                 int64_t begin, int64_t end, std::vector<Box> &out) {
  if (begin >= end)
    return;
  auto box = [&](int64_t first, int64_t count) {
    Box b;
    b.offsets = prefix;
    b.sizes.assign(prefix.size(), 1);
    b.offsets.push_back(first);
    b.sizes.push_back(count);
    for (size_t d = dim + 1; d < shape.size(); ++d) {
      b.offsets.push_back(0);
      b.sizes.push_back(shape[d]);
    }
    out.push_back(std::move(b));
  };
  int64_t inner = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  const int64_t firstFull = (begin + inner - 1) / inner, lastFull = end / inner;
  if (firstFull > lastFull) { // within one row of this dimension
    prefix.push_back(begin / inner);
    appendBoxes(shape, dim + 1, prefix, begin % inner, begin % inner + (end - begin), out);
    prefix.pop_back();
    return;
  }
  if (begin % inner != 0) { // the partial first row
    prefix.push_back(begin / inner);
    appendBoxes(shape, dim + 1, prefix, begin % inner, inner, out);
    prefix.pop_back();
  }
  if (firstFull < lastFull)
    box(firstFull, lastFull - firstFull);
  if (end % inner != 0) { // the partial last row
    prefix.push_back(lastFull);
    appendBoxes(shape, dim + 1, prefix, 0, end % inner, out);
    prefix.pop_back();
  }
}

std::string describe(const Box &b) {
  std::string s = "[";
  for (size_t d = 0; d < b.offsets.size(); ++d)
    s += cat(d ? ", " : "", b.offsets[d], ":", b.offsets[d] + b.sizes[d]);
  return s + "]";
}

/// Row-major strides, in elements, of a buffer holding `box`.
std::vector<int64_t> stridesOf(const Box &box) {
  std::vector<int64_t> strides(box.sizes.size(), 1);
  for (size_t d = box.sizes.size(); d-- > 1;)
    strides[d - 1] = strides[d] * box.sizes[d];
  return strides;
}

} // namespace

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

Box wholeBox(const std::vector<int64_t> &shape) {
  Box b;
  b.offsets.assign(shape.size(), 0);
  b.sizes = shape;
  return b;
}

std::vector<Box> boxesOfRange(const std::vector<int64_t> &shape, int64_t begin, int64_t end) {
  std::vector<Box> out;
  std::vector<int64_t> prefix;
  if (shape.empty()) {
    if (begin < end)
      out.push_back(Box{});
    return out;
  }
  appendBoxes(shape, 0, prefix, begin, end, out);
  return out;
}

std::optional<Box> intersect(const Box &a, const Box &b) {
  if (a.offsets.size() != b.offsets.size())
    return std::nullopt;
  Box c;
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    const int64_t first = std::max(a.offsets[d], b.offsets[d]);
    const int64_t last = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (first >= last)
      return std::nullopt;
    c.offsets.push_back(first);
    c.sizes.push_back(last - first);
  }
  return c;
}

bool tilesExactly(const std::vector<Box> &boxes, const std::vector<int64_t> &shape,
                  std::string &problem) {
  const Box whole = wholeBox(shape);
  int64_t covered = 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const Box &b = boxes[i];
    std::optional<Box> inside = intersect(b, whole);
    if (b.offsets.size() != shape.size() || b.numel() <= 0 || !inside || !(*inside == b)) {
      problem = cat("box ", describe(b), " is not inside the tensor ", describe(whole));
      return false;
    }
    for (size_t j = 0; j < i; ++j)
      if (std::optional<Box> both = intersect(b, boxes[j])) {
        problem = cat("boxes ", describe(boxes[j]), " and ", describe(b), " overlap in ",
                      describe(*both));
        return false;
      }
    covered += b.numel();
  }
  if (covered != whole.numel()) {
    problem = cat("the boxes cover ", covered, " of the tensor's ", whole.numel(), " elements");
    return false;
  }
  return true;
}

void copyRegion(const Box &region, const Box &from, const void *source, const Box &to,
                void *target, size_t elementBytes) {
  const size_t rank = region.sizes.size();
  if (region.numel() == 0)
    return;
  const std::vector<int64_t> fromStrides = stridesOf(from), toStrides = stridesOf(to);
  // Rows along the last dimension are contiguous in both: one copy per row.
  const int64_t row = rank ? region.sizes[rank - 1] : 1;
  std::vector<int64_t> index(rank, 0); // within the region, over all but the last dimension
  const char *src = static_cast<const char *>(source);
  char *dst = static_cast<char *>(target);
  for (;;) {
    int64_t at = 0, into = 0;
    for (size_t d = 0; d < rank; ++d) {
      at += (region.offsets[d] + index[d] - from.offsets[d]) * fromStrides[d];
      into += (region.offsets[d] + index[d] - to.offsets[d]) * toStrides[d];
    }
    std::memcpy(dst + into * elementBytes, src + at * elementBytes, row * elementBytes);
    // The next row: advance the index over all but the last dimension, as an odometer.
    int d = static_cast<int>(rank) - 2;
    for (; d >= 0; --d) {
      if (++index[d] < region.sizes[d])
        break;
      index[d] = 0;
    }
    if (d < 0)
      return;
  }
}

} // namespace mt
