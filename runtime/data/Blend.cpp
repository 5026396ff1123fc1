#include "data/Blend.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mt {

namespace {

/// numpy.sum of n doubles (its pairwise summation): how Megatron sums the weights it
/// normalises, so that the fractions, and the picks, are its own to the bit.
double pairwiseSum(const double *a, size_t n) {
  if (n < 8) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i)
      sum += a[i];
    return sum;
  }
  if (n <= 128) {
    double r[8];
    std::copy_n(a, 8, r);
    size_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; ++j)
        r[j] += a[i + j];
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i)
      sum += a[i];
    return sum;
  }
  const size_t half = n / 2 - n / 2 % 8;
  return pairwiseSum(a, half) + pairwiseSum(a + half, n - half);
}

} // namespace

Blend::Blend(std::vector<double> weights) : weights_(std::move(weights)) {
  const double sum = pairwiseSum(weights_.data(), weights_.size());
  for (double &w : weights_)
    w /= sum;
  starts_.push_back(std::vector<uint64_t>(weights_.size(), 0));
}

template <typename Visit>
void Blend::walk(uint64_t position, std::vector<uint64_t> &counts, uint64_t positions,
                 Visit visit) const {
  for (uint64_t i = position; i < position + positions; ++i) {
    const double at = std::max(static_cast<double>(i), 1.0);
    size_t behind = 0;
    double most = weights_[0] * at - static_cast<double>(counts[0]);
    for (size_t d = 1; d < weights_.size(); ++d)
      if (const double error = weights_[d] * at - static_cast<double>(counts[d]); error > most) {
        most = error;
        behind = d;
      }
    visit(behind, counts[behind]++);
  }
}

void Blend::locate(uint64_t position, size_t &dataset, uint64_t &inDataset) {
  if (weights_.size() == 1) {
    dataset = 0;
    inDataset = position;
    return;
  }
  const uint64_t block = position / kBlock;
  while (starts_.size() <= block) {
    std::vector<uint64_t> counts = starts_.back();
    walk((starts_.size() - 1) * kBlock, counts, kBlock, [](size_t, uint64_t) {});
    starts_.push_back(std::move(counts));
  }
  if (cached_ != block) {
    dataset_.clear();
    inDataset_.clear();
    std::vector<uint64_t> counts = starts_[block];
    walk(block * kBlock, counts, kBlock, [&](size_t d, uint64_t n) {
      dataset_.push_back(static_cast<uint32_t>(d));
      inDataset_.push_back(n);
    });
    cached_ = block;
  }
  dataset = dataset_[position % kBlock];
  inDataset = inDataset_[position % kBlock];
}

Status BlendedStream::sample(uint64_t position, int32_t *inputs, int32_t *targets) {
  size_t dataset = 0;
  uint64_t inDataset = 0;
  blend_.locate(position, dataset, inDataset);
  return streams_[dataset]->sample(inDataset, inputs, targets);
}

Status parseDataPath(const std::vector<std::string> &words, std::vector<DataSource> &sources,
                     const std::string &flag) {
  sources.clear();
  if (words.size() == 1) {
    sources.push_back({1, words[0]});
    return Status::success();
  }
  if (words.empty())
    return Status::failure(flag + ": no prefix");
  auto number = [](const std::string &word) {
    char *end = nullptr;
    std::strtod(word.c_str(), &end);
    return !word.empty() && *end == '\0';
  };
  // Weighted when every word in a weight's place reads as a number, as Megatron reads an
  // even list; prefixes alone when no word does. Megatron reads any odd list as prefixes
  // alone, and a list with a number in it is refused here: a prefix that reads as a
  // number is written ./2024.
  size_t numbers = 0, places = 0;
  for (size_t i = 0; i < words.size(); i += 2, ++places)
    numbers += number(words[i]);
  if (words.size() % 2 != 0 || numbers < places) {
    bool any = numbers > 0;
    for (size_t i = 1; i < words.size(); i += 2)
      any = any || number(words[i]);
    if (any)
      return Status::failure(cat(flag, ": give every prefix a weight (W1 P1 W2 P2 ...) or none ",
                                 "(P1 P2 ...); ", words.size(), " words mix the two (a prefix ",
                                 "that reads as a number: ./2024)"));
    for (const std::string &prefix : words)
      sources.push_back({DataSource::kBySamples, prefix});
    return Status::success();
  }
  double sum = 0;
  for (size_t i = 0; i < words.size(); i += 2) {
    const double weight = std::strtod(words[i].c_str(), nullptr);
    if (!std::isfinite(weight) || !(weight > 0))
      return Status::failure(cat(flag, ": the weight of ", words[i + 1], " must be a positive ",
                                 "number, not '", words[i], "'"));
    sources.push_back({weight, words[i + 1]});
    sum += weight;
  }
  if (!std::isfinite(sum))
    return Status::failure(flag + ": the weights add up past the largest number");
  return Status::success();
}

} // namespace mt
