// Save and load synthetic states: every codec, re-sharding between layouts (boxes along rows and
// columns, data-parallel replicas, ZeRO-style flat ranges) checked element by element against the
// naive reference, the spread of replicated writes, async and sync saves, retention.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "ckpt/region.h"
#include "ckpt/write_plan.h"
#include "tests/ckpt/util.h"

namespace rt::ckpt {
namespace {

using testing::LoadAndCheck;
using testing::SaveLayout;
using testing::SaveSpec;
using testing::SynthLayout;
using testing::TempDir;

WriterOptions Options(std::shared_ptr<Storage> storage, std::string run_id, int rank = 0,
                      int world = 1) {
  WriterOptions o;
  o.storage = std::move(storage);
  o.run_id = std::move(run_id);
  o.rank = rank;
  o.world = world;
  return o;
}

std::shared_ptr<Storage> Posix(const TempDir& dir) { return OpenStorage(dir.path()).value(); }

TEST(RoundTripTest, EveryCodecPosixAndMemory) {
  TempDir dir("codecs");
  const SynthLayout layout{.tp = 2, .dp = 2};
  int n = 0;
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kByteGroupedZstd}) {
    for (auto storage : {Posix(dir), OpenStorage("mem://codecs").value()}) {
      const int64_t step = 10 * ++n;
      ASSERT_TRUE(SaveLayout(storage, layout, step, {.codec = codec, .piece_bytes = 100}).ok());
      ASSERT_TRUE(LoadAndCheck(storage, layout, step).ok()) << CodecName(codec);
      auto reader = CheckpointReader::Open(storage, step).value();
      EXPECT_EQ(reader->manifest().engine_state, testing::EngineStateOf(step));
      EXPECT_EQ(reader->manifest().layout, layout.Name());
      EXPECT_EQ(reader->manifest().world, 4);
      for (const TensorEntry& t : reader->manifest().tensors)
        for (const StoredPiece& p : t.pieces) {
          EXPECT_EQ(p.codec, codec);
          EXPECT_LE(p.raw_length, 100u);
        }
      auto problems = reader->Verify();
      ASSERT_TRUE(problems.ok());
      EXPECT_TRUE(problems->empty()) << problems->front();
    }
  }
}

TEST(RoundTripTest, ReshardBetweenEveryPairOfLayouts) {
  const std::vector<SynthLayout> layouts = {
      {.tp = 1, .dp = 1},
      {.tp = 2, .dp = 2},
      {.tp = 3, .dp = 1, .columns = true},
      {.tp = 1, .dp = 4, .zero = true},
      {.tp = 2, .dp = 3, .zero = true, .columns = true},
      {.tp = 2, .dp = 2, .spread = false},
  };
  int64_t step = 0;
  for (const SynthLayout& from : layouts) {
    auto storage = OpenStorage("mem://reshard-" + from.Name()).value();
    ++step;
    const Codec codec = step % 2 ? Codec::kNone : Codec::kByteGroupedZstd;
    ASSERT_TRUE(SaveLayout(storage, from, step, {.codec = codec, .piece_bytes = 64}).ok());
    auto problems = CheckpointReader::Open(storage, step).value()->Verify();
    EXPECT_TRUE(problems->empty()) << from.Name() << ": " << problems->front();
    for (const SynthLayout& to : layouts) {
      Status s = LoadAndCheck(storage, to, step);
      EXPECT_TRUE(s.ok()) << from.Name() << " -> " << to.Name() << ": " << s.ToString();
    }
  }
}

TEST(RoundTripTest, ReplicatedPiecesAreWrittenOnceAndSpreadOverReplicas) {
  TempDir dir("spread");
  auto storage = Posix(dir);
  const SynthLayout layout{.tp = 1, .dp = 4};
  ASSERT_TRUE(SaveLayout(storage, layout, 1).ok());
  auto reader = CheckpointReader::Open(storage, 1).value();
  uint64_t stored = 0, state = 0;
  for (const TensorEntry& t : reader->manifest().tensors) {
    for (const StoredPiece& p : t.pieces) stored += p.raw_length;
    state += t.global_shape.numel() * DTypeSize(t.dtype);
  }
  EXPECT_EQ(stored, state);  // no element twice
  std::vector<uint64_t> sizes;
  for (int r = 0; r < 4; ++r)
    sizes.push_back(std::filesystem::file_size(dir.path() + "/" + StepDir(1) + "/" + DataFile(r)));
  for (uint64_t size : sizes) {
    EXPECT_GE(size, state / 4 - 64) << "every replica writes about a quarter";
    EXPECT_LE(size, state / 4 + 64);
  }
  // Without replica_count only replica 0 writes.
  ASSERT_TRUE(SaveLayout(storage, {.tp = 1, .dp = 4, .spread = false}, 2).ok());
  EXPECT_EQ(std::filesystem::file_size(dir.path() + "/" + StepDir(2) + "/" + DataFile(1)), 0u);
  EXPECT_TRUE(LoadAndCheck(storage, {.tp = 2, .dp = 1}, 2).ok());
}

