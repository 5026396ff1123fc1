// Who writes what in a sharded save, for real models and layouts: every tensor's
// chunks tile it exactly, each chunk's writer holds the parameter, and with data
// parallelism the ranks write about equal bytes (max/mean <= 1.25).
#include "CompileWithMtc.h"
#include "StatusAssertions.h"
#include "train/Checkpoint.h"
#include "train/Safetensors.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

namespace mt {
namespace {

struct Layout {
  const char *model;
  const char *flags;
};

class AssignChunks : public ::testing::TestWithParam<Layout> {};

TEST_P(AssignChunks, TilesEveryTensorAndBalancesTheBytes) {
  const Layout layout = GetParam();
  std::string name = std::string(layout.model) + layout.flags;
  for (char &c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  const std::string path = test::compileModel(
      test::zooModel(layout.model),
      std::string("--micro-batch-size 1 --global-batch-size 64 --make-vocab-size-divisible-by 128 ") +
          layout.flags,
      name);
  ASSERT_FALSE(path.empty()) << "mtc failed on " << layout.flags;
  LoadedPlan loaded;
  ASSERT_OK(LoadedPlan::read(path, loaded));
  const plan::Plan &plan = loaded.plan();
  // Data-parallel ranks with the context-parallel ones folded in (Group::Data).
  const int tp = plan.grid()->tp(), dp = dataParts(plan), pp = plan.grid()->pp();

  const std::vector<SaveChunk> chunks = assignChunks(plan);
  std::map<std::pair<int, int32_t>, std::vector<Box>> byTensor;
  std::vector<double> bytes(static_cast<size_t>(tp) * dp * pp, 0);
  std::vector<FlatLayout> stages;
  for (int s = 0; s < pp; ++s)
    stages.push_back(flatLayout(plan, s));
  for (const SaveChunk &c : chunks) {
    byTensor[{c.kind, c.param}].push_back(c.box);
    ASSERT_GE(c.writer, 0);
    ASSERT_LT(c.writer, tp * dp * pp);
    bytes[c.writer] += 4.0 * static_cast<double>(c.box.numel());
    // The writer's stage holds the parameter, and a tensor-parallel shard's chunk lies
    // in the writer's own shard.
    const FlatLayout &stage = stages[c.writer / (tp * dp)];
    EXPECT_TRUE(std::any_of(stage.slots.begin(), stage.slots.end(),
                            [&](const FlatLayout::Slot &s) { return s.index == c.param; }));
    const plan::Param &spec = *plan.params()->Get(c.param);
    std::vector<int64_t> local(c.box.offsets); // the chunk's first element, locally
    if (spec.shard_dim() >= 0) {
      const int64_t width = spec.shape()->Get(spec.shard_dim());
      const int64_t at = c.box.offsets[spec.shard_dim()];
      // Its tensor-parallel rank's block, or an expert's weight its expert rank's.
      const int block =
          spec.expert_parallel() ? (c.writer / tp) % dp % plan.grid()->ep() : c.writer % tp;
      EXPECT_EQ(at / width, block) << spec.name()->str();
      EXPECT_LE(at + c.box.sizes[spec.shard_dim()], (at / width + 1) * width);
      local[spec.shard_dim()] -= block * width;
    }
    // State the distributed optimizer keeps in shares (the moments; the master weights
    // under mixed precision) is written by the data-parallel rank that owns those
    // elements of its stage's flat store.
    const bool mixed = plan.precision() == plan::DType::BF16 || plan.precision() == plan::DType::F16;
    if (plan.distributed_optimizer() && dp > 1 && (c.kind > 0 || mixed)) {
      int64_t index = 0;
      for (size_t d = 0; d < local.size(); ++d)
        index = index * spec.shape()->Get(d) + local[d];
      auto slot = std::find_if(stage.slots.begin(), stage.slots.end(),
                               [&](const FlatLayout::Slot &s) { return s.index == c.param; });
      const FlatShare owned = stage.shareOf((c.writer / tp) % dp);
      const int64_t first = slot->offset + index, last = first + c.box.numel();
      EXPECT_TRUE(std::any_of(owned.runs.begin(), owned.runs.end(), [&](const FlatShare::Run &r) {
        return first >= r.begin && last <= r.end;
      })) << spec.name()->str();
    }
  }
  ASSERT_EQ(byTensor.size(), static_cast<size_t>(kStateKinds) * plan.params()->size());
  for (const auto &[key, boxes] : byTensor) {
    const plan::Param &spec = *plan.params()->Get(key.second);
    std::vector<int64_t> shape(spec.global_shape()->begin(), spec.global_shape()->end());
    std::string problem;
    EXPECT_TRUE(tilesExactly(boxes, shape, problem))
        << stateTensorName(key.first, spec.name()->str()) << ": " << problem;
  }
  const double mean = std::accumulate(bytes.begin(), bytes.end(), 0.0) / bytes.size();
  const double most = *std::max_element(bytes.begin(), bytes.end());
  std::printf("%s %s: %zu chunks, bytes written per rank max/mean %.3f\n", layout.model,
              layout.flags, chunks.size(), most / mean);
  if (dp > 1) {
    EXPECT_LE(most / mean, 1.25) << "the ranks' writes are unbalanced";
  }
}

// Under expert parallelism the flat stores keep the experts after the rest, each section
// padded to whole shares: of the rest over the 4 data-parallel ranks, of the experts over
// the 2 ranks holding the same experts (data rank / ep), which share the same run.
TEST(FlatLayout, TheExpertsSectionIsSharedOverTheRanksHoldingTheSameExperts) {
  const std::string path = test::compileModel(
      test::zooModel("mixtral-tiny"),
      "--micro-batch-size 1 --global-batch-size 4 --dp 4 --ep 2 --distributed-optimizer",
      "flat_layout_ep");
  ASSERT_FALSE(path.empty());
  LoadedPlan loaded;
  ASSERT_OK(LoadedPlan::read(path, loaded));
  const FlatLayout layout = flatLayout(loaded.plan(), 0);
  // mixtral-tiny's 90,944 others (a multiple of 4), then its 98,304 / 2 local experts'.
  EXPECT_EQ(layout.experts, 90944);
  EXPECT_EQ(layout.total, 90944 + 98304);
  for (const FlatLayout::Slot &slot : layout.slots)
    EXPECT_EQ(slot.offset >= layout.experts,
              loaded.plan().params()->Get(slot.index)->expert_parallel());
  for (int rank = 0; rank < 4; ++rank) {
    const FlatShare share = layout.shareOf(rank);
    ASSERT_EQ(share.runs.size(), 2u);
    EXPECT_EQ(share.runs[0].begin, rank * 22736);
    EXPECT_EQ(share.runs[0].end, (rank + 1) * 22736);
    EXPECT_EQ(share.runs[1].begin, 90944 + rank / 2 * 49152);
    EXPECT_EQ(share.runs[1].end, 90944 + (rank / 2 + 1) * 49152);
    EXPECT_EQ(share.numel(), 22736 + 49152);
    EXPECT_EQ(share.local(share.runs[1].begin), 22736);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, AssignChunks,
    ::testing::Values(Layout{"gpt2-350m", "--dp 8"},
                      Layout{"gpt2-350m", "--dp 8 --distributed-optimizer"},
                      Layout{"gpt2-350m", "--tp 2 --dp 4 --distributed-optimizer --bf16"},
                      Layout{"gpt2-350m", "--tp 2 --pp 2 --dp 2 --distributed-optimizer"},
                      Layout{"gpt2-350m", "--pp 4 --dp 2"}, Layout{"gpt2-350m", "--tp 8"},
                      Layout{"gpt-tiny", "--tp 2 --sp --dp 2 --distributed-optimizer"},
                      Layout{"gpt-tiny", "--tp 2 --cp 2 --dp 2 --distributed-optimizer"},
                      Layout{"gpt2-350m", "--cp 4 --pp 2 --distributed-optimizer --bf16"},
                      Layout{"mixtral-tiny", "--tp 2 --sp --dp 4 --ep 2 --distributed-optimizer"},
                      Layout{"mixtral-tiny", "--pp 2 --dp 4 --ep 4 --distributed-optimizer --bf16"},
                      Layout{"gpt3-1.3b", "--tp 4 --pp 4 --vpp 2 --dp 4 --distributed-optimizer"}));

} // namespace
} // namespace mt

namespace mt {
namespace {

/// Writes `bytes` to a file of the test's temporary directory; its path.
std::string writeFile(const std::string &name, const std::string &bytes) {
  const std::string path = ::testing::TempDir() + name;
  std::FILE *f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (f) {
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  return path;
}

/// A safetensors file: the 8-byte little-endian length `length`, then `header`, then
/// `data`.
std::string safetensorsBytes(uint64_t length, const std::string &header,
                             const std::string &data = "") {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>(length >> (8 * i));
  return bytes + header + data;
}

/// The header every reader of a safetensors file starts with: its length bounded by the
/// file and by safetensors' 100 MiB, its text a JSON object; mtckpt's reader says which
/// file is not one.
TEST(SafetensorsHeader, IsReadOnceWithItsBounds) {
  const std::string good = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct Case {
    const char *name;
    std::string bytes;
    const char *why; // empty: read
  } cases[] = {
      {"short.safetensors", "abc", "shorter than its header's length"},
      {"huge.safetensors", safetensorsBytes(uint64_t{100} << 21, good),
       "an impossible header length (more than the 104857600 bytes safetensors allows), in a "
       "file of 62 bytes"},
      {"cut.safetensors", safetensorsBytes(good.size() + 10, good),
       "a header longer than the file of 62 bytes"},
      {"list.safetensors", safetensorsBytes(2, "[]"), "its header is not a JSON object"},
      {"text.safetensors", safetensorsBytes(3, "{x}"), "its header is not a JSON object"},
      {"good.safetensors", safetensorsBytes(good.size(), good, std::string(8, '\0')), ""},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = writeFile(c.name, c.bytes);
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    nlohmann::json header;
    uint64_t dataStart = 0;
    Status s = safetensors::readHeader(fd, c.bytes.size(), header, dataStart);
    ::close(fd);
    safetensors::File file;
    Status opened = safetensors::File::open(path, file);
    if (!*c.why) {
      ASSERT_OK(s);
      EXPECT_EQ(dataStart, 8 + good.size());
      ASSERT_OK(opened);
      EXPECT_EQ(file.tensors().at("x").offset, 8 + good.size());
      continue;
    }
    EXPECT_EQ(s.message(), c.why);
    EXPECT_EQ(opened.message(), path + ": not a safetensors file: " + c.why);
  }
}

} // namespace
} // namespace mt
