// GPT training samples from an indexed dataset, as Megatron's GPT dataset cuts them:
// the .bin is one stream of tokens (each document already ends with the EOD token),
// and sample i is the window of seqLength + 1 tokens that starts at token
// i * seqLength; its first seqLength tokens are the inputs and its last seqLength the
// targets, the next token at every position.
//
// Samples are visited in a fresh order every epoch. The order is fully specified, so
// that every machine and standard library visits the same samples, and a run resumed
// from a checkpoint's position continues exactly where it stopped:
//
//   mix(z)      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//               z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//               return z ^ (z >> 31)                      (SplitMix64's finalizer)
//   next()      state += 0x9E3779B97F4A7C15; return mix(state)       (SplitMix64)
//   below(n)    r = next() until r >= (2^64 - n) mod n; return r mod n
//               (rejection keeps every value equally likely)
//   epoch e     state = mix(mix(seed) ^ e); order = 0, 1, ..., N-1;
//               for i = N-1 down to 1: swap(order[i], order[below(i + 1)])
//               (Fisher-Yates)
//
// Position p (samples consumed since the start of training) reads sample
// order[p mod N] of epoch p / N.
//
// A stream may read a run of documents only: a split of the data into training,
// validation and test documents, cut as Megatron's --split cuts them (splitDocuments).
// Its samples are then the windows of that run's tokens, counted from its first.
#ifndef MT_RUNTIME_DATA_TOKENSTREAM_H
#define MT_RUNTIME_DATA_TOKENSTREAM_H

#include "core/Status.h"
#include "data/IndexedDataset.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mt {

/// Megatron's --mock-data, by the generator above: documents of lengths uniform in
/// [1, 4096) (SplitMix64 from state 0, below(4095) + 1 each), document d of length n the
/// tokens 1, 2, ..., n − 1 (mod the vocabulary) and then the end-of-document token,
/// vocabularySize − 1, as Megatron's MockGPTLowLevelDataset forms them, until
/// kMockTokens tokens. Written to a temporary directory under $TMPDIR (or /tmp), mapped,
/// and removed at once: `out` reads it from memory, and nothing is left behind.
inline constexpr uint64_t kMockTokens = uint64_t{1} << 24;
Status mockDataset(int64_t vocabularySize, IndexedDataset &out);

/// The order in which epoch `epoch` visits `numSamples` samples (see above).
std::vector<uint64_t> epochOrder(uint64_t numSamples, uint64_t seed, uint64_t epoch);

/// Megatron's --split: the relative sizes of the training, validation and test splits,
/// written "949,50,1" or "949/50/1" (spaces around a size allowed; missing sizes are 0).
/// Refuses what is not a number, a negative size, more than three, and sizes that add up
/// to 0.
Status parseSplit(const std::string &text, std::array<double, 3> &sizes);

/// The documents of each split, as Megatron cuts them (_get_split_indices): with the
/// sizes normalised to fractions f, b0 = 0 and b(i+1) = b(i) + round(f(i)·documents),
/// half to even; then every boundary after b0 moves by the same amount so that b3 =
/// documents. Split i holds documents [b(i), b(i+1)).
std::array<uint64_t, 4> splitDocuments(const std::array<double, 3> &sizes, uint64_t documents);

/// Documents [first, end) of a dataset, and what messages call them.
struct DocumentRange {
  uint64_t first = 0, end = UINT64_MAX; // UINT64_MAX: to the last document
  std::string name = "data";
};

class TokenStream {
public:
  /// `data` must outlive the stream. A sequence length that is not positive, or
  /// documents shorter than one sample, is reported by every call that reads samples.
  TokenStream(const IndexedDataset &data, int64_t seqLength, uint64_t seed,
              DocumentRange documents = {});

  int64_t seqLength() const { return seqLength_; }
  /// Samples per epoch: (tokens - 1) / seqLength.
  uint64_t numSamples() const { return numSamples_; }

  /// The sample that position `position` reads.
  Status sampleIndex(uint64_t position, uint64_t &index);

  /// Copies the sample at `position` into seqLength inputs and seqLength targets.
  Status sample(uint64_t position, int32_t *inputs, int32_t *targets);

  /// Whether there is at least one sample; why not, if not.
  bool usable() const { return unusable_.empty(); }
  const std::string &whyUnusable() const { return unusable_; }

  /// Fails, naming the token id, its position and document, and the vocabulary size,
  /// when a token id is negative or not below `vocabularySize`.
  Status checkVocabulary(int64_t vocabularySize) const;

private:
  const IndexedDataset &data_;
  int64_t seqLength_;
  uint64_t seed_;
  uint64_t firstToken_ = 0; // of the documents read
  uint64_t numSamples_ = 0;
  std::string unusable_;
  std::vector<uint64_t> order_;
  uint64_t orderEpoch_ = 0;
  bool orderBuilt_ = false;
};

} // namespace mt

#endif