// What the writers say they wrote is what the committed folder holds (data files, and rank 0's
// MANIFEST), and a reader that needs every piece reads exactly the folder's bytes.
TEST(RoundTripTest, FootprintsAddUpToTheStepFolder) {
  TempDir dir("footprint");
  auto storage = Posix(dir);
  const SynthLayout layout{.tp = 2, .dp = 2};
  std::vector<testing::SynthRank> ranks;
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < layout.world(); ++r) {
    ranks.push_back(testing::MakeRank(layout, r, true));
    WriterOptions o = Options(storage, "footprint", r, layout.world());
    o.codec = Codec::kZstd;  // stored bytes differ from the raw ones
    o.piece_bytes = 100;
    writers.push_back(CheckpointWriter::Create(o).value());
    EXPECT_EQ(writers.back()->last_save().step, -1);
  }
  for (int r = 0; r < layout.world(); ++r)
    ASSERT_TRUE(writers[r]->Save(7, ranks[r].shards, testing::EngineStateOf(7)).ok());
  uint64_t written = 0;
  for (auto& w : writers) {
    ASSERT_TRUE(w->Wait(Deadline::AfterMs(60000)).ok());
    EXPECT_EQ(w->last_save().step, 7);
    EXPECT_GE(w->last_save().seconds, 0);
    written += w->last_save().bytes;
  }
  uint64_t folder = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir.path() + "/" + StepDir(7)))
    folder += f.file_size();
  EXPECT_EQ(written, folder);
  const uint64_t manifest =
      std::filesystem::file_size(dir.path() + "/" + StepDir(7) + "/" + kManifestFile);
  EXPECT_EQ(
      writers[0]->last_save().bytes,
      manifest + std::filesystem::file_size(dir.path() + "/" + StepDir(7) + "/" + DataFile(0)));

  auto reader = CheckpointReader::Open(storage, 7).value();
  EXPECT_EQ(reader->bytes_read(), manifest);
  testing::SynthRank whole = testing::MakeRank({.tp = 1, .dp = 1}, 0, false);
  ASSERT_TRUE(reader->Load(whole.shards).ok());
  EXPECT_EQ(reader->bytes_read(), folder);
}

// A storage that counts the range reads it passes on, and refuses those longer than
// `refuse_above` bytes with `refusal` (a store whose requests are size-limited, or one out of
// reach for all but the smallest reads).
class CountingStorage : public Storage {
 public:
  CountingStorage(std::shared_ptr<Storage> inner, uint64_t refuse_above,
                  StatusCode refusal = StatusCode::kInvalidArgument)
      : inner_(std::move(inner)), refuse_above_(refuse_above), refusal_(refusal) {}
  Result<std::unique_ptr<StorageFileWriter>> CreateFile(const std::string& path) override {
    return inner_->CreateFile(path);
  }
  Result<std::vector<uint8_t>> ReadFile(const std::string& path) override {
    return inner_->ReadFile(path);
  }
  Status ReadRange(const std::string& path, uint64_t offset, std::span<uint8_t> out) override {
    ++range_reads;
    if (out.size() > refuse_above_)
      return Status(refusal_,
                    "reads of more than " + std::to_string(refuse_above_) + " bytes refused");
    return inner_->ReadRange(path, offset, out);
  }
  Result<std::vector<std::string>> List(const std::string& dir) override {
    return inner_->List(dir);
  }
  Result<uint64_t> FileSize(const std::string& path) override { return inner_->FileSize(path); }
  Status Remove(const std::string& path) override { return inner_->Remove(path); }
  Status RenameAtomic(const std::string& from, const std::string& to) override {
    return inner_->RenameAtomic(from, to);
  }
  std::string uri() const override { return inner_->uri(); }

  std::atomic<int> range_reads{0};

 private:
  std::shared_ptr<Storage> inner_;
  uint64_t refuse_above_;
  StatusCode refusal_;
};

