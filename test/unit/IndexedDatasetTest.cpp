// The indexed dataset round-trips in Megatron's exact bytes, refuses every damaged
// file with a message that names the file and the cause, and the token stream cuts
// the windows Megatron's GPT dataset cuts, in an order that depends on the seed and
// the epoch and on nothing else.
#include "data/IndexedDataset.h"
#include "StatusAssertions.h"
#include "data/Blend.h"
#include "data/TokenStream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <unistd.h>

namespace mt {
namespace {

using Bytes = std::vector<uint8_t>;
using Documents = std::vector<std::vector<int32_t>>;

std::string tempPrefix(const std::string &name) {
  return ::testing::TempDir() + "indexed_dataset_test_" + name;
}

Bytes readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void writeFile(const std::string &path, const Bytes &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

bool fileExists(const std::string &path) { return ::access(path.c_str(), F_OK) == 0; }

/// Whether a writer's temporary of `path` (".<name>.tmp.*" beside it) is still there.
bool temporariesLeft(const std::string &path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string prefix = "." + path.substr(slash + 1) + ".tmp.";
  bool found = false;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d))
      found |= std::string(e->d_name).rfind(prefix, 0) == 0;
    ::closedir(d);
  }
  return found;
}

uint64_t littleEndian(const Bytes &bytes, size_t offset, size_t width) {
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i)
    value |= static_cast<uint64_t>(bytes.at(offset + i)) << (8 * i);
  return value;
}

void putLittleEndian(Bytes &bytes, size_t offset, uint64_t value, size_t width) {
  for (size_t i = 0; i < width; ++i)
    bytes.at(offset + i) = static_cast<uint8_t>(value >> (8 * i));
}

Status writeDataset(const std::string &prefix, MegatronDType dtype, const Documents &documents) {
  IndexedDatasetWriter writer;
  Status s = IndexedDatasetWriter::open(prefix, dtype, writer);
  for (size_t d = 0; s.ok() && d < documents.size(); ++d)
    s = writer.addDocument(documents[d]);
  return s.ok() ? writer.finish() : s;
}

Documents randomDocuments(std::mt19937 &rng, size_t count, int32_t vocabulary) {
  std::uniform_int_distribution<int> length(1, 60);
  std::uniform_int_distribution<int32_t> token(0, vocabulary - 1);
  Documents documents(count);
  for (auto &document : documents) {
    document.resize(static_cast<size_t>(length(rng)));
    for (int32_t &t : document)
      t = token(rng);
  }
  // The largest id, and an empty document, which Megatron's format allows.
  documents[count / 2].back() = vocabulary - 1;
  documents[count / 3].clear();
  return documents;
}

void expectRoundTrip(MegatronDType dtype, int32_t vocabulary) {
  SCOPED_TRACE(dtypeName(dtype));
  std::mt19937 rng(7);
  const Documents documents = randomDocuments(rng, 50, vocabulary);
  const std::string prefix = tempPrefix(std::string("round_trip_") + dtypeName(dtype));
  Status written = writeDataset(prefix, dtype, documents);
  ASSERT_TRUE(written.ok()) << written.message();

  // The index, byte for byte as _IndexWriter writes it.
  const Bytes idx = readFile(prefix + ".idx");
  const uint64_t n = documents.size(), width = itemBytes(dtype);
  ASSERT_EQ(idx.size(), 34 + n * 12 + (n + 1) * 8);
  EXPECT_EQ(std::string(idx.begin(), idx.begin() + 9), std::string("MMIDIDX\0\0", 9));
  EXPECT_EQ(littleEndian(idx, 9, 8), 1u);
  EXPECT_EQ(idx[17], static_cast<uint8_t>(dtype));
  EXPECT_EQ(littleEndian(idx, 18, 8), n);
  EXPECT_EQ(littleEndian(idx, 26, 8), n + 1);
  uint64_t pointer = 0;
  for (uint64_t s = 0; s < n; ++s) {
    EXPECT_EQ(littleEndian(idx, 34 + s * 4, 4), documents[s].size()) << "length " << s;
    EXPECT_EQ(littleEndian(idx, 34 + n * 4 + s * 8, 8), pointer) << "pointer " << s;
    pointer += documents[s].size() * width;
  }
  for (uint64_t d = 0; d <= n; ++d)
    EXPECT_EQ(littleEndian(idx, 34 + n * 12 + d * 8, 8), d) << "document index " << d;

  // The .bin: the tokens back to back, little-endian.
  const Bytes bin = readFile(prefix + ".bin");
  ASSERT_EQ(bin.size(), pointer);
  size_t offset = 0;
  for (const auto &document : documents)
    for (int32_t t : document) {
      ASSERT_EQ(littleEndian(bin, offset, width), static_cast<uint64_t>(t));
      offset += width;
    }

  IndexedDataset dataset;
  Status opened = IndexedDataset::open(prefix, dataset);
  ASSERT_TRUE(opened.ok()) << opened.message();
  EXPECT_EQ(dataset.dtype(), dtype);
  EXPECT_EQ(dataset.numSequences(), n);
  EXPECT_EQ(dataset.numDocuments(), n);
  EXPECT_EQ(dataset.numTokens(), pointer / width);
  int64_t lowest = vocabulary, highest = -1;
  uint64_t position = 0;
  for (uint64_t s = 0; s < n; ++s) {
    const auto &document = documents[s];
    ASSERT_EQ(dataset.sequenceLength(s), document.size());
    ASSERT_EQ(dataset.sequenceStart(s), position);
    std::vector<int32_t> copied(document.size());
    Status copy = dataset.copyTokens(position, document.size(), copied.data());
    ASSERT_TRUE(copy.ok()) << copy.message();
    EXPECT_EQ(copied, document) << "document " << s;
    for (size_t i = 0; i < document.size(); ++i) {
      ASSERT_EQ(dataset.tokenAt(position + i), document[i]);
      ASSERT_EQ(dataset.documentOf(position + i), s);
      lowest = std::min<int64_t>(lowest, document[i]);
      highest = std::max<int64_t>(highest, document[i]);
    }
    position += document.size();
  }
  EXPECT_EQ(dataset.minToken(), lowest);
  EXPECT_EQ(dataset.maxToken(), vocabulary - 1);
  EXPECT_EQ(dataset.maxToken(), highest);

  int32_t past[2];
  Status beyond = dataset.copyTokens(dataset.numTokens() - 1, 2, past);
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.message().find("past the end"), std::string::npos) << beyond.message();

  // Nothing is left under a temporary name.
  EXPECT_FALSE(temporariesLeft(prefix + ".bin"));
  EXPECT_FALSE(temporariesLeft(prefix + ".idx"));
}

