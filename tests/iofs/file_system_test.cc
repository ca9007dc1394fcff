// File layer tests over a real local chunk engine, checked against an in-memory reference model
// of the files, including across a reopen.
#include "iofs/file_system.h"

#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "base/bytes.h"
#include "base/crc32c.h"
#include "tests/iofs/test_util.h"

namespace rt::iofs {
namespace {

using testing::TempDir;

ChunkEngineOptions FsEngineOptions(const std::string& dir) {
  ChunkEngineOptions o;
  o.dir = dir;
  o.chunk_size = 256 << 10;
  o.small_chunk_size = 64 << 10;
  o.slots_per_file = 16;
  o.capacity_bytes = 256 << 20;
  o.io_buffers = 8;
  return o;
}

struct Stack {
  explicit Stack(const std::string& dir, uint32_t file_chunk = 64 << 10) {
    auto e = ChunkEngine::Open(FsEngineOptions(dir));
    RT_CHECK(e.ok());
    engine = std::move(e).value();
    store = NewLocalObjectStore(engine.get());
    auto f = FileSystem::Open(store.get(), file_chunk);
    RT_CHECK(f.ok());
    fs = std::move(f).value();
  }
  std::unique_ptr<ChunkEngine> engine;
  std::unique_ptr<ObjectStore> store;
  std::unique_ptr<FileSystem> fs;
};

std::vector<std::byte> Bytes(std::mt19937_64& rng, size_t n) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = std::byte(rng());
  return out;
}

TEST(FileSystemTest, RejectsInvalidPaths) {
  for (std::string_view bad :
       {std::string_view(""), std::string_view("relative"), std::string_view("/a/../b"),
        std::string_view("/a/./b"), std::string_view("/a//b"), std::string_view("/a\0b", 4),
        std::string_view("/..")}) {
    Status s = ValidatePath(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ValidatePath("/" + std::string(256, 'x')).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidatePath("/a/b.c/d").ok());
  TempDir dir("fs-paths");
  Stack st(dir.path());
  EXPECT_EQ(st.fs->Create("/x/../y").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.fs->Create("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.fs->Rename("/nope", "/a").code(), StatusCode::kNotFound);
}

TEST(FileSystemTest, MatchesAReferenceModelAcrossReopen) {
  TempDir dir("fs-model");
  std::mt19937_64 rng(42);
  std::map<std::string, std::vector<std::byte>> model;
  auto st = std::make_unique<Stack>(dir.path());
  const std::vector<std::string> names = {"/a", "/b", "/d/c", "/d/e/f", "/g"};
  for (int step = 0; step < 160; ++step) {
    const std::string& path = names[rng() % names.size()];
    const int op = static_cast<int>(rng() % 10);
    if (op < 2) {
      auto r = st->fs->Create(path);
      EXPECT_EQ(r.ok(), !model.count(path)) << path;
      if (r.ok()) model[path] = {};
    } else if (op < 6 && model.count(path)) {
      const uint64_t off = rng() % (300 << 10);
      auto data = Bytes(rng, rng() % (200 << 10));
      ASSERT_TRUE(st->fs->Write(path, off, data).ok());
      auto& ref = model[path];
      if (ref.size() < off + data.size()) ref.resize(off + data.size());
      std::copy(data.begin(), data.end(), ref.begin() + off);
    } else if (op < 7 && model.count(path)) {
      const std::string& to = names[rng() % names.size()];
      Status s = st->fs->Rename(path, to);
      ASSERT_TRUE(s.ok()) << s.ToString();
      auto data = model[path];
      model.erase(path);
      model[to] = data;
    } else if (op < 8 && model.count(path)) {
      ASSERT_TRUE(st->fs->Remove(path).ok());
      model.erase(path);
    } else if (op < 9) {
      st = nullptr;  // close and reopen everything
      st = std::make_unique<Stack>(dir.path());
    }
    for (const auto& [p, ref] : model) {
      auto stat = st->fs->Stat(p);
      ASSERT_TRUE(stat.ok()) << p;
      ASSERT_EQ(stat->size, ref.size()) << p;
      std::vector<std::byte> got;
      const uint64_t off = ref.empty() ? 0 : rng() % ref.size();
      ASSERT_TRUE(st->fs->Read(p, off, 100000, &got).ok());
      const size_t n = std::min<size_t>(100000, ref.size() - off);
      ASSERT_EQ(got, std::vector<std::byte>(ref.begin() + off, ref.begin() + off + n))
          << p << " step " << step;
    }
  }
  auto report = st->fs->Fsck(false);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty());
  EXPECT_EQ(report->orphan_chunks, 0u);
  EXPECT_EQ(report->files, model.size());
}

TEST(FileSystemTest, ReadIntoMatchesTheReferenceAcrossChunksHolesAndTheEnd) {
  TempDir dir("fs-readinto");
  std::mt19937_64 rng(7);
  Stack st(dir.path());
  ASSERT_TRUE(st.fs->Create("/r").ok());
  // Data in chunks 0-2, a hole in chunks 3-4, a short last chunk at 5.
  std::vector<std::byte> model(5 * (64 << 10) + 1000, std::byte{0});
  const auto head = Bytes(rng, 3 * (64 << 10) - 17);
  const auto tail = Bytes(rng, 1000);
  ASSERT_TRUE(st.fs->Write("/r", 0, head).ok());
  ASSERT_TRUE(st.fs->Write("/r", 5 * (64 << 10), tail).ok());
  std::copy(head.begin(), head.end(), model.begin());
  std::copy(tail.begin(), tail.end(), model.begin() + 5 * (64 << 10));
  for (int i = 0; i < 200; ++i) {
    const uint64_t off = rng() % (model.size() + 100);
    const size_t len = static_cast<size_t>(rng() % (3 * (64 << 10)));
    std::vector<std::byte> out(len + 1, std::byte{0x5a});
    auto n = st.fs->ReadInto("/r", off, std::span(out).first(len));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    const uint64_t want = off >= model.size() ? 0 : std::min<uint64_t>(len, model.size() - off);
    ASSERT_EQ(*n, want) << off << " " << len;
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + want, model.begin() + off))
        << off << " " << len;
    EXPECT_EQ(out[want], std::byte{0x5a});  // nothing written past what was read
  }
}

TEST(FileSystemTest, ListStatSealRenameAndSpaceReclaim) {
  TempDir dir("fs-ops");
  Stack st(dir.path());
  std::mt19937_64 rng(7);
  auto data = Bytes(rng, 500000);  // 8 chunks of 64 KiB
  ASSERT_TRUE(st.fs->Create("/ckpt/step1/shard0").ok());
  ASSERT_TRUE(st.fs->Write("/ckpt/step1/shard0", 0, data).ok());
  ASSERT_TRUE(st.fs->Create("/ckpt/step1/shard1").ok());
  ASSERT_TRUE(st.fs->Mkdir("/ckpt/empty").ok());
  EXPECT_EQ(st.fs->Create("/ckpt/step1/shard0").status().code(), StatusCode::kAlreadyExists);
  auto list = st.fs->List("/ckpt/step1");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].path, "/ckpt/step1/shard0");
  EXPECT_EQ((*list)[0].size, 500000u);
  ASSERT_TRUE(st.fs->Seal("/ckpt/step1/shard0").ok());
  EXPECT_EQ(st.fs->Write("/ckpt/step1/shard0", 0, data).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(st.fs->Stat("/ckpt/step1/shard0")->sealed);
  // A folder moves atomically with its contents.
  ASSERT_TRUE(st.fs->Rename("/ckpt/step1", "/ckpt/latest").ok());
  EXPECT_EQ(st.fs->Stat("/ckpt/step1/shard0").status().code(), StatusCode::kNotFound);
  std::vector<std::byte> got;
  ASSERT_TRUE(st.fs->Read("/ckpt/latest/shard0", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, data);
  EXPECT_EQ(st.fs->Rename("/ckpt", "/ckpt/latest/x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.fs->Remove("/ckpt/latest").code(), StatusCode::kFailedPrecondition);
  const uint64_t before = st.engine->Usage().chunks;
  EXPECT_EQ(before, 1u + 8u);  // the namespace + 8 data chunks
  // Replacing a file by rename reclaims the replaced file's chunks.
  ASSERT_TRUE(st.fs->Rename("/ckpt/latest/shard1", "/ckpt/latest/shard0").ok());
  EXPECT_EQ(st.engine->Usage().chunks, 1u);
  EXPECT_EQ(st.engine->Usage().used_slots, 1u);
  ASSERT_TRUE(st.fs->Remove("/ckpt/latest/shard0").ok());
  ASSERT_TRUE(st.fs->Remove("/ckpt/latest").ok());
  ASSERT_TRUE(st.fs->Remove("/ckpt/empty").ok());
  ASSERT_TRUE(st.fs->Remove("/ckpt").ok());
  EXPECT_TRUE(st.fs->List("/")->empty());
}

// Forwards to a real store; while `fail_puts` is set every Put fails as a full disk would, while
// `fail_namespace_puts` is set only the namespace's (as a crash after a file's data was stored).
class FailablePutStore : public ObjectStore {
 public:
  explicit FailablePutStore(ObjectStore* inner) : inner_(inner) {}
  Status Put(std::span<const ObjectPut> puts) override {
    if (fail_puts) return Status(StatusCode::kNoSpace, "injected: no space for the put");
    if (fail_namespace_puts)
      for (const ObjectPut& p : puts)
        if (p.key == kNamespaceKey)
          return Status(StatusCode::kUnavailable, "injected: the namespace write failed");
    return inner_->Put(puts);
  }
  Status Get(ObjectKey key, uint64_t offset, uint64_t length,
             std::vector<std::byte>* out) override {
    return inner_->Get(key, offset, length, out);
  }
  Status Delete(std::span<const ObjectKey> keys) override { return inner_->Delete(keys); }
  Result<std::vector<ObjectKey>> Keys() override { return inner_->Keys(); }
  uint32_t max_object_size() const override { return inner_->max_object_size(); }
  std::vector<std::string> CheckStorage() override { return inner_->CheckStorage(); }
  bool fail_puts = false;
  bool fail_namespace_puts = false;

 private:
  ObjectStore* const inner_;
};

TEST(FileSystemTest, NamespaceChangeThatCannotBePersistedLeavesNothingBehind) {
  TempDir dir("fs-rollback");
  Stack st(dir.path());
  FailablePutStore store(st.store.get());
  auto opened = FileSystem::Open(&store, 64 << 10);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  FileSystem& fs = **opened;
  std::mt19937_64 rng(3);
  const auto data = Bytes(rng, 100000);
  ASSERT_TRUE(fs.Create("/a/kept").ok());
  ASSERT_TRUE(fs.Write("/a/kept", 0, data).ok());
  ASSERT_TRUE(fs.Create("/a/target").ok());
  const std::vector<std::string> before = {"/a/kept", "/a/target"};
  auto paths = [&](std::string_view folder) {
    std::vector<std::string> out;
    Result<std::vector<FileStat>> listed = fs.List(folder);
    if (listed.ok())
      for (const FileStat& f : *listed) out.push_back(f.path);
    return out;
  };

  store.fail_puts = true;
  EXPECT_EQ(fs.Create("/b/new").status().code(), StatusCode::kNoSpace);
  EXPECT_EQ(fs.Mkdir("/c/d").code(), StatusCode::kNoSpace);
  EXPECT_EQ(fs.Rename("/a/kept", "/e/moved").code(), StatusCode::kNoSpace);
  EXPECT_EQ(fs.Rename("/a/kept", "/a/target").code(), StatusCode::kNoSpace);  // would replace
  // Nothing of the four changes is visible: no parents made, nothing moved or replaced.
  EXPECT_EQ(paths("/"), std::vector<std::string>{"/a"});
  EXPECT_EQ(paths("/a"), before);
  for (const char* gone : {"/b", "/c", "/e"})
    EXPECT_EQ(fs.Stat(gone).status().code(), StatusCode::kNotFound) << gone;
  std::vector<std::byte> got;
  ASSERT_TRUE(fs.Read("/a/kept", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, data);

  store.fail_puts = false;
  ASSERT_TRUE(fs.Create("/b/new").ok());
  ASSERT_TRUE(fs.Rename("/a/kept", "/a/target").ok());
  // A reopen reads what was persisted: the same namespace.
  auto reopened = FileSystem::Open(st.store.get(), 64 << 10);
  ASSERT_TRUE(reopened.ok());
  Result<std::vector<FileStat>> listed = (*reopened)->List("/a");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].path, "/a/target");
  EXPECT_TRUE((*reopened)->Stat("/b/new").ok());
  ASSERT_TRUE((*reopened)->Read("/a/target", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, data);
}

// RemoveTrees deletes folders with everything under them and files in one namespace change
// (all or nothing when it cannot be persisted), skips what does not exist (also what an earlier
// path of the same call already took), reclaims every chunk, and refuses "/".
TEST(FileSystemTest, RemoveTreesDeletesWholeFoldersInOneChange) {
  TempDir dir("fs-remove-trees");
  Stack st(dir.path());
  FailablePutStore store(st.store.get());
  auto opened = FileSystem::Open(&store, 64 << 10);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  FileSystem& fs = **opened;
  std::mt19937_64 rng(5);
  const auto data = Bytes(rng, 200000);  // 4 chunks of 64 KiB
  for (const char* file : {"/ckpt/step1/a", "/ckpt/step1/sub/b", "/ckpt/step2/c", "/ckpt/keep/d"}) {
    ASSERT_TRUE(fs.Create(file).ok()) << file;
    ASSERT_TRUE(fs.Write(file, 0, data).ok()) << file;
  }
  ASSERT_TRUE(fs.Mkdir("/ckpt/step1/empty").ok());
  EXPECT_EQ(st.engine->Usage().chunks, 1u + 4 * 4);
  const std::vector<std::string> doomed = {"/ckpt/step1", "/ckpt/step2/c", "/missing/x",
                                           "/ckpt/step1/a"};

  store.fail_namespace_puts = true;
  EXPECT_EQ(fs.RemoveTrees(doomed).status().code(), StatusCode::kUnavailable);
  for (const char* kept : {"/ckpt/step1/a", "/ckpt/step1/sub/b", "/ckpt/step2/c"})
    EXPECT_TRUE(fs.Stat(kept).ok()) << kept;
  EXPECT_EQ(st.engine->Usage().chunks, 1u + 4 * 4);
  store.fail_namespace_puts = false;

  const std::vector<std::string> root = {"/ckpt/keep", "/"};
  EXPECT_EQ(fs.RemoveTrees(root).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs.Stat("/ckpt/keep/d").ok());

  Result<uint64_t> removed = fs.RemoveTrees(doomed);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 6u);                       // step1, a, sub, b, empty; c
  EXPECT_EQ(st.engine->Usage().chunks, 1u + 4);  // the namespace and d's chunks
  auto reopened = FileSystem::Open(st.store.get(), 64 << 10);
  ASSERT_TRUE(reopened.ok());
  Result<std::vector<FileStat>> listed = (*reopened)->List("/ckpt");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].path, "/ckpt/keep");
  EXPECT_EQ((*listed)[1].path, "/ckpt/step2");
  std::vector<std::byte> got;
  ASSERT_TRUE((*reopened)->Read("/ckpt/keep/d", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, data);
  Result<FsckReport> report = (*reopened)->Fsck(false);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->orphan_chunks, 0u);
  EXPECT_TRUE(report->problems.empty());
  EXPECT_EQ(fs.RemoveTrees(doomed).value(), 0u);  // nothing left to remove
}

