#include "train/Boxes.h"

#include "core/DType.h"
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

namespace {

using Key = unsigned __int128;
/// At most this many corners are sorted (512 MiB of keys): a checkpoint of a million
/// chunks of two dimensions has 4 million.
constexpr size_t kMaxCorners = size_t{1} << 25;

/// The signed corners of a box: each of its 2^k corners over the tensor's dimensions
/// `live` (offset, or offset + size, per dimension) as a mixed-radix key over the shape
/// + 1, among the positive ones where an even number of dimensions take the upper end,
/// else the negative ones.
void addCorners(const Box &b, const std::vector<int64_t> &shape, const std::vector<size_t> &live,
                std::vector<Key> &positive, std::vector<Key> &negative) {
  for (uint64_t mask = 0; mask < (uint64_t{1} << live.size()); ++mask) {
    Key key = 0;
    for (size_t i = 0; i < live.size(); ++i) {
      const size_t d = live[i];
      key = key * static_cast<Key>(shape[d] + 1) +
            static_cast<Key>(b.offsets[d] + ((mask >> i) & 1 ? b.sizes[d] : 0));
    }
    (__builtin_popcountll(mask) % 2 ? negative : positive).push_back(key);
  }
}

/// The point a corner key stands for, "(i, j, ...)" (0 in the dimensions of size 1).
std::string pointOf(Key key, const std::vector<int64_t> &shape, const std::vector<size_t> &live) {
  std::vector<int64_t> point(shape.size(), 0);
  for (size_t i = live.size(); i-- > 0;) {
    point[live[i]] = static_cast<int64_t>(key % static_cast<Key>(shape[live[i]] + 1));
    key /= static_cast<Key>(shape[live[i]] + 1);
  }
  std::string text = "(";
  for (size_t d = 0; d < point.size(); ++d)
    text += (d ? ", " : "") + std::to_string(point[d]);
  return text + ")";
}

} // namespace

bool tilesExactly(const std::vector<Box> &boxes, const std::vector<int64_t> &shape,
                  std::string &problem) {
  const Box whole = wholeBox(shape);
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    problem =
        cat("a tensor of ", shape.size(), " dimensions, more than the ", kMaxRank, " mtc holds");
    return false;
  }
  int64_t covered = 0;
  for (const Box &b : boxes) {
    std::optional<Box> inside = intersect(b, whole);
    if (b.offsets.size() != shape.size() || b.numel() <= 0 || !inside || !(*inside == b)) {
      problem = cat("box ", describe(b), " is not inside the tensor ", describe(whole));
      return false;
    }
    covered += b.numel(); // each at most the tensor's: no overflow before it passes it
    if (covered > whole.numel())
      break;
  }
  if (covered != whole.numel()) {
    problem = covered > whole.numel() ? cat("the boxes cover more than the tensor's ",
                                            whole.numel(), " elements: some overlap")
                                      : cat("the boxes cover ", covered, " of the tensor's ",
                                            whole.numel(), " elements");
    return false;
  }
  // The boxes cover the tensor's elements exactly once iff the sum of their indicator
  // functions is the tensor's. A box's indicator is the running sum, over every
  // dimension, of +1 and -1 at its corners, and that running sum is invertible: so iff
  // the boxes' signed corners, with the tensor's taken away, cancel. Sorting them is
  // O(n log n) where comparing every pair was O(n²) (minutes at 200,000 chunks).
  // Dimensions of size 1 have the same two ends in every box: they are left out.
  std::vector<size_t> live;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] > 1)
      live.push_back(d);
  const size_t corners = (boxes.size() + 1) << live.size();
  if (corners > kMaxCorners) {
    problem = cat(boxes.size(), " boxes of ", live.size(), " dimensions: more than the ",
                  kMaxCorners, " corners mtc compares");
    return false;
  }
  std::vector<Key> positive, negative;
  positive.reserve(corners / 2 + 1);
  negative.reserve(corners / 2 + 1);
  for (const Box &b : boxes)
    addCorners(b, shape, live, positive, negative);
  addCorners(whole, shape, live, negative, positive); // taken away: its signs swap
  std::sort(positive.begin(), positive.end());
  std::sort(negative.begin(), negative.end());
  if (positive == negative)
    return true;
  // Where they differ is where boxes overlap (as many elements as they leave uncovered).
  auto at = std::mismatch(positive.begin(), positive.end(), negative.begin(), negative.end());
  const Key where = at.first == positive.end()    ? *at.second
                    : at.second == negative.end() ? *at.first
                                                  : std::min(*at.first, *at.second);
  problem = cat("the boxes overlap (and leave as many elements uncovered) at the corner ",
                pointOf(where, shape, live));
  // A few boxes: name two that overlap.
  if (boxes.size() <= 4096)
    for (size_t i = 0; i < boxes.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (std::optional<Box> both = intersect(boxes[i], boxes[j])) {
          problem = cat("boxes ", describe(boxes[j]), " and ", describe(boxes[i]), " overlap in ",
                        describe(*both));
          return false;
        }
  return false;
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
