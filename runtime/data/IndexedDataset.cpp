#include "data/IndexedDataset.h"
#include "core/InputFile.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <sstream>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mt {
namespace {

// _INDEX_HEADER in indexed_dataset.py; the version that follows it is always 1.
constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kIndexVersion = 1;
// Magic, version, dtype code, sequence count, document-index count: where
// _IndexReader starts reading the arrays.
constexpr uint64_t kIndexHeaderBytes = 9 + 8 + 1 + 8 + 8;

std::string systemError() { return std::strerror(errno); }

uint64_t loadLittleEndian(const uint8_t *in, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i)
    value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

void storeLittleEndian(uint8_t *out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i)
    out[i] = static_cast<uint8_t>(value >> (8 * i));
}

/// What indexed_dataset.py's DType says of each code, in code order from UInt8 (1).
struct DTypeInfo {
  const char *name;
  size_t bytes;
  bool integer, isSigned;
};
constexpr DTypeInfo kDTypes[] = {{"uint8", 1, true, false},   {"int8", 1, true, true},
                                 {"int16", 2, true, true},    {"int32", 4, true, true},
                                 {"int64", 8, true, true},    {"float64", 8, false, true},
                                 {"float32", 4, false, true}, {"uint16", 2, true, false}};

/// The row of `dtype`, or null for a code Megatron does not define.
const DTypeInfo *infoOf(MegatronDType dtype) {
  const size_t code = static_cast<size_t>(dtype);
  return code >= 1 && code <= std::size(kDTypes) ? &kDTypes[code - 1] : nullptr;
}

/// The token id stored at `in` in an integer dtype.
int64_t decodeToken(const uint8_t *in, MegatronDType dtype) {
  const DTypeInfo &info = *infoOf(dtype);
  const uint64_t raw = loadLittleEndian(in, info.bytes);
  const unsigned unused = 64 - 8 * static_cast<unsigned>(info.bytes);
  // Sign-extended from the item's top bit where the dtype is signed.
  return info.isSigned ? static_cast<int64_t>(raw << unused) >> unused
                       : static_cast<int64_t>(raw);
}

/// The token ids an integer dtype can represent.
std::pair<int64_t, int64_t> tokenLimits(MegatronDType dtype) {
  const DTypeInfo &info = *infoOf(dtype);
  const unsigned bits = 8 * static_cast<unsigned>(info.bytes);
  if (bits == 64)
    return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  if (info.isSigned)
    return {-(int64_t{1} << (bits - 1)), (int64_t{1} << (bits - 1)) - 1};
  return {0, (int64_t{1} << bits) - 1};
}

std::string describe(MegatronDType dtype) {
  return cat(dtypeName(dtype), " (code ", static_cast<int>(dtype), ")");
}

Status mapReadOnly(const std::string &path, const uint8_t *&data, size_t &size) {
  int fd = -1;
  uint64_t bytes = 0;
  MT_TRY(openRegularFile(path, fd, bytes));
  if (bytes == 0) {
    ::close(fd);
    return Status::failure(cat(path, ": empty file"));
  }
  void *mapped = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
  std::string error = mapped == MAP_FAILED ? systemError() : "";
  ::close(fd);
  if (mapped == MAP_FAILED)
    return Status::failure(cat(path, ": cannot map: ", error));
  data = static_cast<const uint8_t *>(mapped);
  size = static_cast<size_t>(bytes);
  return Status::success();
}

} // namespace

const char *dtypeName(MegatronDType dtype) {
  const DTypeInfo *info = infoOf(dtype);
  return info ? info->name : "unknown";
}

size_t itemBytes(MegatronDType dtype) {
  const DTypeInfo *info = infoOf(dtype);
  return info ? info->bytes : 0;
}

bool holdsTokenIds(MegatronDType dtype) {
  const DTypeInfo *info = infoOf(dtype);
  return info && info->integer;
}

MegatronDType tokenDTypeForVocabulary(int64_t vocabularySize) {
  return vocabularySize < 65500 ? MegatronDType::UInt16 : MegatronDType::Int32;
}

// ---- writer -------------------------------------------------------------------------

Status IndexedDatasetWriter::open(const std::string &prefix, MegatronDType dtype,
                                  IndexedDatasetWriter &out) {
  if (!holdsTokenIds(dtype))
    return Status::failure(cat(prefix, ": dtype ", describe(dtype), " cannot hold token ids"));
  IndexedDatasetWriter writer;
  writer.prefix_ = prefix;
  writer.dtype_ = dtype;
  MT_TRY(AtomicFile::create(prefix + ".bin", writer.bin_));
  out = std::move(writer);
  return Status::success();
}

