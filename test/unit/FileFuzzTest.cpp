// Bounded random-mutation fuzz of the readers of files that come from elsewhere, beside the
// plan reader's (PlanReaderTest): a sharded checkpoint's index.json, and a Hugging Face
// directory's config.json, safetensors header and model.safetensors.index.json. Each mutation is
// either a few bytes changed, or — so that the mutations get past the JSON parser to the checks
// behind it — a JSON value replaced by one a hostile file would hold, a key removed, or an array
// element repeated. Every mutated file must be read or refused with a message; none may
// crash, hang or throw. The seed is printed and replays from MT_FUZZ_SEED.
#include "StatusAssertions.h"
#include "TestSeed.h"
#include "train/CheckpointFiles.h"
#include "train/HfConfig.h"
#include "train/Safetensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace mt {
namespace {

using json = nlohmann::json;

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeText(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

/// Every place in `j` that holds a value, as JSON pointers.
void leaves(const json &j, const json::json_pointer &at, std::vector<json::json_pointer> &out) {
  out.push_back(at);
  if (j.is_object())
    for (const auto &[key, value] : j.items())
      leaves(value, at / key, out);
  else if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i)
      leaves(j[i], at / i, out);
}

/// What a hostile or careless file puts where a value should be.
json hostileValue(std::mt19937_64 &rng) {
  static const json values[] = {-1,
                                0,
                                1,
                                3,
                                int64_t{1} << 40,
                                INT64_MAX,
                                INT64_MIN,
                                1.5,
                                -0.0,
                                1e308,
                                "",
                                "x",
                                "F32",
                                "BF16",
                                "../../etc/passwd",
                                nullptr,
                                true,
                                json::array(),
                                json::array({0}),
                                json::array({-1, 2}),
                                json::array({int64_t{1} << 40, int64_t{1} << 40}),
                                json::object()};
  return values[rng() % std::size(values)];
}

/// `text` (JSON) mutated once: bytes changed, a value replaced, a key removed, or an
/// array element repeated.
std::string mutate(const std::string &text, std::mt19937_64 &rng) {
  std::string bad = text;
  const int kind = static_cast<int>(rng() % 4);
  if (kind == 0) {
    for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k)
      bad[rng() % bad.size()] = static_cast<char>(rng() % 256);
    return bad;
  }
  json j = json::parse(text);
  std::vector<json::json_pointer> at;
  leaves(j, json::json_pointer(), at);
  const json::json_pointer where = at[1 + rng() % (at.size() - 1)]; // not the root
  if (kind == 1) {
    j[where] = hostileValue(rng);
  } else if (kind == 2) {
    json &parent = j[where.parent_pointer()];
    if (parent.is_object())
      parent.erase(where.back());
    else
      parent.erase(parent.begin() + static_cast<std::ptrdiff_t>(std::stoul(where.back())));
  } else {
    json &parent = j[where.parent_pointer()];
    if (parent.is_array())
      parent.push_back(j[where]);
    else
      j[where] = hostileValue(rng);
  }
  return j.dump();
}

/// How many mutated files were read and how many refused; each refusal says why.
struct Tally {
  int accepted = 0, refused = 0;
  void count(const Status &s) {
    if (s.ok()) {
      ++accepted;
    } else {
      ++refused;
      EXPECT_FALSE(s.message().empty());
    }
  }
  /// Prints the counts; most mutations must be refused, or they did not reach the checks.
  void report(const char *what) const {
    std::printf("%s: %d mutations, %d read, %d refused\n", what, accepted + refused, accepted,
                refused);
    EXPECT_GT(refused, (accepted + refused) / 2);
  }
};

/// A checkpoint of two tensors (one split into chunks by rows) in a fresh directory; its
/// iter_ directory.
std::string writeCheckpoint() {
  const std::string dir = ::testing::TempDir() + "fuzz-ckpt-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  checkpoint::Index index;
  index.iteration = 3;
  index.model = "fuzz";
  index.state = {{"step", "3"}, {"data_position", "12"}, {"seed", "1"}};
  index.tensors["w"] = {"F32", {4, 3}, {}, 0};
  index.tensors["b"] = {"F32", {5}, {}, 0};
  std::string written;
  Status s = checkpoint::writeWholeCheckpoint(
      dir, index,
      [](const std::string &name, std::vector<char> &bytes) {
        bytes.assign(name == "w" ? 48 : 20, static_cast<char>(name[0]));
        return Status::success();
      },
      written);
  EXPECT_TRUE(s.ok()) << s.message();
  return written;
}

TEST(FileFuzz, CheckpointIndexMutationsAreReadOrRefused) {
  const uint64_t seed = test::testSeed("MT_FUZZ_SEED");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string dir = writeCheckpoint(), indexPath = dir + "/" + checkpoint::kIndex;
  const std::string good = readText(indexPath);
  ASSERT_FALSE(good.empty());
  Tally tally;
  for (int i = 0; i < 2000; ++i) {
    writeText(indexPath, mutate(good, rng));
    checkpoint::CheckpointReader reader;
    Status s = checkpoint::CheckpointReader::open(dir, reader);
    if (s.ok())
      s = reader.checkChunks();
    if (s.ok())
      s = reader.verifyAll(64);
    if (s.ok()) {
      // What is accepted reads whole: every tensor, into as many bytes as it declares.
      for (const auto &[name, entry] : reader.index().tensors) {
        uint64_t bytes = 0;
        ASSERT_TRUE(checkpoint::tensorBytes(entry.dtype, entry.shape, bytes)) << name;
        std::vector<char> data(bytes);
        s = reader.read(name, wholeBox(entry.shape), data.data());
        if (!s.ok())
          break;
      }
    }
    tally.count(s);
  }
  writeText(indexPath, good);
  checkpoint::CheckpointReader reader;
  ASSERT_OK(checkpoint::CheckpointReader::open(dir, reader));
  tally.report("checkpoint index");
}

