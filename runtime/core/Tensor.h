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
  /// Element i of an index tensor (i32 or i64: token ids, targets, experts).
  int64_t index(int64_t i) const {
    return dtype == plan::DType::I64 ? as<int64_t>()[i] : as<int32_t>()[i];
  }
  /// Sets element i of an index tensor.
  void setIndex(int64_t i, int64_t value) const {
    if (dtype == plan::DType::I64)
      as<int64_t>()[i] = value;
    else
      as<int32_t>()[i] = static_cast<int32_t>(value);
  }
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

/// Which rows of a sequence a rank holds: a block of `parts` equal ones (sequence
/// parallelism's) of its context-parallel share. Context parallelism balances causal
/// attention as Megatron does: the sequence is cut into 2·cp chunks, and context rank r
/// holds chunks r and 2·cp − 1 − r, in that order. Maps a local row to its position in
/// the whole sequence.
struct SequenceMap {
  int64_t offset = 0;            // the block's first row within the share
  int64_t chunk = 0;             // rows per chunk; 0: no context parallelism
  int64_t first = 0, second = 0; // the positions of the two chunks' first rows
  int64_t total = 0;             // the whole sequence's rows (0: the local rows are all of it)

  SequenceMap() = default;
  /// `rows` local rows, block `index` of `parts` of context rank `cpRank` of `cpSize`'s
  /// share.
  SequenceMap(int64_t rows, int index, int parts, int cpRank, int cpSize) {
    offset = static_cast<int64_t>(index) * rows;
    total = rows * parts * cpSize;
    if (cpSize > 1) {
      chunk = total / (2 * cpSize);
      first = cpRank * chunk;
      second = (2 * cpSize - 1 - cpRank) * chunk;
    }
  }
  MT_HOST_DEVICE int64_t operator()(int64_t row) const {
    const int64_t at = offset + row;
    return chunk == 0 ? at : at < chunk ? first + at : second + (at - chunk);
  }
  /// The local row at `position`, or -1 where this rank holds none.
  MT_HOST_DEVICE int64_t rowOf(int64_t position) const {
    int64_t at = position;
    if (chunk != 0)
      at = position >= first && position < first + chunk     ? position - first
           : position >= second && position < second + chunk ? chunk + position - second
                                                             : -1;
    return at < offset ? -1 : at - offset; // the caller bounds it by its rows
  }
  /// How many of the block's first `rows` rows hold positions before `position`: a prefix,
  /// as positions ascend along the rows (a share's first chunk precedes its second).
  MT_HOST_DEVICE int64_t rowsBefore(int64_t position, int64_t rows) const {
    const int64_t at =
        chunk == 0 ? position : within(position, first, chunk) + within(position, second, chunk);
    return within(at, offset, rows);
  }
  /// How many of n rows from `start` on come before `position`.
  MT_HOST_DEVICE static int64_t within(int64_t position, int64_t start, int64_t n) {
    return position < start ? 0 : position - start < n ? position - start : n;
  }
  /// Local rows from a multiple of run() on, run() of them, have consecutive positions.
  int64_t run(int64_t rows) const {
    if (chunk == 0)
      return rows;
    int64_t a = rows, b = chunk; // the greatest common divisor: blocks and chunks both
    while (b != 0) {             // start at its multiples
      const int64_t r = a % b;
      a = b;
      b = r;
    }
    return a;
  }
};

/// The chunks a context-parallel group's shares [cp·B, S/cp, ...] hold of the sequences
/// [B, S, ...] in order (ContextOrder): copy(shareRow, wholeRow, rows) for each chunk of
/// `rows` rows, from row shareRow of the shares and row wholeRow of the sequences.
template <typename Copy> void forEachContextChunk(int64_t b, int64_t s, int64_t cp, Copy copy) {
  const int64_t c = s / (2 * cp);
  for (int64_t r = 0; r < cp; ++r)
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t chunk = half == 0 ? r : 2 * cp - 1 - r;
        copy((r * b + bi) * 2 * c + half * c, bi * s + chunk * c, c);
      }
}

/// A block of a larger tensor: the local tensor is block `index` of `parts` equal
/// blocks of the global one along `dim` (of a context-parallel share, with `cp`). Maps
/// local element indices to global ones, so that anything defined per global element
/// (initial values, dropout masks) is the same under every layout.
struct ShardMap {
  int64_t outer = 1, localAxis = 1, inner = 1, globalAxis = 1, runAxis = 1;
  SequenceMap axis; // local index along dim -> global

  ShardMap() = default;
  ShardMap(const TensorView &local, int dim, int index, int parts, int cpRank = 0, int cpSize = 1) {
    if (dim < 0 || parts * cpSize == 1)
      return; // replicated: global index = local index
    for (int i = 0; i < dim; ++i)
      outer *= local.shape[i];
    localAxis = local.shape[dim];
    for (int i = dim + 1; i < local.rank; ++i)
      inner *= local.shape[i];
    axis = SequenceMap(localAxis, index, parts, cpRank, cpSize);
    globalAxis = axis.total;
    runAxis = axis.run(localAxis);
  }
  /// Local elements from a multiple of run() on, run() of them, have consecutive global
  /// indices (a shard's whole block along its axis, or a part of one in one chunk).
  MT_HOST_DEVICE int64_t run() const {
    return globalAxis == localAxis ? INT64_MAX : runAxis * inner;
  }
  MT_HOST_DEVICE int64_t global(int64_t local) const {
    if (globalAxis == localAxis)
      return local;
    const int64_t in = local % inner, rest = local / inner;
    const int64_t at = rest % localAxis, out = rest / localAxis;
    return (out * globalAxis + axis(at)) * inner + in;
  }
};

} // namespace mt

#endif