TEST(IndexedDatasetTest, RoundTripsUInt16InMegatronBytes) {
  expectRoundTrip(MegatronDType::UInt16, 65535);
}

TEST(IndexedDatasetTest, RoundTripsInt32InMegatronBytes) {
  expectRoundTrip(MegatronDType::Int32, 1 << 20);
}

// Each integer dtype keeps the extremes of its range, signed ones sign-extended as read,
// and refuses an id one past either end.
TEST(IndexedDatasetTest, EveryIntegerDTypeKeepsItsExtremesAndRefusesWhatItCannotHold) {
  struct Case {
    MegatronDType dtype;
    int64_t lowest, highest;
  };
  const int64_t low32 = std::numeric_limits<int32_t>::min(),
                high32 = std::numeric_limits<int32_t>::max();
  for (const Case &c : {Case{MegatronDType::UInt8, 0, 255}, Case{MegatronDType::Int8, -128, 127},
                        Case{MegatronDType::Int16, -32768, 32767},
                        Case{MegatronDType::UInt16, 0, 65535},
                        Case{MegatronDType::Int32, low32, high32},
                        Case{MegatronDType::Int64, low32, high32}}) {
    SCOPED_TRACE(dtypeName(c.dtype));
    const std::string prefix = tempPrefix(std::string("extremes_") + dtypeName(c.dtype));
    const std::vector<int32_t> ids = {static_cast<int32_t>(c.lowest),
                                      static_cast<int32_t>(c.highest), 1};
    ASSERT_TRUE(writeDataset(prefix, c.dtype, {ids}).ok());
    IndexedDataset data;
    ASSERT_TRUE(IndexedDataset::open(prefix, data).ok());
    EXPECT_EQ(data.tokenAt(0), c.lowest);
    EXPECT_EQ(data.tokenAt(1), c.highest);
    EXPECT_EQ(data.minToken(), c.lowest);
    EXPECT_EQ(data.maxToken(), c.highest);
    for (int64_t outside : {c.lowest - 1, c.highest + 1}) {
      if (outside < low32 || outside > high32)
        continue; // not an int32 id at all
      Status s = writeDataset(prefix + "_outside", c.dtype, {{static_cast<int32_t>(outside)}});
      ASSERT_FALSE(s.ok()) << outside;
      EXPECT_NE(s.message().find(cat("token ", outside, " of document 0 does not fit")),
                std::string::npos)
          << s.message();
    }
  }
}

TEST(IndexedDatasetTest, DTypeFollowsMegatronsOptimalDType) {
  EXPECT_EQ(tokenDTypeForVocabulary(50257), MegatronDType::UInt16);
  EXPECT_EQ(tokenDTypeForVocabulary(65499), MegatronDType::UInt16);
  EXPECT_EQ(tokenDTypeForVocabulary(65500), MegatronDType::Int32);
}