TEST(FileFuzz, HuggingFaceConfigMutationsAreReadOrRefused) {
  const uint64_t seed = test::testSeed("MT_FUZZ_SEED");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Tally tally;
  for (const char *file :
       {"llama-tiny.json", "gpt2.json", "llama3.1-405b.json", "configs/qwen2.5-7b.v5.json",
        "mixtral-8x7b.json", "configs/qwen3-30b-a3b.v4.json"}) {
    const std::string good = readText(std::string(MTC_SOURCE_DIR) + "/test/lit/hf/Inputs/" + file);
    ASSERT_FALSE(good.empty()) << file;
    hf::ModelConfig config;
    ASSERT_OK(hf::parseModelConfig(good, config));
    for (int i = 0; i < 1000; ++i) {
      Status s = hf::parseModelConfig(mutate(good, rng), config);
      tally.count(s);
      if (s.ok()) { // accepted dimensions are the ones the reader promises
        EXPECT_GT(config.hidden, 0);
        EXPECT_GT(config.layers, 0);
        EXPECT_GT(config.vocab, 0);
      }
    }
  }
  tally.report("config.json");
}

TEST(FileFuzz, SafetensorsHeaderMutationsAreReadOrRefused) {
  const uint64_t seed = test::testSeed("MT_FUZZ_SEED");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";
  const std::string path = ::testing::TempDir() + "fuzz-" + std::to_string(::getpid()) +
                           ".safetensors";
  Tally tally;
  for (int i = 0; i < 2000; ++i) {
    const std::string text = mutate(header, rng);
    std::string bytes(8, '\0');
    for (int k = 0; k < 8; ++k)
      bytes[k] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * k));
    writeText(path, bytes + text + std::string(32, '\1'));
    safetensors::File file;
    Status s = safetensors::File::open(path, file);
    if (s.ok()) {
      for (const std::string &name : {std::string("a"), std::string("b")}) {
        std::vector<char> data;
        if (!file.read(name, data).ok())
          break;
        EXPECT_LE(data.size(), 32u) << "read past the file";
      }
    }
    tally.count(s);
  }
  tally.report("safetensors header");
}

/// `tensors` (name → F32 elements, each a vector) as a safetensors file at `path`.
void writeShard(const std::string &path, const std::map<std::string, int64_t> &tensors) {
  std::vector<safetensors::Entry> entries;
  for (const auto &[name, n] : tensors)
    entries.push_back({name, "F32", {n}});
  ASSERT_OK(safetensors::write(path, entries, {}, [&](size_t i, const safetensors::Sink &sink) {
    const std::vector<float> values(entries[i].shape[0], static_cast<float>(i));
    return sink(values.data(), values.size() * sizeof(float));
  }));
}

TEST(FileFuzz, HuggingFaceShardIndexMutationsAreReadOrRefused) {
  const uint64_t seed = test::testSeed("MT_FUZZ_SEED");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string dir = ::testing::TempDir() + "fuzz-hf-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  writeShard(dir + "/model-00001-of-00002.safetensors", {{"a", 3}, {"b", 2}});
  writeShard(dir + "/model-00002-of-00002.safetensors", {{"c", 4}});
  const std::string indexPath = dir + "/model.safetensors.index.json";
  const json good = {{"metadata", {{"total_size", 36}}},
                     {"weight_map",
                      {{"a", "model-00001-of-00002.safetensors"},
                       {"b", "model-00001-of-00002.safetensors"},
                       {"c", "model-00002-of-00002.safetensors"}}}};
  safetensors::Shards shards;
  writeText(indexPath, good.dump());
  ASSERT_OK(safetensors::Shards::open(dir, shards));
  Tally tally;
  for (int i = 0; i < 2000; ++i) {
    writeText(indexPath, mutate(good.dump(), rng));
    Status s = safetensors::Shards::open(dir, shards);
    if (s.ok()) { // what is accepted is tensors the map names (a shard it leaves out is
                  // not part of the model), each read whole from its shard
      for (const std::string &name : shards.names()) {
        EXPECT_TRUE(name == "a" || name == "b" || name == "c") << name;
        std::vector<char> bytes;
        ASSERT_OK(shards.read(name, bytes));
        EXPECT_EQ(bytes.size(), 4 * static_cast<size_t>(shards.find(name)->shape[0]));
      }
    }
    tally.count(s);
  }
  tally.report("model.safetensors.index.json");
}

// A map of a million tensors to a million shards is refused at the first shard that is not
// there, in time linear in the map (the shards' names were gathered by a linear search
// each, 5·10^11 comparisons).
TEST(FileFuzz, AMillionShardNamesAreRefusedAtTheFirstAbsentShard) {
  const std::string dir = ::testing::TempDir() + "fuzz-hf-many-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  std::string text = R"({"weight_map":{)";
  for (int i = 0; i < 1000000; ++i)
    text += (i ? "," : "") + cat("\"t", 1000000 + i, "\":\"s", 1000000 + i, ".safetensors\"");
  writeText(dir + "/model.safetensors.index.json", text + "}}");
  safetensors::Shards shards;
  const Status s = safetensors::Shards::open(dir, shards);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("s1000000.safetensors: cannot open"), std::string::npos)
      << s.message();
}

} // namespace
} // namespace mt
