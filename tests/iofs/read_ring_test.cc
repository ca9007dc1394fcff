// ReadRing (iofs/net/read_ring.h): the reads coroutines ask for in one turn of the io_context
// reach the kernel in one submission, and each coroutine resumes with its own bytes (checked
// against what was written); a ring with no free entry answers -EBUSY at once and the reads it
// took still complete.
#include "iofs/net/read_ring.h"

#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include "tests/iofs/test_util.h"

namespace rt::iofs {
namespace {

namespace asio = boost::asio;
using testing::Content;
using testing::TempDir;

constexpr uint32_t kBlock = 4096;
constexpr int kBlocks = 64;

// A file of kBlocks blocks of `bytes`, opened for O_DIRECT reads (closed with the struct).
struct DirectFile {
  int fd = -1;
  DirectFile(const std::string& path, const std::vector<std::byte>& bytes) {
    const int out = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    EXPECT_GE(out, 0) << std::strerror(errno);
    EXPECT_EQ(write(out, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    EXPECT_EQ(fsync(out), 0);
    close(out);
    fd = open(path.c_str(), O_RDONLY | O_DIRECT);
    EXPECT_GE(fd, 0) << "O_DIRECT open of " << path << ": " << std::strerror(errno);
  }
  ~DirectFile() { close(fd); }
};

// 4096-aligned memory for `blocks` blocks.
std::unique_ptr<std::byte, decltype(&std::free)> AlignedBlocks(int blocks) {
  return {static_cast<std::byte*>(std::aligned_alloc(kBlock, size_t{kBlock} * blocks)), &std::free};
}

// Spawns one coroutine per destination block i that reads file block `from(i)` into it.
template <typename From>
void SpawnReads(asio::io_context& io, ReadRing& ring, int fd, std::byte* dest, int count,
                std::vector<int>& results, From from) {
  results.assign(count, INT_MIN);
  for (int i = 0; i < count; ++i) {
    asio::co_spawn(
        io,
        [&ring, fd, dest, &results, i,
         offset = uint64_t{kBlock} * from(i)]() -> asio::awaitable<void> {
          results[i] = co_await ring.Read(fd, dest + size_t{kBlock} * i, kBlock, offset);
        },
        asio::detached);
  }
}

// A file of kBlocks blocks of known bytes open for O_DIRECT reads, an io_context, and aligned
// memory for kBlocks blocks to read into.
class ReadRingTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GE(file_.fd, 0); }

  // A ring of `depth` entries on io_ (null, and the test failed, if it could not be made).
  std::unique_ptr<ReadRing> Ring(unsigned depth) {
    auto ring = ReadRing::Create(io_, depth);
    EXPECT_TRUE(ring.ok()) << ring.status().ToString();
    return ring.ok() ? std::move(*ring) : nullptr;
  }

  // True if destination block `i` holds file block `from`.
  bool Holds(int i, int from) const {
    return std::memcmp(dest_.get() + size_t{kBlock} * i, bytes_.data() + size_t{kBlock} * from,
                       kBlock) == 0;
  }

  TempDir dir_{"read-ring"};
  const std::vector<std::byte> bytes_ = Content(3, 1, size_t{kBlock} * kBlocks);
  DirectFile file_{dir_.path() + "/blocks", bytes_};
  asio::io_context io_;
  std::unique_ptr<std::byte, decltype(&std::free)> dest_ = AlignedBlocks(kBlocks);
  std::vector<int> results_;
};

TEST_F(ReadRingTest, ReadsOfOneTurnShareOneSubmissionAndGetTheirOwnBytes) {
  std::unique_ptr<ReadRing> ring = Ring(64);
  ASSERT_NE(ring, nullptr);
  auto reversed = [](int i) { return kBlocks - 1 - i; };
  SpawnReads(io_, *ring, file_.fd, dest_.get(), 32, results_, reversed);
  io_.run();
  for (int i = 0; i < 32; ++i) {
    ASSERT_EQ(results_[i], static_cast<int>(kBlock)) << "read " << i;
    EXPECT_TRUE(Holds(i, reversed(i))) << "read " << i << " got other bytes";
  }
  EXPECT_EQ(ring->reads_completed(), 32u);
  EXPECT_EQ(ring->submissions(), 1u) << "32 reads of one turn took several system calls";

  // A later turn is a submission of its own.
  io_.restart();
  SpawnReads(io_, *ring, file_.fd, dest_.get(), 8, results_, [](int i) { return i; });
  io_.run();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(results_[i], static_cast<int>(kBlock)) << "read " << i;
    EXPECT_TRUE(Holds(i, i)) << "read " << i;
  }
  EXPECT_EQ(ring->submissions(), 2u);
}

TEST_F(ReadRingTest, AFullRingAnswersBusyAndCompletesWhatItTook) {
  std::unique_ptr<ReadRing> ring = Ring(4);
  ASSERT_NE(ring, nullptr);
  SpawnReads(io_, *ring, file_.fd, dest_.get(), 6, results_, [](int i) { return i; });
  io_.run();
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(results_[i], static_cast<int>(kBlock)) << "read " << i;
    EXPECT_TRUE(Holds(i, i)) << "read " << i;
  }
  EXPECT_EQ(results_[4], -EBUSY);
  EXPECT_EQ(results_[5], -EBUSY);
  EXPECT_EQ(ring->reads_completed(), 4u);
}

}  // namespace
}  // namespace rt::iofs
