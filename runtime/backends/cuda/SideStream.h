// What the CUDA backend's second stream has in flight, by the bytes its instructions read
// and write, so that an instruction on the main stream waits for it only where they meet
// (MT_CUDA_SIDE_STREAM=on: weight gradients beside the input gradients and the rest of
// backward). Host code, no CUDA: tested on the CPU.
#ifndef MT_RUNTIME_BACKENDS_CUDA_SIDESTREAM_H
#define MT_RUNTIME_BACKENDS_CUDA_SIDESTREAM_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mt {

/// Bytes [begin, end) of device memory.
struct ByteRange {
  uintptr_t begin = 0, end = 0;
  static ByteRange of(const void *data, std::size_t bytes) {
    const auto at = reinterpret_cast<uintptr_t>(data);
    return {at, at + bytes};
  }
  bool overlaps(const ByteRange &o) const {
    return begin < o.end && o.begin < end && begin < end && o.begin < o.end;
  }
};

/// The side stream's instructions since it last joined the main stream: an instruction
/// on the main stream must wait for them (mustWait) where it writes what they read or
/// write, or reads what they write; reads of what both read need no order.
class SideStreamHazards {
public:
  void issued(const std::vector<ByteRange> &reads, const std::vector<ByteRange> &writes) {
    reads_.insert(reads_.end(), reads.begin(), reads.end());
    writes_.insert(writes_.end(), writes.begin(), writes.end());
  }
  /// Whether anything issued is not yet waited for (every instruction reads or writes).
  bool pending() const { return !reads_.empty() || !writes_.empty(); }
  bool mustWait(const std::vector<ByteRange> &reads, const std::vector<ByteRange> &writes) const {
    for (const ByteRange &w : writes)
      if (meets(w, reads_) || meets(w, writes_))
        return true;
    for (const ByteRange &r : reads)
      if (meets(r, writes_))
        return true;
    return false;
  }
  /// The main stream has waited for everything issued.
  void joined() {
    reads_.clear();
    writes_.clear();
  }

private:
  static bool meets(const ByteRange &range, const std::vector<ByteRange> &ranges) {
    for (const ByteRange &r : ranges)
      if (range.overlaps(r))
        return true;
    return false;
  }
  std::vector<ByteRange> reads_, writes_;
};

} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_SIDESTREAM_H
