// Counter-based randomness (Philox4x32-10, Salmon et al. 2011, from Random123): every
// random number is a pure function of (seed, what it is for, global element index), so
// no layout, sharding, recomputation or resume can change a parameter's initial value
// or a dropout mask. Header-only so the CUDA backend computes the same bits.
#ifndef MT_RUNTIME_CORE_RNG_H
#define MT_RUNTIME_CORE_RNG_H

#include "core/HostDevice.h"

#include <Random123/philox.h>

#include <cmath>
#include <cstdint>
#include <string_view>

namespace mt::rng {

using Philox = r123::Philox4x32;

/// Marks an initialisation counter; a training step never reaches it.
inline constexpr uint32_t kInitStep = 0xFFFFFFFFu;

MT_HOST_DEVICE inline Philox::ctr_type block(uint64_t seed, uint32_t c0, uint32_t c1, uint32_t c2,
                              uint32_t c3) {
  Philox::ctr_type ctr = {{c0, c1, c2, c3}};
  Philox::key_type key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  return Philox()(ctr, key);
}

/// The exact 24-bit uniform in [0, 1) of a 32-bit word (exact in float and double).
MT_HOST_DEVICE inline double uniform24(uint32_t word) { return (word >> 8) * (1.0 / 16777216.0); }

/// The Philox block of dropout element `index` of `stream`: the low 32 bits of index/4
/// count in the first word; the bits above them (tensors of more than 2^34 elements, such
/// as a large model's attention probabilities) go above the stream's 24 bits.
MT_HOST_DEVICE inline Philox::ctr_type dropoutBlock(uint64_t seed, uint32_t step,
                                                    uint32_t microBatch, uint32_t stream,
                                                    uint64_t index) {
  return block(seed, static_cast<uint32_t>(index >> 2),
               stream + (static_cast<uint32_t>(index >> 34) << 24), microBatch, step);
}

/// Whether dropout keeps element `index` of the tensor that `stream` produces in
/// micro-batch `microBatch` of `step`. One Philox block serves four elements.
MT_HOST_DEVICE inline bool dropoutKeeps(uint64_t seed, uint32_t step, uint32_t microBatch,
                                        uint32_t stream, uint64_t index, double rate) {
  return uniform24(dropoutBlock(seed, step, microBatch, stream, index).v[index & 3]) >= rate;
}

/// dropoutKeeps over runs of consecutive indices: one Philox block serves four of them,
/// so it is computed once per four, not once per element. The same bits.
class DropoutMask {
public:
  MT_HOST_DEVICE DropoutMask(uint64_t seed, uint32_t step, uint32_t microBatch,
                             uint32_t stream, double rate)
      : seed_(seed), step_(step), microBatch_(microBatch), stream_(stream), rate_(rate) {}

  MT_HOST_DEVICE bool keeps(uint64_t index) {
    if ((index >> 2) != blockIndex_ || !valid_) {
      words_ = dropoutBlock(seed_, step_, microBatch_, stream_, index);
      blockIndex_ = index >> 2;
      valid_ = true;
    }
    return uniform24(words_.v[index & 3]) >= rate_;
  }

private:
  uint64_t seed_;
  uint32_t step_, microBatch_, stream_;
  double rate_;
  uint64_t blockIndex_ = 0;
  bool valid_ = false;
  Philox::ctr_type words_{};
};

/// FNV-1a: the stream of a parameter is its name, so init is independent of order.
inline uint64_t nameHash(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

/// A standard normal for element `index` of the parameter named by `nameHash`
/// (Box-Muller on one Philox block per two elements).
inline double standardNormal(uint64_t seed, uint64_t nameHash, uint64_t index) {
  auto r = block(seed, static_cast<uint32_t>(index >> 1), static_cast<uint32_t>(nameHash),
                 static_cast<uint32_t>(nameHash >> 32), kInitStep);
  double u1 = (static_cast<double>(r.v[0]) + 1.0) * (1.0 / 4294967296.0); // (0, 1]
  double u2 = static_cast<double>(r.v[1]) * (1.0 / 4294967296.0);         // [0, 1)
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 6.283185307179586476925286766559 * u2;
  return (index & 1) ? radius * std::sin(angle) : radius * std::cos(angle);
}

} // namespace mt::rng

#endif
