// Reclaiming orphan chunks (FileSystem::CollectOrphans and fsck) over a real local chunk engine:
// chunks past a file's size and chunks of no file are deleted, while the chunks of a running
// write (its write intent) are never touched, and a write into an inode whose orphans are being
// deleted waits for the deletion instead of losing its data to it.
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "iofs/file_system.h"
#include "tests/iofs/test_util.h"

namespace rt::iofs {
namespace {

using testing::TempDir;

constexpr uint32_t kFileChunk = 64 << 10;

ChunkEngineOptions EngineOptions(const std::string& dir) {
  ChunkEngineOptions o;
  o.dir = dir;
  o.chunk_size = 256 << 10;
  o.small_chunk_size = 64 << 10;
  o.slots_per_file = 16;
  o.capacity_bytes = 256 << 20;
  o.io_buffers = 8;
  return o;
}

std::vector<std::byte> Bytes(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = std::byte(rng());
  return out;
}

// A one-shot gate: Pass() blocks until Open(); Wait() blocks until a Pass() has begun.
class Gate {
 public:
  void Pass() {
    std::unique_lock lock(mu_);
    reached_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  bool WaitReached() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return reached_; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool reached_ = false;
  bool open_ = false;
};

// Forwards to a real store; the first put of file data (not the namespace) stops at `put_gate`
// after it is stored, and the first delete stops at `delete_gate` before it runs.
class GatedStore : public ObjectStore {
 public:
  explicit GatedStore(ObjectStore* inner) : inner_(inner) {}
  Status Put(std::span<const ObjectPut> puts) override {
    Status s = inner_->Put(puts);
    if (gate_puts && puts[0].key != kNamespaceKey && !put_passed_.exchange(true)) put_gate.Pass();
    return s;
  }
  Status Get(ObjectKey key, uint64_t offset, uint64_t length,
             std::vector<std::byte>* out) override {
    return inner_->Get(key, offset, length, out);
  }
  Status Delete(std::span<const ObjectKey> keys) override {
    if (gate_deletes && !delete_passed_.exchange(true)) delete_gate.Pass();
    return inner_->Delete(keys);
  }
  Result<std::vector<ObjectKey>> Keys() override { return inner_->Keys(); }
  uint32_t max_object_size() const override { return inner_->max_object_size(); }
  std::vector<std::string> CheckStorage() override { return inner_->CheckStorage(); }

  std::atomic<bool> gate_puts{false};
  std::atomic<bool> gate_deletes{false};
  Gate put_gate;
  Gate delete_gate;

