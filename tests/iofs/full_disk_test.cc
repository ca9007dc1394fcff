// The chunk engine on a really full filesystem: a small ext4 image mounted through a loop device
// (needs root and a loop device; skipped otherwise). Writes until the filesystem refuses, then
// checks that the refusal is NoSpace, that every chunk committed before it reads back intact,
// that freed space is reused, and that a reopened engine finds exactly the committed chunks.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "iofs/chunk_engine.h"
#include "tests/iofs/test_util.h"

namespace rt::iofs {
namespace {

using testing::Content;
using testing::TempDir;

// A loop-mounted ext4 filesystem of `mib` MiB under a TempDir, unmounted on destruction.
class SmallFilesystem {
 public:
  SmallFilesystem(const std::string& name, int mib) : dir_(name) {
    image_ = dir_.path() + "/fs.img";
    mount_point_ = dir_.path() + "/mnt";
    std::filesystem::create_directories(mount_point_);
    if (geteuid() != 0) {
      why_not_ = "needs root to mount a loop device";
      return;
    }
    const std::string make = "truncate -s " + std::to_string(mib) + "M " + image_ +
                             " && mkfs.ext4 -q -m 0 " + image_ + " >/dev/null 2>&1";
    if (std::system(make.c_str()) != 0) {
      why_not_ = "mkfs.ext4 failed";
      return;
    }
    const std::string mount = "mount -o loop " + image_ + " " + mount_point_ + " 2>/dev/null";
    if (std::system(mount.c_str()) != 0) {
      why_not_ = "mount -o loop failed (no loop device?)";
      return;
    }
    mounted_ = true;
  }
  ~SmallFilesystem() {
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
  }

  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }
  const std::string& path() const { return mount_point_; }

 private:
  TempDir dir_;
  std::string image_;
  std::string mount_point_;
  std::string why_not_;
  bool mounted_ = false;
};

ChunkEngineOptions FillOptions(const std::string& dir) {
  ChunkEngineOptions o;
  o.dir = dir;
  o.chunk_size = 1 << 20;
  o.small_chunk_size = 128 << 10;
  o.slots_per_file = 2;
  o.capacity_bytes = 1ull << 40;  // the filesystem, not the engine, must run out
  o.io_buffers = 4;
  o.queue_depth = 4;
  return o;
}

void ExpectChunks(ChunkEngine& engine, const std::map<ChunkId, uint64_t>& committed) {
  for (const auto& [id, version] : committed) {
    std::vector<std::byte> got;
    ChunkInfo info;
    ASSERT_TRUE(engine.ReadAll(id, &got, &info).ok()) << "chunk " << id;
    EXPECT_EQ(info.version, version) << "chunk " << id;
    EXPECT_EQ(got, Content(id, version, 1 << 20)) << "chunk " << id;
  }
  EXPECT_EQ(engine.List().size(), committed.size());
  EXPECT_TRUE(engine.Check().empty());
}

TEST(FullDiskTest, FullFilesystemGivesNoSpaceAndLosesNothing) {
  SmallFilesystem fs("full-disk", 64);
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  const ChunkEngineOptions options = FillOptions(fs.path() + "/engine");
  auto opened = ChunkEngine::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<ChunkEngine> engine = std::move(opened).value();

  // Fill: every write either commits or fails with NoSpace; nothing else is acceptable.
  std::map<ChunkId, uint64_t> committed;
  Status refused;
  for (ChunkId id = 1; id < 1000 && refused.ok(); ++id) {
    refused = engine->Write(id, 1, Content(id, 1, 1 << 20));
    if (refused.ok()) committed[id] = 1;
  }
  ASSERT_FALSE(refused.ok()) << "a 64 MiB filesystem took 1000 MiB of chunks";
  EXPECT_EQ(refused.code(), StatusCode::kNoSpace) << refused.ToString();
  ASSERT_GT(committed.size(), 10u) << refused.ToString();
  struct statvfs st {};
  ASSERT_EQ(statvfs(fs.path().c_str(), &st), 0);
  EXPECT_LT(st.f_bavail * st.f_frsize, 4u << 20) << "the engine stopped before the disk was full";
  ExpectChunks(*engine, committed);

  // Overwriting a chunk needs a second slot; freeing two chunks makes room for it in place.
  const ChunkId first = committed.begin()->first;
  const ChunkId second = std::next(committed.begin())->first;
  const ChunkId third = std::next(committed.begin(), 2)->first;
  const ChunkId removed[] = {first, second};
  ASSERT_TRUE(engine->Remove(removed).ok());
  committed.erase(first);
  committed.erase(second);
  Status overwrite = engine->Write(third, 2, Content(third, 2, 1 << 20));
  ASSERT_TRUE(overwrite.ok()) << overwrite.ToString();
  committed[third] = 2;
  ExpectChunks(*engine, committed);

  // A reopened engine (allocator rebuilt from RocksDB) sees exactly the committed chunks.
  engine.reset();
  opened = ChunkEngine::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  engine = std::move(opened).value();
  ExpectChunks(*engine, committed);
}

// Takes every free block of the filesystem at `dir` into one file (as another tenant would).
void FillWithFiller(const std::string& dir) {
  const std::string filler = dir + "/filler";
  const int fd = open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  off_t size = 0;
  for (off_t step = 64 << 20; step >= 4096; step /= 2)
    while (fallocate(fd, 0, size, step) == 0) size += step;
  close(fd);
}

TEST(FullDiskTest, EngineOnAFullDiskRefusesCleanlyAndRecovers) {
  SmallFilesystem fs("full-disk-filler", 64);
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  const ChunkEngineOptions options = FillOptions(fs.path() + "/engine");
  std::map<ChunkId, uint64_t> committed;
  {
    auto opened = ChunkEngine::Open(options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    for (ChunkId id = 1; id <= 3; ++id) {
      ASSERT_TRUE((*opened)->Write(id, 1, Content(id, 1, 1 << 20)).ok());
      committed[id] = 1;
    }
    // The disk fills up under a running engine: a write needing a new data file is refused.
    FillWithFiller(fs.path());
    for (ChunkId id = 4; id <= 8; ++id) {
      Status s = (*opened)->Write(id, 1, Content(id, 1, 1 << 20));
      if (s.ok()) {
        committed[id] = 1;  // a free slot of an existing data file
        continue;
      }
      EXPECT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
    }
    ExpectChunks(**opened, committed);
  }
  // Opening on the full disk either works or fails with an error that names the folder.
  {
    auto opened = ChunkEngine::Open(options);
    if (opened.ok()) {
      ExpectChunks(**opened, committed);
    } else {
      EXPECT_NE(opened.status().ToString().find(options.dir), std::string::npos)
          << opened.status().ToString();
    }
  }
  // Space freed: every committed chunk is there, and writes work again.
  ASSERT_EQ(unlink((fs.path() + "/filler").c_str()), 0);
  auto opened = ChunkEngine::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ExpectChunks(**opened, committed);
  ASSERT_TRUE((*opened)->Write(100, 1, Content(100, 1, 1 << 20)).ok());
}

}  // namespace
}  // namespace rt::iofs
