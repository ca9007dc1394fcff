// Chain replication end to end in one process: real chunk engines per node, the chain node
// driver, the chain manager and the replicated object store; nodes killed and restarted from
// disk; a corrupted replica skipped on read.
#include "iofs/chain_node.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "iofs/file_system.h"
#include "tests/iofs/cluster_util.h"

namespace rt::iofs {
namespace {

using testing::Cluster;
using testing::Content;
using testing::TempDir;

ChainStoreOptions StoreOptions() {
  ChainStoreOptions o;
  o.max_object_size = 256 << 10;
  o.op_timeout_ms = 20000;
  return o;
}

Status PutOne(ObjectStore& store, ObjectKey key, const std::vector<std::byte>& data) {
  ObjectPut p{key, data};
  return store.Put(std::span<const ObjectPut>(&p, 1));
}

TEST(ChainNodeTest, ThreeReplicasHoldTheSameCommittedData) {
  TempDir dir("cluster-rf3");
  Cluster cluster(dir.path(), 3, 3, 3);
  auto store = NewChainObjectStore(&cluster, StoreOptions());
  for (ObjectKey key = 1; key <= 12; ++key)
    ASSERT_TRUE(PutOne(*store, key, Content(key, 1, 1000 * key)).ok());
  for (ObjectKey key = 1; key <= 12; ++key)
    for (chain::NodeId n = 1; n <= 3; ++n) {
      std::vector<std::byte> got;
      ASSERT_TRUE(cluster.ReadAt(n, key, 0, UINT64_MAX, &got, Deadline::AfterMs(1000)).ok()) << n;
      EXPECT_EQ(got, Content(key, 1, 1000 * key));
    }
  // Every write is committed on every replica (its data on disk): no replica keeps a copy in
  // memory, whether it committed by writing the value (the tail) or by moving its pending copy.
  for (chain::NodeId n = 1; n <= 3; ++n) EXPECT_EQ(cluster.node(n)->ValueBytesInMemory(), 0u) << n;
  std::vector<ObjectKey> gone = {3};
  ASSERT_TRUE(store->Delete(gone).ok());
  std::vector<std::byte> got;
  EXPECT_EQ(store->Get(3, 0, 10, &got).code(), StatusCode::kNotFound);
  auto keys = store->Keys();
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 11u);
  EXPECT_TRUE(store->CheckStorage().empty());
}

TEST(ChainNodeTest, WriteStreamSurvivesAKilledReplicaWhichResyncs) {
  TempDir dir("cluster-kill");
  Cluster cluster(dir.path(), 3, 3, 2);
  auto store = NewChainObjectStore(&cluster, StoreOptions());
  std::atomic<int> written{0};
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    for (ObjectKey key = 1; key <= 60; ++key) {
      Status s = PutOne(*store, key, Content(key, 2, 50000 + key));
      if (!s.ok()) {
        ADD_FAILURE() << s.ToString();
        failed = true;
        return;
      }
      written = static_cast<int>(key);
    }
  });
  while (written < 15 && !failed) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  cluster.Kill(3);  // a replica dies in the middle of the stream
  while (written < 35 && !failed) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(cluster.Restart(3).ok());  // comes back while writes continue
  writer.join();
  ASSERT_FALSE(failed);
  ASSERT_TRUE(cluster.WaitHealthy(std::chrono::seconds(30))) << "node 3 did not finish its resync";
  for (ObjectKey key = 1; key <= 60; ++key) {
    std::vector<std::byte> got;
    Status s = cluster.ReadAt(3, key, 0, UINT64_MAX, &got, Deadline::AfterMs(1000));
    ASSERT_TRUE(s.ok()) << "key " << key << ": " << s.ToString();
    EXPECT_EQ(got, Content(key, 2, 50000 + key)) << key;
  }
  EXPECT_TRUE(store->CheckStorage().empty());
}

