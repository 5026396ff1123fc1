// A file written through AtomicFile holds all the new bytes or is as it was: after a
// commit, a failed or dropped write, and a writer that died (its temporary left behind).
#include "core/AtomicFile.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

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
  EXPECT_TRUE(exists(AtomicFile::temporaryPath(path)));
  ASSERT_TRUE(file.write("new ", 4).ok());
  EXPECT_EQ(contents(path), "old") << "the file changes only at the commit";
  ASSERT_TRUE(file.write("bytes", 5).ok());
  ASSERT_TRUE(file.commit().ok());
  EXPECT_EQ(contents(path), "new bytes");
  EXPECT_FALSE(exists(AtomicFile::temporaryPath(path)));
  EXPECT_FALSE(file.write("more", 4).ok()) << "a committed file takes no more bytes";
}

TEST(AtomicFileTest, ADroppedWriterLeavesTheFileAsItWas) {
  const std::string path = directory() + "/dropped.bin";
  ASSERT_TRUE(AtomicFile::writeWhole(path, "old", 3).ok());
  {
    AtomicFile file;
    ASSERT_TRUE(AtomicFile::create(path, file).ok());
    ASSERT_TRUE(file.write("partial", 7).ok());
  }
  EXPECT_EQ(contents(path), "old");
  EXPECT_FALSE(exists(AtomicFile::temporaryPath(path)));
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

TEST(AtomicFileTest, StaleTemporariesOfDeadWritersAreRemoved) {
  const std::string dir = directory(), path = dir + "/stale.bin";
  for (const char *pid : {"1", "99999"})
    std::ofstream(dir + "/.stale.bin.tmp." + pid) << "left by a crash";
  std::ofstream(dir + "/.other.bin.tmp.1") << "another file's";
  AtomicFile::removeStale(path);
  EXPECT_FALSE(exists(dir + "/.stale.bin.tmp.1"));
  EXPECT_FALSE(exists(dir + "/.stale.bin.tmp.99999"));
  EXPECT_TRUE(exists(dir + "/.other.bin.tmp.1")) << "only this file's temporaries go";
}

} // namespace
} // namespace mt