Status IndexedDatasetWriter::addDocument(const std::vector<int32_t> &tokens) {
  if (!bin_.isOpen())
    return Status::failure(cat(prefix_, ": the writer is not open"));
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return Status::failure(cat(prefix_, ": document ", lengths_.size(), " has ", tokens.size(),
                               " tokens, more than an int32 sequence length holds"));
  const size_t width = itemBytes(dtype_);
  const auto [lowest, highest] = tokenLimits(dtype_);
  encoded_.resize(tokens.size() * width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < lowest || tokens[i] > highest)
      return Status::failure(cat(prefix_, ": token ", tokens[i], " of document ", lengths_.size(),
                                 " does not fit the dataset's dtype ", dtypeName(dtype_)));
    storeLittleEndian(encoded_.data() + i * width, static_cast<uint64_t>(tokens[i]), width);
  }
  MT_TRY(bin_.write(encoded_.data(), encoded_.size()));
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  tokens_ += tokens.size();
  return Status::success();
}

Status IndexedDatasetWriter::finish() {
  if (!bin_.isOpen())
    return Status::failure(cat(prefix_, ": the writer is not open"));
  if (lengths_.empty())
    return Status::failure(cat(prefix_, ": no documents to write"));

  // _IndexWriter.__enter__ then write(): header, lengths, pointers, document indices.
  const uint64_t count = lengths_.size();
  std::vector<uint8_t> index(kIndexHeaderBytes + count * (4 + 8) + (count + 1) * 8);
  uint8_t *at = index.data();
  std::memcpy(at, kIndexMagic, sizeof(kIndexMagic));
  storeLittleEndian(at + 9, kIndexVersion, 8);
  at[17] = static_cast<uint8_t>(dtype_);
  storeLittleEndian(at + 18, count, 8);
  storeLittleEndian(at + 26, count + 1, 8);
  at += kIndexHeaderBytes;
  for (int32_t length : lengths_) {
    storeLittleEndian(at, static_cast<uint32_t>(length), 4);
    at += 4;
  }
  uint64_t pointer = 0;
  for (int32_t length : lengths_) {
    storeLittleEndian(at, pointer, 8);
    at += 8;
    pointer += static_cast<uint64_t>(length) * itemBytes(dtype_);
  }
  for (uint64_t document = 0; document <= count; ++document) {
    storeLittleEndian(at, document, 8);
    at += 8;
  }

  AtomicFile idx;
  MT_TRY(AtomicFile::create(prefix_ + ".idx", idx));
  MT_TRY(idx.write(index.data(), index.size()));
  // Both on disk before either is renamed, and the index last: a reader that finds it
  // finds the data it describes.
  MT_TRY(bin_.sync());
  MT_TRY(idx.sync());
  MT_TRY(bin_.publish());
  return idx.publish();
}

// ---- reader -------------------------------------------------------------------------

IndexedDataset::IndexedDataset(IndexedDataset &&other) noexcept { *this = std::move(other); }

IndexedDataset &IndexedDataset::operator=(IndexedDataset &&other) noexcept {
  if (this != &other) {
    unmap(idx_);
    unmap(bin_);
    prefix_ = std::move(other.prefix_);
    idxPath_ = std::move(other.idxPath_);
    binPath_ = std::move(other.binPath_);
    idx_ = std::exchange(other.idx_, Mapping());
    bin_ = std::exchange(other.bin_, Mapping());
    dtype_ = other.dtype_;
    numSequences_ = std::exchange(other.numSequences_, 0);
    numDocumentIndices_ = std::exchange(other.numDocumentIndices_, 1);
    numTokens_ = std::exchange(other.numTokens_, 0);
    tokenRangeKnown_ = std::exchange(other.tokenRangeKnown_, false);
    minToken_ = other.minToken_;
    maxToken_ = other.maxToken_;
  }
  return *this;
}

IndexedDataset::~IndexedDataset() {
  unmap(idx_);
  unmap(bin_);
}

void IndexedDataset::unmap(Mapping &mapping) {
  if (mapping.data)
    ::munmap(const_cast<uint8_t *>(mapping.data), mapping.size);
  mapping = Mapping();
}

int32_t IndexedDataset::lengthEntry(uint64_t sequence) const {
  return static_cast<int32_t>(loadLittleEndian(idx_.data + kIndexHeaderBytes + sequence * 4, 4));
}

int64_t IndexedDataset::pointerEntry(uint64_t sequence) const {
  return static_cast<int64_t>(
      loadLittleEndian(idx_.data + kIndexHeaderBytes + numSequences_ * 4 + sequence * 8, 8));
}