 private:
  ObjectStore* const inner_;
  std::atomic<bool> put_passed_{false};
  std::atomic<bool> delete_passed_{false};
};

struct Stack {
  explicit Stack(const std::string& dir) {
    auto e = ChunkEngine::Open(EngineOptions(dir));
    RT_CHECK(e.ok());
    engine = std::move(e).value();
    local = NewLocalObjectStore(engine.get());
    store = std::make_unique<GatedStore>(local.get());
    auto f = FileSystem::Open(store.get(), kFileChunk);
    RT_CHECK(f.ok());
    fs = std::move(f).value();
  }
  std::unique_ptr<ChunkEngine> engine;
  std::unique_ptr<ObjectStore> local;
  std::unique_ptr<GatedStore> store;
  std::unique_ptr<FileSystem> fs;
};

std::vector<std::byte> ReadAll(FileSystem& fs, const std::string& path) {
  std::vector<std::byte> out;
  Status s = fs.Read(path, 0, UINT64_MAX, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(OrphanTest, ChunksPastTheSizeAndOfNoFileAreCollected) {
  TempDir dir("orphan-collect");
  Stack st(dir.path());
  const auto data = Bytes(1, 100000);  // chunks 0 and 1
  auto file = st.fs->Create("/f");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(st.fs->Write("/f", 0, data).ok());
  // What a server that died between storing chunks and committing the size leaves behind: a
  // chunk past the file's size, and one of an inode whose creation never committed.
  const auto stray = Bytes(2, 5000);
  const ObjectPut puts[] = {{DataKey(file->ino, 5), stray}, {DataKey(file->ino + 7, 0), stray}};
  ASSERT_TRUE(st.local->Put(puts).ok());
  const uint64_t engine_chunks = st.engine->Usage().chunks;

  auto report = st.fs->Fsck(false);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->orphan_chunks, 2u);
  EXPECT_EQ(report->chunks, 2u);
  auto collected = st.fs->CollectOrphans();
  ASSERT_TRUE(collected.ok()) << collected.status().ToString();
  EXPECT_EQ(*collected, 2u);
  EXPECT_EQ(st.engine->Usage().chunks, engine_chunks - 2);  // the space is free again
  report = st.fs->Fsck(false);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->orphan_chunks, 0u);
  EXPECT_TRUE(report->problems.empty());
  EXPECT_EQ(*st.fs->CollectOrphans(), 0u);
  EXPECT_EQ(ReadAll(*st.fs, "/f"), data);
}

TEST(OrphanTest, ChunksOfARunningWriteAreNeverCollected) {
  TempDir dir("orphan-running");
  Stack st(dir.path());
  ASSERT_TRUE(st.fs->Create("/g").ok());
  const auto data = Bytes(3, 4 * kFileChunk + 1000);  // five chunks, one put batch
  st.store->gate_puts = true;
  Status written;
  std::thread writer([&] { written = st.fs->Write("/g", 0, data); });
  // The chunks are stored, the size not yet committed: by size alone they are orphans.
  ASSERT_TRUE(st.store->put_gate.WaitReached());
  auto keys = st.store->Keys();
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 6u);  // the namespace and five chunks
  EXPECT_EQ(st.fs->Stat("/g")->size, 0u);
  auto report = st.fs->Fsck(true);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->orphan_chunks, 0u);
  auto collected = st.fs->CollectOrphans();
  ASSERT_TRUE(collected.ok());
  EXPECT_EQ(*collected, 0u);
  st.store->put_gate.Open();
  writer.join();
  ASSERT_TRUE(written.ok()) << written.ToString();
  EXPECT_EQ(ReadAll(*st.fs, "/g"), data);
  report = st.fs->Fsck(false);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->chunks, 5u);
  EXPECT_EQ(report->orphan_chunks, 0u);
}

TEST(OrphanTest, AWriteIntoAnInodeBeingCollectedWaitsForTheDeletion) {
  TempDir dir("orphan-wait");
  Stack st(dir.path());
  auto file = st.fs->Create("/h");
  ASSERT_TRUE(file.ok());
  // An orphan at chunk 3, past the (empty) file's size.
  const auto stray = Bytes(4, 3000);
  const ObjectPut put{DataKey(file->ino, 3), stray};
  ASSERT_TRUE(st.local->Put(std::span<const ObjectPut>(&put, 1)).ok());
  st.store->gate_deletes = true;
  Result<uint64_t> collected = uint64_t{0};
  std::thread collector([&] { collected = st.fs->CollectOrphans(); });
  ASSERT_TRUE(st.store->delete_gate.WaitReached());
  // A write of that very chunk while its deletion is decided but not done: it must not land
  // before the deletion (which would then erase it).
  const auto data = Bytes(5, 4 * kFileChunk);
  std::atomic<bool> write_done{false};
  Status written;
  std::thread writer([&] {
    written = st.fs->Write("/h", 0, data);
    write_done = true;
  });
  // Give a wrong implementation time to finish the write early (a correct one waits anyway).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(write_done.load());
  st.store->delete_gate.Open();
  collector.join();
  writer.join();
  ASSERT_TRUE(collected.ok()) << collected.status().ToString();
  EXPECT_EQ(*collected, 1u);
  ASSERT_TRUE(written.ok()) << written.ToString();
  EXPECT_EQ(ReadAll(*st.fs, "/h"), data);
}

}  // namespace
}  // namespace rt::iofs
