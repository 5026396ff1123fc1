// The file of cuBLASLt algorithms (MT_CUDA_GEMM_CHOICES): what one run appends, the next
// reads back word for word; the first line of a key holds; a line that is not one fails,
// naming the file and the line; no file is no choices yet.
#include "backends/cuda/GemmChoices.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace mt {
namespace {

std::string freshPath(const std::string &name) {
  const std::string path =
      ::testing::TempDir() + "gemm_choices_" + name + "." + std::to_string(getpid());
  std::remove(path.c_str());
  return path;
}

void write(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

const std::string kKey = "NVIDIA_H100_80GB_HBM3/132sm/cublasLt130401 NT m768 n2304 k8192";

TEST(GemmChoices, WhatOneRunAddsTheNextReads) {
  const std::string path = freshPath("round_trip");
  GemmChoices choices;
  ASSERT_TRUE(GemmChoices::load(path, choices).ok()) << "no file yet is no choices";
  EXPECT_EQ(choices.size(), 0u);
  const GemmAlgorithm algo{0, 1, 0xffffffffffffffffull, 0x123456789abcdef0ull, 7, 0, 0, 42};
  const GemmAlgorithm other{1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(choices.add(kKey, algo, "0: 41 us\n1: 40 us").ok());
  ASSERT_TRUE(choices.add(kKey + " bias1", other, "").ok());
  ASSERT_TRUE(choices.add(kKey, other, "").ok()) << "a key kept already is kept as it was";
  ASSERT_NE(choices.find(kKey), nullptr);
  EXPECT_EQ(*choices.find(kKey), algo);

  GemmChoices again;
  ASSERT_TRUE(GemmChoices::load(path, again).ok());
  EXPECT_EQ(again.size(), 2u);
  ASSERT_NE(again.find(kKey), nullptr);
  EXPECT_EQ(*again.find(kKey), algo);
  ASSERT_NE(again.find(kKey + " bias1"), nullptr);
  EXPECT_EQ(*again.find(kKey + " bias1"), other);
  EXPECT_EQ(again.find(kKey + " bias0"), nullptr);

  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "# 0: 41 us\n# 1: 40 us\n" + GemmChoices::line(kKey, algo) +
                      GemmChoices::line(kKey + " bias1", other));
  std::remove(path.c_str());
}

TEST(GemmChoices, TheFirstLineOfAKeyHolds) {
  const std::string path = freshPath("first");
  const GemmAlgorithm first{1, 0, 0, 0, 0, 0, 0, 0}, second{2, 0, 0, 0, 0, 0, 0, 0};
  write(path, "\n  # two ranks chose\n" + GemmChoices::line(kKey, first) +
                  GemmChoices::line(kKey, second));
  GemmChoices choices;
  ASSERT_TRUE(GemmChoices::load(path, choices).ok());
  ASSERT_NE(choices.find(kKey), nullptr);
  EXPECT_EQ(*choices.find(kKey), first);
  std::remove(path.c_str());
}

TEST(GemmChoices, ALastLineWithoutItsNewlineIsEndedFirst) {
  const std::string path = freshPath("unterminated");
  const GemmAlgorithm first{1, 0, 0, 0, 0, 0, 0, 0}, second{2, 0, 0, 0, 0, 0, 0, 0};
  std::string edited = GemmChoices::line(kKey, first);
  edited.pop_back(); // saved by an editor that ends no file with a newline
  write(path, edited);
  GemmChoices choices;
  ASSERT_TRUE(GemmChoices::load(path, choices).ok());
  ASSERT_TRUE(choices.add(kKey + " bias1", second, "").ok());
  GemmChoices again;
  const Status read = GemmChoices::load(path, again);
  ASSERT_TRUE(read.ok()) << read.message();
  ASSERT_NE(again.find(kKey), nullptr);
  EXPECT_EQ(*again.find(kKey), first);
  ASSERT_NE(again.find(kKey + " bias1"), nullptr);
  EXPECT_EQ(*again.find(kKey + " bias1"), second);
  std::remove(path.c_str());
}

TEST(GemmChoices, ALineThatIsNotOneIsNamed) {
  const std::string path = freshPath("bad");
  const std::string good = GemmChoices::line(kKey, {1, 2, 3, 4, 5, 6, 7, 8});
  const struct {
    std::string line, why;
  } cases[] = {
      {"gemn " + kKey + " algo 1 2 3 4 5 6 7 8", "not a GEMM's line"},
      {"gemm " + kKey + " algo 1 2 3 4 5 6 7", "no `algo` and eight words"},
      {"gemm algo 1 2 3 4 5 6 7 8", "no `algo` and eight words"},
      {"gemm " + kKey + " 1 2 3 4 5 6 7 8", "no `algo` and eight words"},
      {"gemm " + kKey + " algo 1 2 3 4 5 6 7 8g",
       "a word of the algorithm is not 1 to 16 lower-case hex digits"},
      {"gemm " + kKey + " algo 1 2 3 4 5 6 7 F",
       "a word of the algorithm is not 1 to 16 lower-case hex digits"},
      {"gemm " + kKey + " algo 1 2 3 4 5 6 7 10000000000000000",
       "a word of the algorithm is not 1 to 16 lower-case hex digits"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.line);
    write(path, good + c.line + "\n");
    GemmChoices choices;
    const Status read = GemmChoices::load(path, choices);
    ASSERT_FALSE(read.ok());
    EXPECT_NE(read.message().find(path + ":2: " + c.why), std::string::npos) << read.message();
  }
  std::remove(path.c_str());
}

TEST(GemmChoices, WhatIsNotAFileIsRefused) {
  const std::string dir = freshPath("dir");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  GemmChoices choices;
  const Status read = GemmChoices::load(dir, choices);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.message().find("not a regular file"), std::string::npos) << read.message();
  ::rmdir(dir.c_str());
}

} // namespace
} // namespace mt
