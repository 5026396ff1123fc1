#include "data/TokenStream.h"

#include <sstream>
#include <utility>

namespace mt {
namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// SplitMix64 (Steele, Lea and Flood 2014): small, fast, and defined by the three
/// lines above rather than by a standard library.
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next() { return mix(state_ += 0x9E3779B97F4A7C15ull); }
  /// Uniform in [0, n), n > 0.
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n; // (2^64 - n) mod n
    uint64_t r = next();
    while (r < threshold)
      r = next();
    return r % n;
  }

private:
  uint64_t state_;
};

} // namespace

std::vector<uint64_t> epochOrder(uint64_t numSamples, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order(numSamples);
  for (uint64_t i = 0; i < numSamples; ++i)
    order[i] = i;
  SplitMix64 random(mix(mix(seed) ^ epoch));
  for (uint64_t i = numSamples; i-- > 1;)
    std::swap(order[i], order[random.below(i + 1)]);
  return order;
}

TokenStream::TokenStream(const IndexedDataset &data, int64_t seqLength, uint64_t seed)
    : data_(data), seqLength_(seqLength), seed_(seed) {
  if (seqLength <= 0) {
    unusable_ = cat(data.prefix(), ": sequence length must be positive, got ", seqLength);
    return;
  }
  const uint64_t window = static_cast<uint64_t>(seqLength) + 1;
  if (data.numTokens() < window) {
    unusable_ = cat(data.prefix(), ": data has ", data.numTokens(),
                    " tokens, fewer than one sequence of ", seqLength, "+1");
    return;
  }
  // The last window needs one token past its inputs, for the last target.
  numSamples_ = (data.numTokens() - 1) / static_cast<uint64_t>(seqLength);
}

Status TokenStream::sampleIndex(uint64_t position, uint64_t &index) {
  if (!unusable_.empty())
    return Status::failure(unusable_);
  const uint64_t epoch = position / numSamples_;
  if (!orderBuilt_ || orderEpoch_ != epoch) {
    order_ = epochOrder(numSamples_, seed_, epoch);
    orderEpoch_ = epoch;
    orderBuilt_ = true;
  }
  index = order_[position % numSamples_];
  return Status::success();
}

Status TokenStream::sample(uint64_t position, int32_t *inputs, int32_t *targets) {
  uint64_t index = 0;
  Status found = sampleIndex(position, index);
  if (!found.ok())
    return found;
  const auto length = static_cast<uint64_t>(seqLength_);
  const uint64_t first = index * length;
  Status copied = data_.copyTokens(first, length, inputs);
  if (!copied.ok())
    return copied;
  return data_.copyTokens(first + 1, length, targets);
}

Status TokenStream::checkVocabulary(int64_t vocabularySize) const {
  if (vocabularySize <= 0)
    return Status::failure(
        cat(data_.prefix(), ": vocabulary size must be positive, got ", vocabularySize));
  if (data_.minToken() >= 0 && data_.maxToken() < vocabularySize)
    return Status::success();
  for (uint64_t position = 0; position < data_.numTokens(); ++position) {
    const int64_t token = data_.tokenAt(position);
    if (token < 0 || token >= vocabularySize)
      return Status::failure(cat(data_.binPath(), ": token id ", token, " at position ", position,
                                 " (document ", data_.documentOf(position),
                                 ") is outside the vocabulary of ", vocabularySize, " ids [0, ",
                                 vocabularySize, ")"));
  }
  return Status::success();
}

} // namespace mt
