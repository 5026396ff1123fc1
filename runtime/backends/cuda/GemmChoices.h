// cuBLASLt's algorithm for each GEMM shape, chosen once by timing the heuristic's
// candidates and kept in a text file (MT_CUDA_GEMM_CHOICES), so that every later run
// takes the same algorithms and gives the same bits. The heuristic's first candidate is
// not always the fastest: a product whose tiles make less than one wave of the device,
// or one with an epilogue, may have a faster one further down its list.
//
// A line is `gemm KEY... algo W0 ... W7`: the shape's key (tokens without spaces: the
// device, its multiprocessors and cuBLASLt's version, then the shape, types, epilogue
// and alignments), then cublasLtMatmulAlgo_t's eight 64-bit words in hex. Lines starting
// with '#' (what each candidate took, written beside the choice) and blank lines are
// read past. Where a key appears twice (ranks of one run appending to one file), the
// first line holds. Each rank of the run that writes a line times its own candidates, so
// under several ranks that run may take other algorithms than those the file keeps, and
// differ in bits from the runs that read it; those runs agree with one another. Plain
// C++: the CPU's tests read and write it.
#ifndef MT_RUNTIME_BACKENDS_CUDA_GEMMCHOICES_H
#define MT_RUNTIME_BACKENDS_CUDA_GEMMCHOICES_H

#include "core/Status.h"

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace mt {

/// cublasLtMatmulAlgo_t's bytes.
using GemmAlgorithm = std::array<uint64_t, 8>;

class GemmChoices {
public:
  /// The choices in `path`; none where there is no such file yet. A line that is not one
  /// fails, naming the file and the line.
  static Status load(const std::string &path, GemmChoices &out);

  /// The algorithm kept for `key`, or null.
  const GemmAlgorithm *find(const std::string &key) const;
  /// Keeps `algorithm` for `key` (a first one holds) and appends its line to the file,
  /// after `comment` (lines of its own, each written with "# " before it).
  Status add(const std::string &key, const GemmAlgorithm &algorithm, const std::string &comment);

  const std::string &path() const { return path_; }
  size_t size() const { return chosen_.size(); }

  /// The line `add` appends for `key` (without its comment).
  static std::string line(const std::string &key, const GemmAlgorithm &algorithm);

private:
  std::string path_;
  std::map<std::string, GemmAlgorithm> chosen_;
  bool unterminated_ = false; // the file's last line lacks its newline
};

} // namespace mt

#endif