int64_t IndexedDataset::documentIndexEntry(uint64_t entry) const {
  return static_cast<int64_t>(
      loadLittleEndian(idx_.data + kIndexHeaderBytes + numSequences_ * 12 + entry * 8, 8));
}

Status IndexedDataset::open(const std::string &prefix, IndexedDataset &out) {
  IndexedDataset dataset;
  dataset.prefix_ = prefix;
  dataset.idxPath_ = prefix + ".idx";
  dataset.binPath_ = prefix + ".bin";
  const std::string &idxPath = dataset.idxPath_;
  Status mapped = mapReadOnly(idxPath, dataset.idx_.data, dataset.idx_.size);
  if (!mapped.ok())
    return mapped;
  mapped = mapReadOnly(dataset.binPath_, dataset.bin_.data, dataset.bin_.size);
  if (!mapped.ok())
    return mapped;

  // The header, as _IndexReader.__init__ reads it.
  const uint8_t *idx = dataset.idx_.data;
  const uint64_t idxBytes = dataset.idx_.size;
  const size_t magicBytes = std::min<size_t>(idxBytes, sizeof(kIndexMagic));
  if (std::memcmp(idx, kIndexMagic, magicBytes) != 0)
    return Status::failure(cat(idxPath, ": not a Megatron indexed dataset index: bad magic "
                                        "(expected \"MMIDIDX\\x00\\x00\")"));
  if (idxBytes < kIndexHeaderBytes)
    return Status::failure(cat(idxPath, ": truncated index: ", idxBytes,
                               " bytes, shorter than the ", kIndexHeaderBytes, "-byte header"));
  const uint64_t version = loadLittleEndian(idx + 9, 8);
  if (version != kIndexVersion)
    return Status::failure(cat(idxPath, ": unsupported index version ", version,
                               " (Megatron's indexed dataset is version ", kIndexVersion, ")"));
  const auto dtype = static_cast<MegatronDType>(idx[17]);
  if (itemBytes(dtype) == 0)
    return Status::failure(cat(idxPath, ": unknown dtype code ", static_cast<int>(idx[17])));
  if (!holdsTokenIds(dtype))
    return Status::failure(cat(idxPath, ": dtype ", describe(dtype), " cannot hold token ids"));
  dataset.dtype_ = dtype;

  const uint64_t sequences = loadLittleEndian(idx + 18, 8);
  const uint64_t documentIndices = loadLittleEndian(idx + 26, 8);
  // Bounded by the file size first, so that the sum below cannot overflow.
  const uint64_t arrayBytes = idxBytes - kIndexHeaderBytes;
  if (sequences > arrayBytes / 12 || documentIndices > arrayBytes / 8 ||
      sequences * 12 + documentIndices * 8 > arrayBytes)
    return Status::failure(cat(idxPath, ": truncated index: header says ", sequences,
                               " sequences and ", documentIndices,
                               " document indices, file ends after ", idxBytes, " bytes"));
  const uint64_t trailing = arrayBytes - sequences * 12 - documentIndices * 8;
  if (trailing != 0)
    return Status::failure(cat(idxPath, ": ", trailing, " bytes after the document indices",
                               trailing == sequences ? " (the sequence modes of a multimodal "
                                                       "index, which this reader does not read)"
                                                     : ""));
  dataset.numSequences_ = sequences;
  dataset.numDocumentIndices_ = documentIndices;
  Status valid = dataset.validate();
  if (!valid.ok())
    return valid;
  out = std::move(dataset);
  return Status::success();
}