TEST(IndexedDatasetTest, WriterRefusesTokensItsDTypeCannotHold) {
  const std::string prefix = tempPrefix("narrow");
  for (int32_t token : {65536, -1}) {
    IndexedDatasetWriter writer;
    ASSERT_TRUE(IndexedDatasetWriter::open(prefix, MegatronDType::UInt16, writer).ok());
    ASSERT_TRUE(writer.addDocument({1, 2, 3}).ok());
    Status s = writer.addDocument({4, token});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("token " + std::to_string(token) + " of document 1"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("uint16"), std::string::npos) << s.message();
  }
  IndexedDatasetWriter writer;
  Status floats = IndexedDatasetWriter::open(prefix, MegatronDType::Float32, writer);
  ASSERT_FALSE(floats.ok());
  EXPECT_NE(floats.message().find("float32 (code 7) cannot hold token ids"), std::string::npos)
      << floats.message();
}

TEST(IndexedDatasetTest, WriterNamesAnUnwritableOutput) {
  IndexedDatasetWriter writer;
  Status s =
      IndexedDatasetWriter::open("/nonexistent-directory/data", MegatronDType::UInt16, writer);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create /nonexistent-directory/data.bin"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("No such file or directory"), std::string::npos) << s.message();
}

TEST(IndexedDatasetTest, UnfinishedWriterLeavesNoFiles) {
  const std::string prefix = tempPrefix("unfinished");
  std::remove((prefix + ".bin").c_str());
  std::remove((prefix + ".idx").c_str());
  {
    IndexedDatasetWriter writer;
    ASSERT_TRUE(IndexedDatasetWriter::open(prefix, MegatronDType::Int32, writer).ok());
    ASSERT_TRUE(writer.addDocument({1, 2, 3}).ok());
    EXPECT_TRUE(temporariesLeft(prefix + ".bin"));
  }
  EXPECT_FALSE(temporariesLeft(prefix + ".bin"));
  EXPECT_FALSE(fileExists(prefix + ".bin"));
  EXPECT_FALSE(fileExists(prefix + ".idx"));

  IndexedDatasetWriter empty;
  ASSERT_TRUE(IndexedDatasetWriter::open(prefix, MegatronDType::Int32, empty).ok());
  Status s = empty.finish();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no documents"), std::string::npos) << s.message();
}

