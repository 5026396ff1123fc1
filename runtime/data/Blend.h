// A blend of datasets, as Megatron's --data-path W1 P1 W2 P2 ... mixes them: the weights
// are normalised to fractions w (over their sum as numpy sums them), and position i of the
// blend reads the next position of dataset d(i), the one furthest behind its share:
//
//   d(i) = the first d with the largest  w_d · max(i, 1) − n_d(i)
//
// where n_d(i) counts the positions before i that read dataset d (Megatron's
// build_blending_indices, in double as it computes it), so that every dataset's count
// follows w_d · n closely. A dataset's own positions are its stream's (TokenStream:
// shuffled, epoch after epoch), so a dataset smaller than its share is read again, as
// Megatron's blend does.
//
// The rule is sequential, so the blend keeps n at the start of every block of positions
// it has reached (kBlock of them) and the datasets of one block: reading position p
// costs nothing for the block at hand and a block's kBlock steps for another, and the
// first read past position P (a resumed run's) walks to P once.
#ifndef MT_RUNTIME_DATA_BLEND_H
#define MT_RUNTIME_DATA_BLEND_H

#include "core/Status.h"
#include "data/TokenStream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

class Blend {
public:
  /// Positive, finite weights of the datasets, in order (normalised here).
  explicit Blend(std::vector<double> weights);

  size_t datasets() const { return weights_.size(); }
  /// The fractions the weights normalise to.
  const std::vector<double> &fractions() const { return weights_; }
  /// The dataset that position `position` of the blend reads, and its position there.
  void locate(uint64_t position, size_t &dataset, uint64_t &inDataset);

  static constexpr uint64_t kBlock = uint64_t{1} << 16;

private:
  /// Walks `counts` (n at `position`) through `positions` more positions, calling
  /// visit(dataset, its position) for each.
  template <typename Visit>
  void walk(uint64_t position, std::vector<uint64_t> &counts, uint64_t positions, Visit visit) const;

  std::vector<double> weights_;
  std::vector<std::vector<uint64_t>> starts_; // n at the start of each block reached
  uint64_t cached_ = UINT64_MAX;              // the block whose datasets are held
  std::vector<uint32_t> dataset_;             // of each position of that block
  std::vector<uint64_t> inDataset_;
};

/// Samples of a blend of streams (one stream: its own samples).
class BlendedStream {
public:
  /// `streams` (one per weight) must outlive this.
  BlendedStream(std::vector<TokenStream *> streams, std::vector<double> weights)
      : streams_(std::move(streams)), blend_(std::move(weights)) {}
  /// Copies the sample at `position` of the blend into seqLength inputs and targets.
  Status sample(uint64_t position, int32_t *inputs, int32_t *targets);

private:
  std::vector<TokenStream *> streams_;
  Blend blend_;
};

/// Megatron's --data-path: pairs WEIGHT PREFIX (a weight a positive finite number), or
/// prefixes alone, which Megatron weighs by their samples: each dataset's weight in a
/// split is then the number of samples it has there (kBySamples). `words` in order; one
/// word is one prefix, even one that reads as a number. Refuses a bad weight, weights
/// whose sum is not finite, prefixes of which some have a weight and others not, and no
/// words, naming `flag`.
struct DataSource {
  static constexpr double kBySamples = 0;
  double weight = 1;
  std::string prefix;
};
Status parseDataPath(const std::vector<std::string> &words, std::vector<DataSource> &sources,
                     const std::string &flag = "--data");

} // namespace mt

#endif // MT_RUNTIME_DATA_BLEND_H