// The pieces a load needs are read with one storage call per data file when they lie next to
// each other (a call per piece costs a round trip on the chunk store and the memory tier); when
// such a read fails, the pieces are read one by one and the load still succeeds — unless the
// storage is out of reach: then the load fails at once, without a retry per piece.
TEST(RoundTripTest, NeighbouringPiecesAreReadTogetherAndOneByOneWhenThatFails) {
  TempDir dir("merged");
  const SynthLayout layout{.tp = 2, .dp = 2};
  ASSERT_TRUE(SaveLayout(Posix(dir), layout, 3, {.piece_bytes = 64}).ok());
  auto reader = CheckpointReader::Open(Posix(dir), 3).value();
  size_t pieces = 0;
  for (const TensorEntry& t : reader->manifest().tensors) pieces += t.pieces.size();
  int files = 0;  // data files that hold pieces
  for (int r = 0; r < layout.world(); ++r)
    files += std::filesystem::file_size(dir.path() + "/" + StepDir(3) + "/" + DataFile(r)) > 0;
  ASSERT_GT(pieces, static_cast<size_t>(8 * files));

  auto counting = std::make_shared<CountingStorage>(Posix(dir), UINT64_MAX);
  ASSERT_TRUE(LoadAndCheck(counting, {.tp = 1, .dp = 1}, 3).ok());
  EXPECT_EQ(counting->range_reads, files);  // every piece of every file, each file at once
  counting->range_reads = 0;
  ASSERT_TRUE(LoadAndCheck(counting, {.tp = 2, .dp = 1}, 3).ok());
  EXPECT_LE(counting->range_reads, 2 * files);  // two ranks, each needing parts of the files

  auto refusing = std::make_shared<CountingStorage>(Posix(dir), 64);
  ASSERT_TRUE(LoadAndCheck(refusing, {.tp = 1, .dp = 1}, 3).ok());
  EXPECT_EQ(refusing->range_reads, files + static_cast<int>(pieces));
  auto problems = CheckpointReader::Open(refusing, 3).value()->Verify();
  ASSERT_TRUE(problems.ok()) << problems.status().ToString();
  EXPECT_TRUE(problems->empty()) << problems->front();

  auto gone = std::make_shared<CountingStorage>(Posix(dir), 64, StatusCode::kUnavailable);
  testing::SynthRank whole = testing::MakeRank({.tp = 1, .dp = 1}, 0, false);
  const Status s = CheckpointReader::Open(gone, 3).value()->Load(whole.shards);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.ToString().find(DataFile(0) + " bytes ["), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("more pieces read with it"), std::string::npos) << s.ToString();
  EXPECT_LE(gone->range_reads, files);  // no piece was retried on its own
}

// Whether piece `p` of `t` holds some element of shard `s`.
bool Overlaps(const TensorEntry& t, const StoredPiece& p, const TensorShard& s) {
  bool any = false;
  ForEachOverlap(RegionOf(t, p), RegionOf(s), [&](int64_t, int64_t, int64_t) { any = true; });
  return any;
}

// A piece that goes whole into one stretch of a destination (codec none) is read straight into
// it, one read per piece, checked in place; the rest still go through merged reads. Here every
// such piece goes straight (the threshold at 0, the synthetic pieces being small): loads into
// the saved layout and into others match the reference, and a flipped byte is still caught.
TEST(RoundTripTest, PiecesReadStraightIntoTheirDestinationsLoadAndFailAlike) {
  TempDir dir("direct");
  const SynthLayout saved{.tp = 2, .dp = 2};
  ASSERT_TRUE(SaveLayout(Posix(dir), saved, 4, {}).ok());
  for (const SynthLayout& layout :
       {saved, SynthLayout{.tp = 1, .dp = 1}, SynthLayout{.tp = 2, .dp = 1, .columns = true},
        SynthLayout{.tp = 1, .dp = 2, .zero = true}}) {
    for (int r = 0; r < layout.world(); ++r) {
      auto counting = std::make_shared<CountingStorage>(Posix(dir), UINT64_MAX);
      auto reader = CheckpointReader::Open(counting, 4).value();
      reader->set_direct_read_bytes(0);
      testing::SynthRank rank = testing::MakeRank(layout, r, false);
      ASSERT_TRUE(reader->Load(rank.shards).ok()) << layout.Name() << " rank " << r;
      EXPECT_EQ(testing::CheckRank(rank), "") << layout.Name() << " rank " << r;
      if (layout.Name() == saved.Name()) {
        // The layout that saved it: every piece lands whole in one destination, read alone.
        size_t pieces = 0;
        for (const TensorShard& s : rank.shards.shards)
          for (const StoredPiece& p : reader->manifest().Find(s.kind, s.name)->pieces)
            pieces += Overlaps(*reader->manifest().Find(s.kind, s.name), p, s) ? 1 : 0;
        EXPECT_EQ(counting->range_reads, static_cast<int>(pieces)) << "rank " << r;
      }
    }
  }
  // A flipped byte in the first piece of rank 0's file fails the load, naming the piece.
  testing::FlipByte(dir.path() + "/" + StepDir(4) + "/" + DataFile(0), 1);
  auto reader = CheckpointReader::Open(Posix(dir), 4).value();
  reader->set_direct_read_bytes(0);
  testing::SynthRank rank = testing::MakeRank(saved, 0, false);
  const Status s = reader->Load(rank.shards);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.ToString().find("CRC32C mismatch"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find(DataFile(0) + " bytes [0, "), std::string::npos) << s.ToString();
}