/// A valid uint16 dataset of three documents (3, 2 and 4 tokens), damaged one way per
/// test.
class CorruptDatasetTest : public ::testing::Test {
protected:
  void SetUp() override {
    prefix = tempPrefix(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(
        writeDataset(prefix, MegatronDType::UInt16, {{5, 6, 2}, {7, 2}, {8, 9, 10, 2}}).ok());
    idx = readFile(prefix + ".idx");
    bin = readFile(prefix + ".bin");
    ASSERT_EQ(idx.size(), 34u + 3 * 12 + 4 * 8);
  }

  /// Writes the (damaged) files back, opens them, and returns the failure message.
  std::string openFailure() {
    writeFile(prefix + ".idx", idx);
    writeFile(prefix + ".bin", bin);
    return openFailureAsIs();
  }
  std::string openFailureAsIs() {
    IndexedDataset dataset;
    Status s = IndexedDataset::open(prefix, dataset);
    EXPECT_FALSE(s.ok()) << "the damaged dataset opened";
    return s.message();
  }

  static constexpr size_t kLengths = 34, kPointers = 34 + 3 * 4, kDocuments = 34 + 3 * 12;
  std::string prefix;
  Bytes idx, bin;
};

#define EXPECT_MESSAGE(message, part)                                                              \
  EXPECT_NE((message).find(part), std::string::npos) << "message: " << (message)

TEST_F(CorruptDatasetTest, IntactDatasetOpens) {
  IndexedDataset dataset;
  Status s = IndexedDataset::open(prefix, dataset);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(dataset.numTokens(), 9u);
}

TEST_F(CorruptDatasetTest, MissingFiles) {
  std::remove((prefix + ".bin").c_str());
  std::string m = openFailureAsIs();
  EXPECT_MESSAGE(m, prefix + ".bin: cannot open: No such file or directory");
  std::remove((prefix + ".idx").c_str());
  m = openFailureAsIs();
  EXPECT_MESSAGE(m, prefix + ".idx: cannot open: No such file or directory");
}

TEST_F(CorruptDatasetTest, EmptyFiles) {
  Bytes intactIdx = idx;
  idx.clear();
  EXPECT_MESSAGE(openFailure(), prefix + ".idx: empty file");
  idx = intactIdx;
  bin.clear();
  EXPECT_MESSAGE(openFailure(), prefix + ".bin: empty file");
}

TEST_F(CorruptDatasetTest, TruncatedIndex) {
  const Bytes intact = idx;
  for (size_t keep : {size_t{5}, size_t{20}, size_t{33}}) {
    idx.assign(intact.begin(), intact.begin() + keep);
    std::string m = openFailure();
    EXPECT_MESSAGE(m, prefix + ".idx: truncated index: " + std::to_string(keep) +
                          " bytes, shorter than the 34-byte header");
  }
  for (size_t keep : {size_t{34}, size_t{40}, intact.size() - 1}) {
    idx.assign(intact.begin(), intact.begin() + keep);
    std::string m = openFailure();
    EXPECT_MESSAGE(m, prefix +
                          ".idx: truncated index: header says 3 sequences and 4 document "
                          "indices, file ends after " +
                          std::to_string(keep) + " bytes");
  }
}

TEST_F(CorruptDatasetTest, CountsTooLargeForAnyFile) {
  putLittleEndian(idx, 18, uint64_t{1} << 62, 8);
  EXPECT_MESSAGE(openFailure(), "truncated index: header says 4611686018427387904 sequences");
}

TEST_F(CorruptDatasetTest, TruncatedData) {
  bin.pop_back();
  std::string m = openFailure();
  EXPECT_MESSAGE(m, prefix + ".bin: truncated data: sequence 2 (4 tokens at byte 10) runs past "
                             "the end of the file (17 bytes)");
}

TEST_F(CorruptDatasetTest, DataLongerThanTheIndexSays) {
  bin.push_back(0);
  bin.push_back(0);
  EXPECT_MESSAGE(openFailure(), prefix + ".bin: 20 bytes, but the index's 3 sequences hold 9 "
                                         "uint16 tokens (18 bytes)");
}

TEST_F(CorruptDatasetTest, BadMagic) {
  idx[0] = 'X';
  EXPECT_MESSAGE(openFailure(), prefix + ".idx: not a Megatron indexed dataset index: bad magic");
}

TEST_F(CorruptDatasetTest, WrongVersion) {
  putLittleEndian(idx, 9, 2, 8);
  EXPECT_MESSAGE(openFailure(), prefix + ".idx: unsupported index version 2");
}

TEST_F(CorruptDatasetTest, UnknownOrFloatingDType) {
  idx[17] = 9;
  EXPECT_MESSAGE(openFailure(), prefix + ".idx: unknown dtype code 9");
  idx[17] = 6;
  EXPECT_MESSAGE(openFailure(), prefix + ".idx: dtype float64 (code 6) cannot hold token ids");
}

TEST_F(CorruptDatasetTest, PointerPastTheEnd) {
  putLittleEndian(idx, kPointers + 8, 18, 8);
  EXPECT_MESSAGE(openFailure(), prefix + ".bin: truncated data: sequence 1 (2 tokens at byte 18) "
                                         "runs past the end of the file (18 bytes)");
  putLittleEndian(idx, kPointers + 8, static_cast<uint64_t>(-4), 8);
  EXPECT_MESSAGE(openFailure(), "sequence 1 (2 tokens at byte -4) runs past the end");
}

TEST_F(CorruptDatasetTest, LengthPastTheEnd) {
  putLittleEndian(idx, kLengths + 8, 5, 4);
  EXPECT_MESSAGE(openFailure(), "sequence 2 (5 tokens at byte 10) runs past the end");
  putLittleEndian(idx, kLengths + 8, static_cast<uint32_t>(-1), 4);
  EXPECT_MESSAGE(openFailure(), prefix + ".idx: sequence 2 has negative length -1");
}

TEST_F(CorruptDatasetTest, SequencesOutOfOrder) {
  putLittleEndian(idx, kPointers + 8, 4, 8);
  EXPECT_MESSAGE(openFailure(),
                 prefix + ".idx: sequence 1 starts at byte 4 of " + prefix + ".bin, expected 6");
}

TEST_F(CorruptDatasetTest, DocumentIndices) {
  const Bytes intact = idx;
  putLittleEndian(idx, kDocuments + 8 * 2, 0, 8);
  EXPECT_MESSAGE(openFailure(),
                 prefix + ".idx: document indices are not monotonic: entry 2 is 0 after 1");
  idx = intact;
  putLittleEndian(idx, kDocuments, 1, 8);
  EXPECT_MESSAGE(openFailure(), prefix + ".idx: document index 0 is 1, expected 0");
  idx = intact;
  putLittleEndian(idx, kDocuments + 8 * 3, 2, 8);
  EXPECT_MESSAGE(openFailure(),
                 prefix + ".idx: the last document index is 2, expected the sequence count 3");
}

TEST_F(CorruptDatasetTest, TrailingBytes) {
  idx.insert(idx.end(), 3, 0);
  EXPECT_MESSAGE(openFailure(), prefix + ".idx: 3 bytes after the document indices (the "
                                         "sequence modes of a multimodal index");
}

// ---- token stream -------------------------------------------------------------------

/// One int32 dataset whose stream is 0, 1, 2, ..., tokens - 1, in documents of 7.
std::string countingDataset(const std::string &name, int32_t tokens) {
  Documents documents;
  for (int32_t t = 0; t < tokens; ++t) {
    if (t % 7 == 0)
      documents.emplace_back();
    documents.back().push_back(t);
  }
  std::string prefix = tempPrefix(name);
  Status s = writeDataset(prefix, MegatronDType::Int32, documents);
  EXPECT_TRUE(s.ok()) << s.message();
  return prefix;
}

std::vector<uint64_t> visitOrder(TokenStream &stream, uint64_t from, uint64_t count) {
  std::vector<uint64_t> order;
  for (uint64_t p = from; p < from + count; ++p) {
    uint64_t index = 0;
    Status s = stream.sampleIndex(p, index);
    EXPECT_TRUE(s.ok()) << s.message();
    order.push_back(index);
  }
  return order;
}

bool isPermutation(std::vector<uint64_t> order) {
  std::sort(order.begin(), order.end());
  for (uint64_t i = 0; i < order.size(); ++i)
    if (order[i] != i)
      return false;
  return true;
}

class TokenStreamTest : public ::testing::Test {
protected:
  void SetUp() override {
    // 1001 tokens: 100 windows of 10 + 1, the last one ending on the last token.
    Status s = IndexedDataset::open(countingDataset("counting", 1001), data);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  IndexedDataset data;
};

TEST_F(TokenStreamTest, SamplesAreTheShiftedWindows) {
  TokenStream stream(data, 10, 1234);
  ASSERT_EQ(stream.numSamples(), 100u);
  std::vector<int32_t> inputs(10), targets(10);
  for (uint64_t p = 0; p < 250; ++p) {
    uint64_t index = 0;
    ASSERT_TRUE(stream.sampleIndex(p, index).ok());
    Status s = stream.sample(p, inputs.data(), targets.data());
    ASSERT_TRUE(s.ok()) << s.message();
    for (int32_t i = 0; i < 10; ++i) {
      ASSERT_EQ(inputs[i], static_cast<int32_t>(index * 10) + i) << "position " << p;
      ASSERT_EQ(targets[i], inputs[i] + 1) << "position " << p;
    }
  }
}

TEST_F(TokenStreamTest, EachEpochIsAPermutationInItsOwnOrder) {
  TokenStream stream(data, 10, 1234);
  const std::vector<uint64_t> first = visitOrder(stream, 0, 100);
  const std::vector<uint64_t> second = visitOrder(stream, 100, 100);
  const std::vector<uint64_t> third = visitOrder(stream, 200, 100);
  EXPECT_TRUE(isPermutation(first));
  EXPECT_TRUE(isPermutation(second));
  EXPECT_TRUE(isPermutation(third));
  EXPECT_NE(first, second);
  EXPECT_NE(second, third);
  std::vector<uint64_t> identity(100);
  for (uint64_t i = 0; i < 100; ++i)
    identity[i] = i;
  EXPECT_NE(first, identity);
}

TEST_F(TokenStreamTest, OrderDependsOnlyOnSeedAndPosition) {
  TokenStream stream(data, 10, 1234), again(data, 10, 1234), other(data, 10, 1235);
  const std::vector<uint64_t> order = visitOrder(stream, 0, 300);
  EXPECT_EQ(visitOrder(again, 0, 300), order);
  EXPECT_NE(visitOrder(other, 0, 300), order);
  // Resuming at a checkpoint's position, in a fresh stream, continues the same order.
  TokenStream resumed(data, 10, 1234);
  EXPECT_EQ(visitOrder(resumed, 150, 150), std::vector<uint64_t>(order.begin() + 150, order.end()));
}

TEST(TokenStreamOrderTest, MatchesTheSpecifiedAlgorithm) {
  // Computed from the algorithm in TokenStream.h, independently of this code.
  EXPECT_EQ(epochOrder(10, 1234, 0), (std::vector<uint64_t>{9, 5, 7, 0, 1, 6, 2, 3, 8, 4}));
  EXPECT_EQ(epochOrder(10, 1234, 1), (std::vector<uint64_t>{3, 7, 8, 9, 1, 6, 4, 2, 5, 0}));
  EXPECT_EQ(epochOrder(10, 0, 0), (std::vector<uint64_t>{6, 3, 2, 9, 8, 1, 4, 7, 0, 5}));
  EXPECT_EQ(epochOrder(1, 5, 3), (std::vector<uint64_t>{0}));
}

TEST(DataSplitTest, CutsDocumentsAsMegatronDoes) {
  // From Megatron's _get_split_indices, run by hand: rounding half to even, then every
  // boundary moved by what the rounding gained or lost.
  using Bounds = std::array<uint64_t, 4>;
  EXPECT_EQ(splitDocuments({949, 50, 1}, 1000), (Bounds{0, 949, 999, 1000}));
  EXPECT_EQ(splitDocuments({969, 30, 1}, 431), (Bounds{0, 418, 431, 431}));
  EXPECT_EQ(splitDocuments({1, 1, 0}, 862), (Bounds{0, 431, 862, 862}));
  EXPECT_EQ(splitDocuments({1, 1, 1}, 10), (Bounds{0, 4, 7, 10}));
  EXPECT_EQ(splitDocuments({1, 1, 1}, 2), (Bounds{0, 0, 1, 2}));
  EXPECT_EQ(splitDocuments({5, 5, 0}, 5), (Bounds{0, 3, 5, 5}));
  EXPECT_EQ(splitDocuments({0.5, 0.25, 0.25}, 7), (Bounds{0, 3, 5, 7}));
  EXPECT_EQ(splitDocuments({98, 1, 1}, 50), (Bounds{0, 50, 50, 50}));
  EXPECT_EQ(splitDocuments({1, 0, 0}, 0), (Bounds{0, 0, 0, 0}));
}

TEST(DataSplitTest, ParsesMegatronsSpellings) {
  std::array<double, 3> sizes{};
  ASSERT_OK(parseSplit("949,50,1", sizes));
  EXPECT_EQ(sizes, (std::array<double, 3>{949, 50, 1}));
  ASSERT_OK(parseSplit("969, 30, 1", sizes));
  EXPECT_EQ(sizes, (std::array<double, 3>{969, 30, 1}));
  ASSERT_OK(parseSplit("0.9/0.05/0.05", sizes));
  EXPECT_EQ(sizes, (std::array<double, 3>{0.9, 0.05, 0.05}));
  ASSERT_OK(parseSplit("100", sizes)); // the missing sizes are 0
  EXPECT_EQ(sizes, (std::array<double, 3>{100, 0, 0}));
  ASSERT_OK(parseSplit("1e3,1", sizes)); // a number as strtod reads one
  EXPECT_EQ(sizes, (std::array<double, 3>{1000, 1, 0}));
  for (const char *bad : {"", ",", "1,2,3,4", "1,-2", "0,0,0", "1..2", ".", "1,,1", "1,2x", "1 1 1",
                          "98,1,1abc", "inf,1", "nan"})
    EXPECT_FALSE(parseSplit(bad, sizes).ok()) << "'" << bad << "'";
}

TEST_F(TokenStreamTest, ADocumentRangeReadsOnlyItsTokens) {
  // Documents of 7 tokens: documents [10, 20) are tokens [70, 140), 6 windows of 10 + 1.
  TokenStream stream(data, 10, 1234, {10, 20, "the validation split"});
  ASSERT_EQ(stream.numSamples(), 6u);
  std::vector<int32_t> inputs(10), targets(10);
  for (uint64_t p = 0; p < 12; ++p) {
    uint64_t index = 0;
    ASSERT_OK(stream.sampleIndex(p, index));
    ASSERT_OK(stream.sample(p, inputs.data(), targets.data()));
    EXPECT_EQ(inputs[0], static_cast<int32_t>(70 + index * 10)) << "position " << p;
    EXPECT_LT(targets[9], 140) << "position " << p;
  }
  // The same order as a whole stream of as many samples: the seed's.
  EXPECT_EQ(visitOrder(stream, 0, 6), std::vector<uint64_t>(epochOrder(6, 1234, 0)));
  TokenStream tooShort(data, 10, 1234, {10, 11, "the test split"});
  ASSERT_FALSE(tooShort.usable());
  EXPECT_MESSAGE(tooShort.whyUnusable(),
                 "the test split has 7 tokens, fewer than one sequence of 10+1");
  // The last document's range ends at the stream's end.
  TokenStream last(data, 10, 1234, {140, UINT64_MAX, "the end"});
  EXPECT_EQ(last.numSamples(), 2u); // documents 140-142: tokens 980-1000
}

TEST_F(TokenStreamTest, TooLittleDataIsNamed) {
  TokenStream exact(data, 1000, 1);
  EXPECT_EQ(exact.numSamples(), 1u);
  std::vector<int32_t> inputs(1001), targets(1001);
  ASSERT_TRUE(exact.sample(7, inputs.data(), targets.data()).ok());
  EXPECT_EQ(targets[999], 1000);

  TokenStream tooLong(data, 1001, 1);
  Status s = tooLong.sample(0, inputs.data(), targets.data());
  ASSERT_FALSE(s.ok());
  EXPECT_MESSAGE(s.message(), "data has 1001 tokens, fewer than one sequence of 1001+1");
  TokenStream zero(data, 0, 1);
  s = zero.sample(0, inputs.data(), targets.data());
  ASSERT_FALSE(s.ok());
  EXPECT_MESSAGE(s.message(), "sequence length must be positive, got 0");
}

TEST_F(TokenStreamTest, CheckVocabularyNamesTheOffendingToken) {
  TokenStream stream(data, 10, 1);
  EXPECT_TRUE(stream.checkVocabulary(1001).ok());
  Status s = stream.checkVocabulary(1000);
  ASSERT_FALSE(s.ok());
  EXPECT_MESSAGE(s.message(), data.binPath() + ": token id 1000 at position 1000 (document 142) "
                                               "is outside the vocabulary of 1000 ids");
  s = stream.checkVocabulary(990);
  ASSERT_FALSE(s.ok());
  EXPECT_MESSAGE(s.message(), "token id 990 at position 990 (document 141)");
}

TEST(TokenStreamVocabularyTest, NegativeIdIsNamed) {
  const std::string prefix = tempPrefix("negative");
  ASSERT_TRUE(writeDataset(prefix, MegatronDType::Int32, {{1, 2, 3}, {4, -5, 6}}).ok());
  IndexedDataset data;
  ASSERT_TRUE(IndexedDataset::open(prefix, data).ok());
  TokenStream stream(data, 2, 1);
  Status s = stream.checkVocabulary(100);
  ASSERT_FALSE(s.ok());
  EXPECT_MESSAGE(s.message(), "token id -5 at position 4 (document 1) is outside the vocabulary "
                              "of 100 ids [0, 100)");
}

/// Megatron's blending rule written out plainly: the dataset of each of `n` positions,
/// and its position there.
std::vector<std::pair<size_t, uint64_t>> blendedPlainly(std::vector<double> w, uint64_t n) {
  double sum = 0;
  for (double x : w)
    sum += x;
  for (double &x : w)
    x /= sum;
  std::vector<uint64_t> count(w.size(), 0);
  std::vector<std::pair<size_t, uint64_t>> out;
  for (uint64_t i = 0; i < n; ++i) {
    size_t best = 0;
    for (size_t d = 1; d < w.size(); ++d)
      if (w[d] * std::max<double>(i, 1) - count[d] > w[best] * std::max<double>(i, 1) - count[best])
        best = d;
    out.push_back({best, count[best]++});
  }
  return out;
}

// By hand, weights 1 and 3 (fractions 0.25, 0.75): position 0 (counted as 1) gives 0.25
// and 0.75, so dataset 1; then 0.25 and −0.25: 0; at 2, −0.5 and 0.5: 1; at 3, −0.25 and
// 0.25: 1; at 4, 0 and 0, the first: 0; at 5, −0.75 and 0.75: 1.
TEST(BlendTest, PicksTheDatasetFurthestBehindItsShare) {
  Blend blend({1, 3});
  const std::vector<size_t> expected = {1, 0, 1, 1, 0, 1};
  std::vector<uint64_t> seen(2, 0);
  for (uint64_t p = 0; p < expected.size(); ++p) {
    size_t d = 9;
    uint64_t q = 0;
    blend.locate(p, d, q);
    EXPECT_EQ(d, expected[p]) << "position " << p;
    EXPECT_EQ(q, seen[d]++) << "each dataset's positions in turn";
  }
}

// Over blocks, in any order of reading (a resumed run starts far in), the blend reads what
// the plain rule gives, and (with these weights) every dataset keeps within one position
// of its share. Fewer than 8 weights: their sum is the same in any order.
TEST(BlendTest, EqualsThePlainRuleInAnyOrderOfReading) {
  for (const std::vector<double> &weights :
       {std::vector<double>{0.3, 0.7}, std::vector<double>{1, 2, 5}, std::vector<double>{4}}) {
    const uint64_t n = 3 * Blend::kBlock + 17;
    const auto plain = blendedPlainly(weights, n);
    std::vector<uint64_t> positions(n);
    std::iota(positions.begin(), positions.end(), 0);
    std::shuffle(positions.begin(), positions.end(), std::mt19937_64(7));
    positions.resize(1000);
    positions.push_back(n - 1);
    positions.push_back(0);
    Blend blend(weights);
    for (uint64_t p : positions) {
      size_t d = 0;
      uint64_t q = 0;
      blend.locate(p, d, q);
      ASSERT_EQ(std::make_pair(d, q), plain[p]) << "position " << p;
    }
    std::vector<uint64_t> count(weights.size(), 0);
    for (uint64_t p = 0; p < n; ++p) {
      ++count[plain[p].first];
      for (size_t d = 0; d < weights.size(); ++d)
        ASSERT_LE(std::abs(static_cast<double>(count[d]) -
                           blend.fractions()[d] * static_cast<double>(p + 1)),
                  1.0)
            << "dataset " << d << " after " << p + 1;
    }
  }
}

// The weights are normalised over their sum as numpy sums 10 of them (pairwise: the first
// eight in eight sums, added in pairs, then the rest), 19.45, not the running sum's
// 19.450000000000003: the fractions numpy gives Megatron.
TEST(BlendTest, NormalisesTheWeightsAsNumpySumsThem) {
  Blend blend({7.7, 0.05, 0.05, 0.05, 7.7, 0.3, 3.0, 0.2, 0.1, 0.3});
  EXPECT_EQ(blend.fractions()[0], 0.39588688946015427);
  EXPECT_EQ(blend.fractions()[1], 0.0025706940874035992);
}

TEST(BlendTest, DataPathsAreWeightedPairsOrPrefixesAlone) {
  std::vector<DataSource> sources;
  ASSERT_OK(parseDataPath({"a"}, sources));
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].prefix, "a");
  ASSERT_OK(parseDataPath({"2024"}, sources));
  EXPECT_EQ(sources[0].prefix, "2024");
  EXPECT_EQ(sources[0].weight, 1);
  ASSERT_OK(parseDataPath({"0.3", "a", "7e-1", "2024"}, sources));
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[1].weight, 0.7);
  EXPECT_EQ(sources[1].prefix, "2024");
  // Prefixes alone, odd or even in number, are weighed by their samples.
  for (const std::vector<std::string> &prefixes :
       {std::vector<std::string>{"a", "b"}, {"a", "./2024", "c"}}) {
    ASSERT_OK(parseDataPath(prefixes, sources));
    ASSERT_EQ(sources.size(), prefixes.size());
    for (size_t i = 0; i < prefixes.size(); ++i) {
      EXPECT_EQ(sources[i].prefix, prefixes[i]);
      EXPECT_EQ(sources[i].weight, DataSource::kBySamples);
    }
  }
  for (const std::vector<std::string> &bad : {std::vector<std::string>{},
                                              {"0.3", "a", "b"},
                                              {"a", "0.3", "b"},
                                              {"a", "b", "0.3"},
                                              {"0", "a", "1", "b"},
                                              {"-1", "a", "1", "b"},
                                              {"x", "a", "1", "b"},
                                              {"inf", "a", "1", "b"},
                                              {"nan", "a", "1", "b"},
                                              {"1e308", "a", "1e308", "b"}}) {
    Status s = parseDataPath(bad, sources);
    EXPECT_FALSE(s.ok()) << bad.size() << " words";
    EXPECT_NE(s.message().find("--data"), std::string::npos) << s.message();
  }
}