// Flips a bit of every data file of a node (behind the engine's back).
void CorruptNode(const std::string& node_dir) {
  for (const auto& e : std::filesystem::directory_iterator(node_dir + "/data")) {
    int fd = open(e.path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    for (off_t at = 100; at < 4 << 20; at += 64 << 10) {
      unsigned char b = 0;
      if (pread(fd, &b, 1, at) != 1) break;
      b ^= 1;
      ASSERT_EQ(pwrite(fd, &b, 1, at), 1);
    }
    fsync(fd);
    close(fd);
  }
}

TEST(ChainNodeTest, CorruptReplicaIsSkippedWithTwoReplicasAndReportedWithOne) {
  {
    TempDir dir("cluster-corrupt2");
    Cluster cluster(dir.path(), 2, 2, 1);
    cluster.set_self(1);  // reads try node 1 first
    auto store = NewChainObjectStore(&cluster, StoreOptions());
    auto data = Content(5, 1, 200000);
    ASSERT_TRUE(PutOne(*store, 5, data).ok());
    CorruptNode(cluster.DirOf(1));
    std::vector<std::byte> got;
    EXPECT_EQ(cluster.ReadAt(1, 5, 0, UINT64_MAX, &got, Deadline::AfterMs(1000)).code(),
              StatusCode::kChecksumMismatch);
    ASSERT_TRUE(store->Get(5, 0, UINT64_MAX, &got).ok());
    EXPECT_EQ(got, data);
    EXPECT_FALSE(store->CheckStorage().empty());
  }
  {
    TempDir dir("cluster-corrupt1");
    Cluster cluster(dir.path(), 1, 1, 1);
    auto store = NewChainObjectStore(&cluster, StoreOptions());
    ASSERT_TRUE(PutOne(*store, 5, Content(5, 1, 200000)).ok());
    CorruptNode(cluster.DirOf(1));
    std::vector<std::byte> got;
    Status s = store->Get(5, 0, UINT64_MAX, &got);
    EXPECT_EQ(s.code(), StatusCode::kChecksumMismatch) << s.ToString();
    EXPECT_NE(s.ToString().find("block"), std::string::npos) << s.ToString();
  }
}

// The cluster as a router whose replica on one node accepts reads and never answers them (a
// node cut off by a partition that the chain config still names): each read there waits until
// its deadline.
class SilentReplicaRouter : public ChainRouter {
 public:
  SilentReplicaRouter(Cluster* cluster, chain::NodeId silent) : c_(cluster), silent_(silent) {}
  chain::NodeId self() const override { return silent_; }  // its replica is tried first
  std::vector<chain::NodeId> nodes() const override { return c_->nodes(); }
  size_t chain_count() const override { return c_->chain_count(); }
  chain::ChainConfig Config(chain::ChainId chain) override { return c_->Config(chain); }
  Result<uint64_t> WriteAt(chain::NodeId node, chain::ChunkKey key,
                           std::optional<std::span<const std::byte>> data, uint64_t chain_version,
                           Deadline deadline) override {
    if (silent_writes_left > 0) {
      --silent_writes_left;
      std::this_thread::sleep_for(deadline.Remaining());
      return DeadlineExceeded("node " + std::to_string(node) + " did not answer");
    }
    return c_->WriteAt(node, key, data, chain_version, deadline);
  }
  Status ReadAt(chain::NodeId node, chain::ChunkKey key, uint64_t offset, uint64_t length,
                std::vector<std::byte>* out, Deadline deadline) override {
    if (node != silent_) return c_->ReadAt(node, key, offset, length, out, deadline);
    ++silent_reads;
    std::this_thread::sleep_for(deadline.Remaining());
    return DeadlineExceeded("node " + std::to_string(node) + " did not answer");
  }
  Result<std::vector<chain::ChunkKey>> KeysAt(chain::NodeId node, Deadline deadline) override {
    return c_->KeysAt(node, deadline);
  }
  Result<std::vector<std::string>> CheckAt(chain::NodeId node, Deadline deadline) override {
    return c_->CheckAt(node, deadline);
  }
  std::atomic<int> silent_reads{0};
  std::atomic<int> silent_writes_left{0};  // the head swallows this many writes first

 private:
  Cluster* c_;
  chain::NodeId silent_;
};

// A replica that does not answer holds a read for one replica turn (replica_try_ms), not the
// whole operation deadline, and the reads after it go to the other replicas first.
TEST(ChainNodeTest, AReplicaThatDoesNotAnswerCostsOneTurnThenGoesLast) {
  TempDir dir("cluster-silent");
  Cluster cluster(dir.path(), 3, 3, 1);
  ChainStoreOptions options = StoreOptions();  // 20 s per operation
  options.replica_try_ms = 300;
  auto writer = NewChainObjectStore(&cluster, options);
  for (ObjectKey key = 1; key <= 5; ++key)
    ASSERT_TRUE(PutOne(*writer, key, Content(key, 3, 5000)).ok());
  SilentReplicaRouter router(&cluster, 1);
  auto store = NewChainObjectStore(&router, options);
  const MonoTime start = MonoClock::now();
  for (ObjectKey key = 1; key <= 5; ++key) {
    std::vector<std::byte> got;
    const Status s = store->Get(key, 0, UINT64_MAX, &got);
    ASSERT_TRUE(s.ok()) << key << ": " << s.ToString();
    EXPECT_EQ(got, Content(key, 3, 5000)) << key;
  }
  // Only the first read waited for node 1, 300 ms rather than 20 s; the next four went to the
  // answering replicas.
  EXPECT_EQ(router.silent_reads.load(), 1);
  EXPECT_LT(std::chrono::duration<double>(MonoClock::now() - start).count(), 10.0);
}

// A write whose head does not answer is tried again after write_try_ms, not left to wait for
// the whole operation deadline (20 s here).
TEST(ChainNodeTest, AWriteTheHeadDoesNotAnswerIsTriedAgain) {
  TempDir dir("cluster-silent-head");
  Cluster cluster(dir.path(), 3, 3, 1);
  ChainStoreOptions options = StoreOptions();
  options.write_try_ms = 300;
  SilentReplicaRouter router(&cluster, 1);
  router.silent_writes_left = 1;
  auto store = NewChainObjectStore(&router, options);
  const MonoTime start = MonoClock::now();
  ASSERT_TRUE(PutOne(*store, 9, Content(9, 1, 3000)).ok());
  EXPECT_LT(std::chrono::duration<double>(MonoClock::now() - start).count(), 10.0);
  EXPECT_EQ(router.silent_writes_left.load(), 0);
  std::vector<std::byte> got;
  ASSERT_TRUE(cluster.ReadAt(2, 9, 0, UINT64_MAX, &got, Deadline::AfterMs(1000)).ok());
  EXPECT_EQ(got, Content(9, 1, 3000));
}

// The cluster as a router, every call passed on; the routers below change one thing.
class ForwardingRouter : public ChainRouter {
 public:
  explicit ForwardingRouter(Cluster* cluster) : c_(cluster) {}
  chain::NodeId self() const override { return 1; }
  std::vector<chain::NodeId> nodes() const override { return c_->nodes(); }
  size_t chain_count() const override { return c_->chain_count(); }
  chain::ChainConfig Config(chain::ChainId chain) override { return c_->Config(chain); }
  Result<uint64_t> WriteAt(chain::NodeId node, chain::ChunkKey key,
                           std::optional<std::span<const std::byte>> data, uint64_t chain_version,
                           Deadline deadline) override {
    return c_->WriteAt(node, key, data, chain_version, deadline);
  }
  Status ReadAt(chain::NodeId node, chain::ChunkKey key, uint64_t offset, uint64_t length,
                std::vector<std::byte>* out, Deadline deadline) override {
    return c_->ReadAt(node, key, offset, length, out, deadline);
  }
  Result<std::vector<chain::ChunkKey>> KeysAt(chain::NodeId node, Deadline deadline) override {
    return c_->KeysAt(node, deadline);
  }
  Result<std::vector<std::string>> CheckAt(chain::NodeId node, Deadline deadline) override {
    return c_->CheckAt(node, deadline);
  }

 protected:
  Cluster* const c_;
};

// The cluster as a router whose chains have no serving member while `stopped` is set (the chain
// manager stopped them: their last serving member is away).
class StoppedChainRouter : public ForwardingRouter {
 public:
  using ForwardingRouter::ForwardingRouter;
  chain::ChainConfig Config(chain::ChainId chain) override {
    chain::ChainConfig config = c_->Config(chain);
    if (stopped) config.members.clear();
    return config;
  }
  std::atomic<bool> stopped{true};
};

// A chain without a serving member holds a read or a write for stopped_chain_ms, not the whole
// operation deadline (20 s here), then fails with Unavailable naming the chain; the operations
// after it on the same stopped chain fail at once rather than each waiting anew (a metadata
// node runs its namespace operations one after another); a chain that serves again within the
// wait is waited for. (A chaos campaign: a checkpoint's `latest` on a chain whose one up-to-date
// replica was cut off held every new worker's resume for 30 s; later, with the namespace's chain
// stopped, four workers' connects and listings queued for 3 s apiece, 40 s in all.)
TEST(ChainNodeTest, AStoppedChainFailsReadsAndWritesAfterAShortWait) {
  TempDir dir("cluster-stopped");
  Cluster cluster(dir.path(), 3, 3, 1);
  ChainStoreOptions options = StoreOptions();
  options.stopped_chain_ms = 1000;
  auto writer = NewChainObjectStore(&cluster, options);
  ASSERT_TRUE(PutOne(*writer, 4, Content(4, 3, 5000)).ok());
  StoppedChainRouter router(&cluster);
  auto store = NewChainObjectStore(&router, options);
  auto since = [](MonoTime start) {
    return std::chrono::duration<double>(MonoClock::now() - start).count();
  };

  MonoTime start = MonoClock::now();
  std::vector<std::byte> got;
  Status read = store->Get(4, 0, UINT64_MAX, &got);
  EXPECT_EQ(read.code(), StatusCode::kUnavailable) << read.ToString();
  EXPECT_NE(read.ToString().find("no serving member"), std::string::npos) << read.ToString();
  const double first = since(start);
  EXPECT_GE(first, 1.0);
  EXPECT_LT(first, 10.0);
  // The chain has been stopped for the whole wait already: the next operations fail at once.
  start = MonoClock::now();
  Status write = PutOne(*store, 5, Content(5, 3, 5000));
  EXPECT_EQ(write.code(), StatusCode::kUnavailable) << write.ToString();
  read = store->Get(4, 0, UINT64_MAX, &got);
  EXPECT_EQ(read.code(), StatusCode::kUnavailable) << read.ToString();
  EXPECT_LT(since(start), 0.5) << "each operation waited anew";

  // The chain serves again, then stops, and serves again 100 ms into a read's wait: the read
  // goes on and succeeds.
  router.stopped = false;
  ASSERT_TRUE(store->Get(4, 0, UINT64_MAX, &got).ok());
  router.stopped = true;
  start = MonoClock::now();
  std::thread back([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    router.stopped = false;
  });
  read = store->Get(4, 0, UINT64_MAX, &got);
  back.join();
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(got, Content(4, 3, 5000));
  EXPECT_LT(since(start), 10.0);
}

// The cluster as a metadata node that lost its role sees it: the chain configs of one moment,
// frozen (it hears of no change until it takes the role over again).
class FrozenConfigRouter : public ForwardingRouter {
 public:
  explicit FrozenConfigRouter(Cluster* cluster) : ForwardingRouter(cluster) {
    for (size_t chain = 0; chain < cluster->chain_count(); ++chain)
      configs_.push_back(cluster->Config(static_cast<chain::ChainId>(chain)));
  }
  chain::ChainConfig Config(chain::ChainId chain) override { return configs_.at(chain); }

 private:
  std::vector<chain::ChainConfig> configs_;
};

// A write routed by a chain config that has since changed is refused by the head, even where the
// head is the same node. (A chaos campaign: the metadata node cut off by a partition had a
// namespace write in flight to the chain's head; it landed when the partition healed, after the
// next metadata node had committed three checkpoints, and the namespace went back 5 s: those
// checkpoints' files were gone and their chunks reclaimed as orphans.)
TEST(ChainNodeTest, AWriteRoutedByAnOlderChainConfigIsRefused) {
  TempDir dir("cluster-fenced");
  Cluster cluster(dir.path(), 3, 3, 1);
  ChainStoreOptions options = StoreOptions();
  options.op_timeout_ms = 1000;
  auto current = NewChainObjectStore(&cluster, options);
  ASSERT_TRUE(PutOne(*current, 7, Content(7, 1, 4000)).ok());
  FrozenConfigRouter frozen(&cluster);
  auto deposed = NewChainObjectStore(&frozen, options);
  const chain::ChainConfig before = cluster.Config(0);
  ASSERT_EQ(before.members.size(), 3u);
  // A member other than the head goes and comes back: a new config, the same head.
  const chain::NodeId leaving = before.members.back().node;
  cluster.Kill(leaving);
  ASSERT_TRUE(PutOne(*current, 7, Content(7, 2, 4000)).ok());
  ASSERT_TRUE(cluster.Restart(leaving).ok());
  ASSERT_TRUE(cluster.WaitHealthy(std::chrono::seconds(20)));
  ASSERT_EQ(cluster.Config(0).members[0].node, before.members[0].node);
  ASSERT_GT(cluster.Config(0).version, before.version);

  Status stale = PutOne(*deposed, 7, Content(7, 3, 4000));
  EXPECT_EQ(stale.code(), StatusCode::kNotServing) << stale.ToString();
  EXPECT_NE(stale.ToString().find("routed by chain 0 version"), std::string::npos)
      << stale.ToString();
  for (chain::NodeId n : cluster.nodes()) {
    std::vector<std::byte> got;
    ASSERT_TRUE(cluster.ReadAt(n, 7, 0, UINT64_MAX, &got, Deadline::AfterMs(1000)).ok()) << n;
    EXPECT_EQ(got, Content(7, 2, 4000)) << "node " << n;
  }
  // Writes routed by the current config go on.
  ASSERT_TRUE(PutOne(*current, 7, Content(7, 4, 4000)).ok());
}

TEST(ChainNodeTest, FilesOverReplicatedStoreSurviveAFullRestart) {
  TempDir dir("cluster-files");
  auto data = Content(77, 1, 700000);
  {
    Cluster cluster(dir.path(), 3, 2, 3);
    auto store = NewChainObjectStore(&cluster, StoreOptions());
    auto fs = FileSystem::Open(store.get(), 64 << 10);
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    ASSERT_TRUE((*fs)->Create("/run/ckpt/a").ok());
    ASSERT_TRUE((*fs)->Write("/run/ckpt/a", 0, data).ok());
    ASSERT_TRUE((*fs)->Rename("/run/ckpt/a", "/run/ckpt/b").ok());
  }
  Cluster cluster(dir.path(), 3, 2, 3);
  auto store = NewChainObjectStore(&cluster, StoreOptions());
  auto fs = FileSystem::Open(store.get(), 64 << 10);
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  std::vector<std::byte> got;
  ASSERT_TRUE((*fs)->Read("/run/ckpt/b", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, data);
  auto report = (*fs)->Fsck(false);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty());
  EXPECT_EQ(report->orphan_chunks, 0u);
}

}  // namespace
}  // namespace rt::iofs
