// Megatron-LM's mmap indexed dataset, byte-compatible with its writer and reader
// (megatron/core/datasets/indexed_dataset.py, _IndexWriter and _IndexReader):
// PREFIX.bin holds the token ids of every sequence back to back in one integer dtype,
// PREFIX.idx says how long each sequence is, where it starts, and which sequences
// make up each document.
//
// PREFIX.idx, all little-endian:
//   9 bytes     magic "MMIDIDX\0\0"
//   uint64      version, 1
//   uint8       dtype code (Megatron's DType: 1 uint8, 2 int8, 3 int16, 4 int32,
//               5 int64, 6 float64, 7 float32, 8 uint16)
//   uint64      sequence count S
//   uint64      document-index count D
//   int32[S]    sequence lengths, in tokens
//   int64[S]    sequence pointers: byte offsets into PREFIX.bin
//   int64[D]    document indices: 0, then the sequence count at the end of each
//               document, so D = documents + 1
//
// The writer makes each document one sequence, as Megatron's preprocess_data.py does
// without sentence splitting; the reader accepts documents of several sequences too.
#ifndef MT_RUNTIME_DATA_INDEXEDDATASET_H
#define MT_RUNTIME_DATA_INDEXEDDATASET_H

#include "core/AtomicFile.h"
#include "core/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

/// Megatron's dtype codes for the .bin (DType in indexed_dataset.py).
enum class MegatronDType : uint8_t {
  UInt8 = 1,
  Int8 = 2,
  Int16 = 3,
  Int32 = 4,
  Int64 = 5,
  Float64 = 6,
  Float32 = 7,
  UInt16 = 8,
};

/// "uint16", "int32", ...; "unknown" for a code Megatron does not define.
const char *dtypeName(MegatronDType dtype);
/// Bytes of one item; 0 for a code Megatron does not define.
size_t itemBytes(MegatronDType dtype);
/// Whether token ids can be stored in `dtype` (the integer dtypes).
bool holdsTokenIds(MegatronDType dtype);
/// Megatron's DType.optimal_dtype: uint16 below 65500 ids, int32 otherwise.
MegatronDType tokenDTypeForVocabulary(int64_t vocabularySize);

/// Writes PREFIX.bin and PREFIX.idx. Both are written under temporary names and
/// renamed by finish(), so an interrupted run never leaves a half-written file under
/// the final name; a writer destroyed before finish() removes its temporary files.
class IndexedDatasetWriter {
public:
  /// Starts PREFIX.bin (an AtomicFile: a writer dropped before finish() leaves no
  /// file); fails when it cannot be created or `dtype` cannot hold token ids.
  static Status open(const std::string &prefix, MegatronDType dtype, IndexedDatasetWriter &out);

  /// Appends one document as one sequence; fails on a token `dtype` cannot represent.
  Status addDocument(const std::vector<int32_t> &tokens);

  /// Writes the index; once both files are on disk, renames PREFIX.bin, then PREFIX.idx.
  Status finish();

  uint64_t numDocuments() const { return lengths_.size(); }
  uint64_t numTokens() const { return tokens_; }

private:
  std::string prefix_;
  MegatronDType dtype_ = MegatronDType::Int32;
  AtomicFile bin_;
  std::vector<int32_t> lengths_;
  std::vector<uint8_t> encoded_;
  uint64_t tokens_ = 0;
};

/// PREFIX.bin and PREFIX.idx mapped read-only, every field checked at open.
class IndexedDataset {
public:
  IndexedDataset() = default;
  IndexedDataset(IndexedDataset &&other) noexcept;
  IndexedDataset &operator=(IndexedDataset &&other) noexcept;
  IndexedDataset(const IndexedDataset &) = delete;
  IndexedDataset &operator=(const IndexedDataset &) = delete;
  ~IndexedDataset();

  /// Maps both files and refuses, naming the file and the cause: a missing or empty
  /// file, a bad magic, an unsupported version or dtype, a truncated index, lengths or
  /// pointers that run past the .bin or leave gaps in it, document indices that do
  /// not rise from 0 to the sequence count, and a .bin whose size is not the sum of
  /// the lengths times the item size.
  static Status open(const std::string &prefix, IndexedDataset &out);

  const std::string &prefix() const { return prefix_; }
  const std::string &binPath() const { return binPath_; }
  MegatronDType dtype() const { return dtype_; }
  uint64_t numSequences() const { return numSequences_; }
  uint64_t numDocuments() const { return numDocumentIndices_ - 1; }
  /// Tokens in the .bin, which is one continuous stream of them.
  uint64_t numTokens() const { return numTokens_; }

  uint64_t sequenceLength(uint64_t sequence) const;
  /// Position of the sequence's first token in the token stream.
  uint64_t sequenceStart(uint64_t sequence) const;
  /// Position of document `document`'s first token in the token stream; numTokens() for
  /// `document` == numDocuments().
  uint64_t documentStart(uint64_t document) const;
  /// The document that holds the token at `position`.
  uint64_t documentOf(uint64_t position) const;

  /// The token at `position` of the stream; `position` < numTokens().
  int64_t tokenAt(uint64_t position) const;
  /// Copies tokens [first, first + count) of the stream; fails when the range runs
  /// past the end or an int64 token does not fit in int32.
  Status copyTokens(uint64_t first, uint64_t count, int32_t *out) const;

  /// Smallest and largest token id. The first call reads the whole .bin.
  int64_t minToken() const;
  int64_t maxToken() const;

private:
  struct Mapping {
    const uint8_t *data = nullptr;
    size_t size = 0;
  };
  static void unmap(Mapping &mapping);
  // The .idx arrays, read in place: they sit at offsets (34, 34 + 4S, 34 + 12S) that
  // are not aligned for their types.
  int32_t lengthEntry(uint64_t sequence) const;
  int64_t pointerEntry(uint64_t sequence) const;
  int64_t documentIndexEntry(uint64_t entry) const;
  Status validate();
  void scanTokenRange() const;

  std::string prefix_, idxPath_, binPath_;
  Mapping idx_, bin_;
  MegatronDType dtype_ = MegatronDType::Int32;
  uint64_t numSequences_ = 0;
  uint64_t numDocumentIndices_ = 1;
  uint64_t numTokens_ = 0;
  mutable bool tokenRangeKnown_ = false;
  mutable int64_t minToken_ = 0, maxToken_ = 0;
};

} // namespace mt

#endif