// A blend's sample at each position is the sample its dataset's own stream gives at the
// dataset's position there: the counting dataset and one of 501 tokens counting from
// 5000 (no window of one is the other's), weights 2 and 1.
TEST_F(TokenStreamTest, ABlendedStreamReadsEachDatasetsOwnStream) {
  Documents documents(1);
  for (int32_t t = 5000; t < 5501; ++t)
    documents[0].push_back(t);
  const std::string prefix = tempPrefix("counting-from-5000");
  ASSERT_OK(writeDataset(prefix, MegatronDType::Int32, documents));
  IndexedDataset small;
  ASSERT_OK(IndexedDataset::open(prefix, small));
  TokenStream a(data, 10, 1234), b(small, 10, 1234);
  TokenStream aAlone(data, 10, 1234), bAlone(small, 10, 1234);
  BlendedStream blend({&a, &b}, {2, 1});
  const auto plain = blendedPlainly({2, 1}, 400);
  std::vector<int32_t> inputs(10), targets(10), want(10), wantTargets(10);
  for (uint64_t p = 0; p < plain.size(); ++p) {
    ASSERT_OK(blend.sample(p, inputs.data(), targets.data()));
    TokenStream &alone = plain[p].first == 0 ? aAlone : bAlone;
    ASSERT_OK(alone.sample(plain[p].second, want.data(), wantTargets.data()));
    ASSERT_EQ(inputs, want) << "position " << p;
    ASSERT_EQ(targets, wantTargets) << "position " << p;
  }
}

} // namespace
} // namespace mt
