// Dropout's keep masks on the CPU, many elements at a time: the decisions of
// rng::dropoutKeeps (core/Rng.h), bit for bit, with Philox4x32-10 evaluated for eight
// counters at once where the machine has AVX2. A mask depends only on the global indices
// it covers, never on how a tensor is cut into runs or how many threads draw it.
#ifndef MT_RUNTIME_BACKENDS_CPU_DROPOUTMASK_H
#define MT_RUNTIME_BACKENDS_CPU_DROPOUTMASK_H

#include <cstdint>

namespace mt::cpu {

/// One dropout stream: the tensor `stream` produces in micro-batch `microBatch` of
/// `step`, dropping with probability `rate`.
struct DropoutStream {
  uint64_t seed = 0;
  uint32_t step = 0, microBatch = 0, stream = 0;
  double rate = 0;
};

/// keep[k] = rng::dropoutKeeps(..., first + k, rate) for k < n: 1 kept, 0 dropped.
void dropoutKeeps(const DropoutStream &s, uint64_t first, int64_t n, uint8_t *keep);

/// The same from the portable Philox only (the reference the vector path is tested on).
void dropoutKeepsScalar(const DropoutStream &s, uint64_t first, int64_t n, uint8_t *keep);

} // namespace mt::cpu

#endif // MT_RUNTIME_BACKENDS_CPU_DROPOUTMASK_H