TEST(RoundTripTest, RetentionKeepsNewestAndCleansFragments) {
  TempDir dir("keep");
  auto storage = Posix(dir);
  const SynthLayout layout{.tp = 2, .dp = 1};
  for (int64_t step : {10, 20, 30, 40, 50})
    ASSERT_TRUE(SaveLayout(storage, layout, step, {.keep = 2}).ok());
  EXPECT_EQ(ListCommitted(*storage).value(), (std::vector<int64_t>{50, 40}));
  EXPECT_EQ(storage->List("").value(),
            (std::vector<std::string>{kLatestFile, StepDir(40), StepDir(50)}));
  EXPECT_EQ(storage->List(StepDir(50)).value(),
            (std::vector<std::string>{kManifestFile, DataFile(0), DataFile(1)}));
  // A step that is not newer than the committed one is refused.
  Status again = SaveLayout(storage, layout, 50);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.ToString();
}

TEST(RoundTripTest, SynchronousSaveReturnsAfterTheCommit) {
  auto storage = OpenStorage("mem://sync").value();
  const SynthLayout layout{.tp = 1, .dp = 2};
  std::vector<testing::SynthRank> ranks;
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(testing::MakeRank(layout, r, true));
    WriterOptions o = Options(storage, "sync-run", r, 2);
    o.async = false;
    o.commit_timeout_ms = 60000;
    writers.push_back(CheckpointWriter::Create(o).value());
  }
  // Rank 1 saves synchronously on another thread: it returns only once rank 0 has committed.
  Status rank1;
  std::thread t([&] { rank1 = writers[1]->Save(7, ranks[1].shards, "x"); });
  ASSERT_TRUE(writers[0]->Save(7, ranks[0].shards, "x").ok());
  t.join();
  ASSERT_TRUE(rank1.ok()) << rank1.ToString();
  EXPECT_EQ(ListCommitted(*storage).value(), (std::vector<int64_t>{7}));
  std::string state;
  auto fresh = testing::MakeRank(layout, 0, false);
  EXPECT_EQ(LoadNewest(storage, fresh.shards, &state).value(), 7);
  EXPECT_EQ(state, "x");
  EXPECT_EQ(testing::CheckRank(fresh), "");
}

TEST(RoundTripTest, SnapshotIsTakenAtSave) {
  // The state changes right after Save returns; the checkpoint holds the values at Save.
  auto storage = OpenStorage("mem://snapshot").value();
  const SynthLayout layout{};
  auto rank = testing::MakeRank(layout, 0, true);
  auto writer = CheckpointWriter::Create(Options(storage, "snap")).value();
  ASSERT_TRUE(writer->Save(1, rank.shards, "").ok());
  for (auto& m : rank.memory) std::fill(m->begin(), m->end(), 0xEE);
  ASSERT_TRUE(writer->Wait(Deadline::AfterMs(60000)).ok());
  EXPECT_TRUE(LoadAndCheck(storage, layout, 1).ok());
}

TEST(RoundTripTest, BadShardsAreRefused) {
  auto storage = OpenStorage("mem://bad").value();
  auto writer = CheckpointWriter::Create(Options(storage, "bad")).value();
  auto rank = testing::MakeRank({}, 0, true);
  rank.shards.shards[0].box_size.dims[0] += 1;  // beyond the tensor
  Status s = writer->Save(1, rank.shards, "");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("wte"), std::string::npos) << s.ToString();
  EXPECT_FALSE(CheckpointWriter::Create(Options(storage, "x", 2, 2)).ok());
  EXPECT_FALSE(CheckpointWriter::Create(Options(storage, "")).ok());
}

}  // namespace
}  // namespace rt::ckpt