Status IndexedDataset::validate() {
  if (numDocumentIndices_ == 0)
    return Status::failure(cat(idxPath_, ": no document indices (Megatron's start with 0)"));
  if (documentIndexEntry(0) != 0)
    return Status::failure(
        cat(idxPath_, ": document index 0 is ", documentIndexEntry(0), ", expected 0"));
  for (uint64_t i = 1; i < numDocumentIndices_; ++i)
    if (documentIndexEntry(i) < documentIndexEntry(i - 1))
      return Status::failure(cat(idxPath_, ": document indices are not monotonic: entry ", i,
                                 " is ", documentIndexEntry(i), " after ",
                                 documentIndexEntry(i - 1)));
  const int64_t lastDocumentIndex = documentIndexEntry(numDocumentIndices_ - 1);
  if (lastDocumentIndex != static_cast<int64_t>(numSequences_))
    return Status::failure(cat(idxPath_, ": the last document index is ", lastDocumentIndex,
                               ", expected the sequence count ", numSequences_));

  // The .bin is the sequences back to back, in order, as _IndexWriter's pointers say:
  // that is what lets it be read as one token stream.
  const uint64_t width = itemBytes(dtype_);
  const uint64_t binBytes = bin_.size;
  uint64_t expected = 0;
  for (uint64_t s = 0; s < numSequences_; ++s) {
    const int32_t length = lengthEntry(s);
    if (length < 0)
      return Status::failure(cat(idxPath_, ": sequence ", s, " has negative length ", length));
    const int64_t pointer = pointerEntry(s);
    const uint64_t bytes = static_cast<uint64_t>(length) * width;
    if (pointer < 0 || static_cast<uint64_t>(pointer) > binBytes ||
        bytes > binBytes - static_cast<uint64_t>(pointer))
      return Status::failure(cat(binPath_, ": truncated data: sequence ", s, " (", length,
                                 " tokens at byte ", pointer, ") runs past the end of the file (",
                                 binBytes, " bytes)"));
    if (static_cast<uint64_t>(pointer) != expected)
      return Status::failure(cat(idxPath_, ": sequence ", s, " starts at byte ", pointer, " of ",
                                 binPath_, ", expected ", expected,
                                 ": sequences must lie back to back, in order"));
    expected += bytes;
  }
  if (expected != binBytes)
    return Status::failure(cat(binPath_, ": ", binBytes, " bytes, but the index's ", numSequences_,
                               " sequences hold ", expected / width, " ", dtypeName(dtype_),
                               " tokens (", expected, " bytes)"));
  numTokens_ = expected / width;
  return Status::success();
}

uint64_t IndexedDataset::sequenceLength(uint64_t sequence) const {
  return static_cast<uint64_t>(lengthEntry(sequence));
}

uint64_t IndexedDataset::sequenceStart(uint64_t sequence) const {
  return static_cast<uint64_t>(pointerEntry(sequence)) / itemBytes(dtype_);
}

uint64_t IndexedDataset::documentStart(uint64_t document) const {
  const auto sequence = static_cast<uint64_t>(documentIndexEntry(document));
  return sequence < numSequences_ ? sequenceStart(sequence) : numTokens_;
}

uint64_t IndexedDataset::documentOf(uint64_t position) const {
  // The last sequence that starts at or before `position` holds it (empty sequences
  // share their successor's start and come before it).
  uint64_t low = 0, high = numSequences_;
  while (high - low > 1) {
    uint64_t middle = low + (high - low) / 2;
    if (sequenceStart(middle) <= position)
      low = middle;
    else
      high = middle;
  }
  const auto sequence = static_cast<int64_t>(low);
  // Likewise the last document whose first sequence is at or before it.
  low = 0;
  high = numDocumentIndices_ - 1;
  while (high - low > 1) {
    uint64_t middle = low + (high - low) / 2;
    if (documentIndexEntry(middle) <= sequence)
      low = middle;
    else
      high = middle;
  }
  return low;
}

int64_t IndexedDataset::tokenAt(uint64_t position) const {
  return decodeToken(bin_.data + position * itemBytes(dtype_), dtype_);
}

Status IndexedDataset::copyTokens(uint64_t first, uint64_t count, int32_t *out) const {
  if (first > numTokens_ || count > numTokens_ - first)
    return Status::failure(cat(binPath_, ": tokens [", first, ", ", first + count,
                               ") run past the end of its ", numTokens_, " tokens"));
  const uint64_t width = itemBytes(dtype_);
  const uint8_t *in = bin_.data + first * width;
  for (uint64_t i = 0; i < count; ++i, in += width) {
    int64_t token = decodeToken(in, dtype_);
    if (token < std::numeric_limits<int32_t>::min() || token > std::numeric_limits<int32_t>::max())
      return Status::failure(
          cat(binPath_, ": token ", token, " at position ", first + i, " does not fit in int32"));
    out[i] = static_cast<int32_t>(token);
  }
  return Status::success();
}

void IndexedDataset::scanTokenRange() const {
  if (tokenRangeKnown_)
    return;
  const uint64_t width = itemBytes(dtype_);
  minToken_ = std::numeric_limits<int64_t>::max();
  maxToken_ = std::numeric_limits<int64_t>::min();
  for (uint64_t i = 0; i < numTokens_; ++i) {
    int64_t token = decodeToken(bin_.data + i * width, dtype_);
    minToken_ = std::min(minToken_, token);
    maxToken_ = std::max(maxToken_, token);
  }
  tokenRangeKnown_ = true;
}

int64_t IndexedDataset::minToken() const {
  scanTokenRange();
  return minToken_;
}

int64_t IndexedDataset::maxToken() const {
  scanTokenRange();
  return maxToken_;
}

} // namespace mt
