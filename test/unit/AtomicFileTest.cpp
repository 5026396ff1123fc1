// A file written through AtomicFile holds all the new bytes or is as it was: after a
// commit, a failed or dropped write; and nothing planted beside it is written through.
#include "core/AtomicFile.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace mt {
namespace {

std::string directory() {
  std::string dir = ::testing::TempDir() + "atomic-file-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

bool exists(const std::string &path) { return ::access(path.c_str(), F_OK) == 0; }

std::string contents(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(AtomicFileTest, CommitReplacesTheFileAndLeavesNoTemporary) {
  const std::string path = directory() + "/commit.bin";
  ASSERT_TRUE(AtomicFile::writeWhole(path, "old", 3).ok());
  AtomicFile file;
  ASSERT_TRUE(AtomicFile::create(path, file).ok());
  const std::string temporary = file.temporary();
  EXPECT_TRUE(exists(temporary));
  ASSERT_TRUE(file.write("new ", 4).ok());
  EXPECT_EQ(contents(path), "old") << "the file changes only at the commit";
  ASSERT_TRUE(file.write("bytes", 5).ok());
  ASSERT_TRUE(file.commit().ok());
  EXPECT_EQ(contents(path), "new bytes");
  EXPECT_FALSE(exists(temporary));
  EXPECT_FALSE(file.write("more", 4).ok()) << "a committed file takes no more bytes";
}

TEST(AtomicFileTest, ADroppedWriterLeavesTheFileAsItWas) {
  const std::string path = directory() + "/dropped.bin";
  ASSERT_TRUE(AtomicFile::writeWhole(path, "old", 3).ok());
  std::string temporary;
  {
    AtomicFile file;
    ASSERT_TRUE(AtomicFile::create(path, file).ok());
    temporary = file.temporary();
    ASSERT_TRUE(file.write("partial", 7).ok());
  }
  EXPECT_EQ(contents(path), "old");
  EXPECT_FALSE(exists(temporary));
}

TEST(AtomicFileTest, FilesSyncedTogetherChangeOnlyWhenPublished) {
  const std::string dir = directory(), data = dir + "/pair.bin", index = dir + "/pair.idx";
  ASSERT_TRUE(AtomicFile::writeWhole(data, "old", 3).ok());
  AtomicFile first, second;
  ASSERT_TRUE(AtomicFile::create(data, first).ok());
  ASSERT_TRUE(AtomicFile::create(index, second).ok());
  ASSERT_TRUE(first.write("new", 3).ok());
  ASSERT_TRUE(second.write("index", 5).ok());
  ASSERT_TRUE(first.sync().ok());
  ASSERT_TRUE(second.sync().ok());
  EXPECT_EQ(contents(data), "old") << "synced, not yet published";
  EXPECT_FALSE(exists(index));
  ASSERT_TRUE(first.publish().ok());
  ASSERT_TRUE(second.publish().ok());
  EXPECT_EQ(contents(data), "new");
  EXPECT_EQ(contents(index), "index");
  EXPECT_FALSE(second.publish().ok()) << "published once";
}

TEST(AtomicFileTest, AnUncreatableFileIsNamedInTheError) {
  AtomicFile file;
  Status s = AtomicFile::create("/nonexistent-directory/plan.mtp", file);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "cannot create /nonexistent-directory/plan.mtp: No such file or directory");
  EXPECT_FALSE(file.isOpen());
}

// A shared directory where another user planted links: at the names a temporary of this
// process could have had were it named by the process alone, and at the file itself. The
// file is written; what the links point to is not.
TEST(AtomicFileTest, PlantedLinksAreNotWrittenThrough) {
  const std::string dir = directory(), path = dir + "/shared.bin", victim = dir + "/victim";
  std::ofstream(victim) << "another user's";
  const std::string pid = std::to_string(::getpid());
  for (const std::string &name :
       std::vector<std::string>{".shared.bin.tmp." + pid, ".shared.bin.tmp", "shared.bin"})
    ASSERT_EQ(::symlink(victim.c_str(), (dir + "/" + name).c_str()), 0) << name;
  ASSERT_TRUE(AtomicFile::writeWhole(path, "mine", 4).ok());
  EXPECT_EQ(contents(victim), "another user's");
  EXPECT_EQ(contents(path), "mine");
  struct stat st;
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link at the file is replaced, not followed";
}

TEST(AtomicFileTest, EachWriterHasItsOwnUnguessableTemporary) {
  const std::string path = directory() + "/two.bin";
  AtomicFile first, second;
  ASSERT_TRUE(AtomicFile::create(path, first).ok());
  ASSERT_TRUE(AtomicFile::create(path, second).ok());
  EXPECT_NE(first.temporary(), second.temporary());
  const std::string prefix = directory() + "/.two.bin.tmp." + std::to_string(::getpid()) + ".";
  for (const AtomicFile *f : {&first, &second}) {
    EXPECT_EQ(f->temporary().rfind(prefix, 0), 0u) << f->temporary();
    EXPECT_EQ(f->temporary().size(), prefix.size() + 16) << "64 random bits, in hex";
  }
  ASSERT_TRUE(second.write("2", 1).ok());
  ASSERT_TRUE(second.commit().ok());
  ASSERT_TRUE(first.write("1", 1).ok());
  ASSERT_TRUE(first.commit().ok());
  EXPECT_EQ(contents(path), "1") << "the last commit wins, whole";
}

} // namespace
} // namespace mt
