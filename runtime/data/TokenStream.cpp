#include "data/TokenStream.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <unistd.h>
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

Status mockDataset(int64_t vocabularySize, IndexedDataset &out) {
  if (vocabularySize < 2)
    return Status::failure(cat("mock data needs a vocabulary of 2 or more, not ", vocabularySize));
  const char *tmp = std::getenv("TMPDIR");
  const std::string base = tmp && *tmp ? tmp : "/tmp";
  std::string dir = base + "/mtrun-mock-XXXXXX";
  if (!::mkdtemp(dir.data()))
    return Status::failure(cat("cannot create a directory for the mock data in ", base,
                               " ($TMPDIR): ", std::strerror(errno)));
  const std::string prefix = dir + "/mock";
  Status written = [&] {
    IndexedDatasetWriter writer;
    MT_TRY(IndexedDatasetWriter::open(
        prefix, vocabularySize <= 65535 ? MegatronDType::UInt16 : MegatronDType::Int32, writer));
    SplitMix64 random(0);
    std::vector<int32_t> document;
    for (uint64_t tokens = 0; tokens < kMockTokens; tokens += document.size()) {
      document.resize(random.below(4095) + 1);
      for (size_t i = 0; i + 1 < document.size(); ++i)
        document[i] = static_cast<int32_t>((i + 1) % static_cast<uint64_t>(vocabularySize));
      document.back() = static_cast<int32_t>(vocabularySize - 1);
      MT_TRY(writer.addDocument(document));
    }
    MT_TRY(writer.finish());
    return IndexedDataset::open(prefix, out);
  }();
  // Mapped (or failed): the files go, whatever happened.
  for (const char *suffix : {".bin", ".idx"})
    ::unlink((prefix + suffix).c_str());
  ::rmdir(dir.c_str());
  return written;
}

std::vector<uint64_t> epochOrder(uint64_t numSamples, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order(numSamples);
  for (uint64_t i = 0; i < numSamples; ++i)
    order[i] = i;
  SplitMix64 random(mix(mix(seed) ^ epoch));
  for (uint64_t i = numSamples; i-- > 1;)
    std::swap(order[i], order[random.below(i + 1)]);
  return order;
}

Status parseSplit(const std::string &text, std::array<double, 3> &sizes) {
  // Sizes separated by commas, or by slashes where there is no comma; each a whole number
  // (spaces around it allowed), finite and not negative.
  const char separator = text.find(',') != std::string::npos ? ',' : '/';
  std::vector<double> parts;
  for (size_t begin = 0;;) {
    const size_t end = std::min(text.find(separator, begin), text.size());
    const size_t first = text.find_first_not_of(' ', begin);
    const size_t last = text.find_last_not_of(' ', end == 0 ? 0 : end - 1);
    const std::string field = first < end && last != std::string::npos && last >= first
                                  ? text.substr(first, last + 1 - first)
                                  : std::string();
    char *stop = nullptr;
    const double value = field.empty() ? 0 : std::strtod(field.c_str(), &stop);
    if (field.empty() || *stop || !std::isfinite(value))
      return Status::failure(cat("--split ", text, ": '", field, "' is not a number"));
    if (value < 0)
      return Status::failure(cat("--split ", text, ": sizes cannot be negative"));
    parts.push_back(value);
    if (end == text.size())
      break;
    begin = end + 1;
  }
  if (parts.empty() || parts.size() > 3)
    return Status::failure(cat("--split ", text,
                               ": expected up to three sizes (training, validation, test), "
                               "as in 949,50,1"));
  sizes = {0, 0, 0};
  std::copy(parts.begin(), parts.end(), sizes.begin());
  if (!(sizes[0] + sizes[1] + sizes[2] > 0))
    return Status::failure(cat("--split ", text, ": the sizes add up to 0"));
  return Status::success();
}

std::array<uint64_t, 4> splitDocuments(const std::array<double, 3> &sizes, uint64_t documents) {
  const double total = sizes[0] + sizes[1] + sizes[2];
  std::array<int64_t, 4> bounds = {0, 0, 0, 0};
  for (int i = 0; i < 3; ++i) // nearbyint rounds half to even, as Python's round
    bounds[i + 1] =
        bounds[i] +
        static_cast<int64_t>(std::nearbyint(sizes[i] / total * static_cast<double>(documents)));
  const int64_t excess = bounds[3] - static_cast<int64_t>(documents);
  std::array<uint64_t, 4> out = {0, 0, 0, documents};
  for (int i = 1; i < 3; ++i) // kept in order and in range where rounding would not
    out[i] = static_cast<uint64_t>(std::clamp<int64_t>(
        bounds[i] - excess, static_cast<int64_t>(out[i - 1]), static_cast<int64_t>(documents)));
  return out;
}

TokenStream::TokenStream(const IndexedDataset &data, int64_t seqLength, uint64_t seed,
                         DocumentRange documents)
    : data_(data), seqLength_(seqLength), seed_(seed) {
  if (seqLength <= 0) {
    unusable_ = cat(data.prefix(), ": sequence length must be positive, got ", seqLength);
    return;
  }
  const uint64_t end = std::min(documents.end, data.numDocuments());
  const uint64_t first = std::min(documents.first, end);
  firstToken_ = data.documentStart(first);
  const uint64_t tokens = data.documentStart(end) - firstToken_;
  const uint64_t window = static_cast<uint64_t>(seqLength) + 1;
  if (tokens < window) {
    unusable_ = cat(data.prefix(), ": ", documents.name, " has ", tokens,
                    " tokens, fewer than one sequence of ", seqLength, "+1");
    return;
  }
  // The last window needs one token past its inputs, for the last target.
  numSamples_ = (tokens - 1) / static_cast<uint64_t>(seqLength);
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
  const uint64_t first = firstToken_ + index * length;
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