TEST(FileSystemTest, PutFileReplacesAFileAtomicallyWithASealedOne) {
  TempDir dir("fs-put");
  Stack st(dir.path());
  std::mt19937_64 rng(11);
  const auto old_data = Bytes(rng, 300000);  // 5 chunks of 64 KiB
  const auto new_data = Bytes(rng, 140000);  // 3 chunks
  ASSERT_TRUE(st.fs->Create("/ckpt/latest").ok());
  ASSERT_TRUE(st.fs->Write("/ckpt/latest", 0, old_data).ok());
  Result<FileStat> put = st.fs->PutFile("/ckpt/latest", new_data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_TRUE(put->sealed);
  EXPECT_EQ(put->size, new_data.size());
  EXPECT_EQ(put->path, "/ckpt/latest");
  std::vector<std::byte> got;
  ASSERT_TRUE(st.fs->Read("/ckpt/latest", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, new_data);
  EXPECT_EQ(st.fs->Write("/ckpt/latest", 0, new_data).code(), StatusCode::kFailedPrecondition);
  // The replaced file's 5 chunks are reclaimed: the namespace and the new file's 3 remain.
  EXPECT_EQ(st.engine->Usage().chunks, 1u + 3u);
  // Missing parents are made; an empty file is a file; a folder is not replaced.
  ASSERT_TRUE(st.fs->PutFile("/a/b/empty", {}).ok());
  EXPECT_EQ(st.fs->Stat("/a/b/empty")->size, 0u);
  EXPECT_EQ(st.fs->PutFile("/a/b", new_data).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(st.fs->Stat("/a/b")->is_dir);
  Result<FsckReport> fsck = st.fs->Fsck(false);
  ASSERT_TRUE(fsck.ok());
  EXPECT_EQ(fsck->orphan_chunks, 0u);
  EXPECT_TRUE(fsck->problems.empty());
  // The same after a reopen.
  auto reopened = FileSystem::Open(st.store.get(), 64 << 10);
  ASSERT_TRUE(reopened.ok());
  ASSERT_TRUE((*reopened)->Read("/ckpt/latest", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, new_data);
  EXPECT_TRUE((*reopened)->Stat("/ckpt/latest")->sealed);
}

TEST(FileSystemTest, PutFileWhoseNamespaceChangeFailsLeavesTheOldFileAndOrphansOnly) {
  TempDir dir("fs-put-fail");
  Stack st(dir.path());
  FailablePutStore store(st.store.get());
  auto opened = FileSystem::Open(&store, 64 << 10);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  FileSystem& fs = **opened;
  std::mt19937_64 rng(12);
  const auto old_data = Bytes(rng, 100000);
  const auto new_data = Bytes(rng, 200000);  // 4 chunks
  ASSERT_TRUE(fs.Mkdir("/ckpt").ok());       // so that the puts take consecutive inodes
  Result<FileStat> first = fs.PutFile("/ckpt/latest", old_data);
  ASSERT_TRUE(first.ok());
  // The data is stored, the namespace change is not (as if the metadata node died between).
  store.fail_namespace_puts = true;
  EXPECT_EQ(fs.PutFile("/ckpt/latest", new_data).status().code(), StatusCode::kUnavailable);
  store.fail_namespace_puts = false;
  std::vector<std::byte> got;
  ASSERT_TRUE(fs.Read("/ckpt/latest", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, old_data);
  // A node that loads the namespace now (the next metadata node) sees the old file, the failed
  // put's chunks as orphans, and never hands out that put's inode again.
  auto next = FileSystem::Open(st.store.get(), 64 << 10);
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE((*next)->Read("/ckpt/latest", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, old_data);
  Result<FsckReport> fsck = (*next)->Fsck(false);
  ASSERT_TRUE(fsck.ok());
  EXPECT_EQ(fsck->orphan_chunks, 4u);
  Result<FileStat> created = (*next)->Create("/other");
  ASSERT_TRUE(created.ok());
  Result<FileStat> put = (*next)->PutFile("/ckpt/latest", new_data);
  ASSERT_TRUE(put.ok());
  EXPECT_GT(created->ino, first->ino + 1);  // the failed put had first->ino + 1
  EXPECT_GT(put->ino, created->ino);
  Result<uint64_t> collected = (*next)->CollectOrphans();
  ASSERT_TRUE(collected.ok());
  EXPECT_EQ(*collected, 4u);
  ASSERT_TRUE((*next)->Read("/ckpt/latest", 0, UINT64_MAX, &got).ok());
  EXPECT_EQ(got, new_data);
}

TEST(FileSystemTest, FsckFindsAndRepairsOrphansAndCorruption) {
  TempDir dir("fs-fsck");
  Stack st(dir.path());
  std::mt19937_64 rng(9);
  auto data = Bytes(rng, 100000);
  ASSERT_TRUE(st.fs->Create("/f").ok());
  ASSERT_TRUE(st.fs->Write("/f", 0, data).ok());
  // A crash between writing data and recording it leaves chunks no file owns.
  auto stray = Bytes(rng, 1000);
  ObjectPut put{DataKey(999, 0), stray};
  ASSERT_TRUE(st.store->Put(std::span<const ObjectPut>(&put, 1)).ok());
  auto report = st.fs->Fsck(true);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->orphan_chunks, 1u);
  EXPECT_EQ(report->chunks, 2u);
  report = st.fs->Fsck(false);
  EXPECT_EQ(report->orphan_chunks, 0u);
  EXPECT_TRUE(report->problems.empty());
}

// Found by tests/fuzz/iofs_state_fuzz.cc (corpus file crash-namespace-parent-loop): a namespace
// object that listed an inode twice, the second time as its own parent, loaded, and the path of
// that inode then grew without end (out of memory). The loader refuses it now.
TEST(FileSystemTest, NamespaceWithAParentLoopIsCorruption) {
  TempDir dir("fs-loop");
  Stack st(dir.path());
  st.fs.reset();
  ByteWriter w;
  w.Put<uint32_t>(0x534e5452);  // "RTNS"
  w.Put<uint16_t>(1);
  w.Put<uint64_t>(4);  // next inode
  w.Put<uint32_t>(2);
  for (uint64_t parent : {uint64_t{1}, uint64_t{2}}) {  // inode 2 under the root, then under itself
    w.Put<uint64_t>(2);
    w.Put<uint64_t>(parent);
    w.Put<uint8_t>(1);  // a folder
    w.Put<uint32_t>(0);
    w.Put<uint64_t>(0);
    w.Put<int64_t>(0);
    w.PutString(parent == 1 ? "a" : "b");
  }
  w.Put<uint32_t>(Crc32c(w.bytes().data(), w.size()));
  ObjectPut put{kNamespaceKey, w.bytes()};
  ASSERT_TRUE(st.store->Put(std::span<const ObjectPut>(&put, 1)).ok());
  auto reopened = FileSystem::Open(st.store.get(), 64 << 10);
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), StatusCode::kCorruption) << reopened.status().ToString();
}

// A file that claims more chunks than Write lets a file have is corruption too (removing it would
// list every chunk key).
TEST(FileSystemTest, NamespaceWithAnImpossiblyLargeFileIsCorruption) {
  TempDir dir("fs-huge");
  Stack st(dir.path());
  ASSERT_TRUE(st.fs->Create("/big").ok());
  st.fs.reset();
  std::vector<std::byte> object;
  ASSERT_TRUE(st.store->Get(kNamespaceKey, 0, UINT64_MAX, &object).ok());
  const std::string_view text(reinterpret_cast<const char*>(object.data()), object.size());
  const size_t name = text.find("big");
  ASSERT_NE(name, std::string_view::npos);
  // Before the name: its u32 length, the i64 mtime, then the u64 size.
  const uint64_t size = 1ull << 60;
  std::memcpy(object.data() + name - 20, &size, sizeof(size));
  const uint32_t crc = Crc32c(object.data(), object.size() - 4);
  std::memcpy(object.data() + object.size() - 4, &crc, sizeof(crc));
  ObjectPut put{kNamespaceKey, object};
  ASSERT_TRUE(st.store->Put(std::span<const ObjectPut>(&put, 1)).ok());
  auto reopened = FileSystem::Open(st.store.get(), 64 << 10);
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), StatusCode::kCorruption) << reopened.status().ToString();
}

}  // namespace
}  // namespace rt::iofs
