// Files and folders over an ObjectStore: paths → inodes → chunk lists striped over chains.
//
// The namespace (every inode: type, parent, name, size, sealed flag, chunk size, mtime) is one
// object (key kNamespaceKey) written whole on every change, so create, rename, seal and delete
// are atomic and the namespace is replicated exactly like data. Limit: it must fit one object
// (a 4 MiB chunk holds roughly 40,000 entries); past that mutations fail with
// ResourceExhausted. File data lives in objects keyed (inode << 20 | chunk index); the object
// store hashes keys onto chains, so a file's chunks are striped over every chain.
// Format: docs/formats/iofs_namespace.md.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "iofs/object_store.h"

namespace rt::iofs {

// The object key of the namespace.
inline constexpr ObjectKey kNamespaceKey = 1ull << 63;
// Chunk index bits of a data object key.
inline constexpr int kChunkIndexBits = 20;

// The key of chunk `index` of inode `ino`.
inline ObjectKey DataKey(uint64_t ino, uint64_t index) { return (ino << kChunkIndexBits) | index; }

// What stat and list return.
struct FileStat {
  std::string path;
  uint64_t ino = 0;
  bool is_dir = false;
  uint64_t size = 0;
  bool sealed = false;
  uint32_t chunk_size = 0;
  int64_t mtime_ns = 0;
};

// Result of Fsck.
struct FsckReport {
  uint64_t files = 0;
  uint64_t dirs = 0;
  uint64_t chunks = 0;
  uint64_t orphan_chunks = 0;         // data objects of no file (removed when repair is set)
  std::vector<std::string> problems;  // checksum errors, missing chunks... (empty = clean)
};

// One piece of a file read: `length` bytes at `offset` of data object `key`, for the bytes
// [at, at + length) of the read.
struct ReadPiece {
  ObjectKey key = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t at = 0;
};

// Checks a path: absolute, components non-empty and not "." or "..", no NUL, at most 4096
// bytes and 255 per component. InvalidArgument naming the problem.
Status ValidatePath(std::string_view path);

// Thread-safe: namespace changes are serialised; data reads and writes of different chunks run
// in parallel. Concurrent writers to one file must write disjoint chunks.
class FileSystem {
 public:
  // Loads (or creates) the namespace from `store` (not owned). `chunk_size` is used for new
  // files (at most store->max_object_size()).
  static Result<std::unique_ptr<FileSystem>> Open(ObjectStore* store, uint32_t chunk_size);
  // Does not write anything: every change is durable when its call returns.
  ~FileSystem();

  // Creates an empty file, making missing parent folders. AlreadyExists if the path exists.
  Result<FileStat> Create(std::string_view path);
  // Creates a folder and its parents; OK if it exists as a folder.
  Status Mkdir(std::string_view path);
  // Writes `data` at `offset` of an unsealed file (extending it; holes read as zeros). Chunks are
  // written as batches in parallel. FailedPrecondition if sealed.
  Status Write(std::string_view path, uint64_t offset, std::span<const std::byte> data);
  // Makes a file immutable.
  Status Seal(std::string_view path);
  // Stores `data` as the whole content of a new sealed file at `path` and makes it visible there
  // atomically (making missing parent folders), replacing a file at `path` (whose space is
  // reclaimed): readers see the old file or the new one, never a part. One namespace change
  // where Create, Write, Seal and Rename of a temporary file take four. FailedPrecondition if
  // `path` is a folder. A crash before the change leaves only orphans (the collector's).
  Result<FileStat> PutFile(std::string_view path, std::span<const std::byte> data);
  // Reads up to `length` bytes at `offset` (clamped to the size).
  Status Read(std::string_view path, uint64_t offset, uint64_t length, std::vector<std::byte>* out);
  // Reads up to out.size() bytes at `offset` (clamped to the size) straight into `out`; returns
  // the bytes read. Holes read as zeros.
  Result<uint64_t> ReadInto(std::string_view path, uint64_t offset, std::span<std::byte> out);
  // The pieces of reading up to `length` bytes at `offset` of a file (clamped to its size), for
  // a caller that reads the objects itself (what an object does not hold reads as zeros). Never
  // waits for the namespace lock: Unavailable (retryable) while it is taken.
  Result<std::vector<ReadPiece>> TryPlanRead(std::string_view path, uint64_t offset,
                                             uint64_t length);
  // The metadata of a file or folder (NotFound if absent).
  Result<FileStat> Stat(std::string_view path);
  // The entries of a folder, sorted by name.
  Result<std::vector<FileStat>> List(std::string_view path);
  // Atomically moves `from` to `to`, replacing a file at `to` (whose space is reclaimed).
  // Moving a folder into itself is InvalidArgument.
  Status Rename(std::string_view from, std::string_view to);
  // Deletes a file or an empty folder and reclaims its chunks.
  Status Remove(std::string_view path);
  // Deletes each of `paths` — a file, or a folder with everything under it — in one namespace
  // change, then reclaims their chunks; paths that do not exist are skipped. Returns how many
  // files and folders it deleted. Removing "/" is InvalidArgument (and nothing is deleted).
  Result<uint64_t> RemoveTrees(std::span<const std::string> paths);
  // Verifies every chunk of every file and finds orphans: data objects no file owns or past
  // its size (left by a crash between a namespace change and the cleanup, or by a write whose
  // server died before it committed the file's new size), except the chunks of writes running
  // now. With `repair`, deletes those orphans.
  Result<FsckReport> Fsck(bool repair);
  // Deletes every orphan (as Fsck with repair, without verifying chunks) and returns how many.
  // The background collector of the metadata node runs it at start and periodically. The chunk
  // range of a running Write is its write intent: never an orphan while the write runs, and a
  // write into an inode whose orphans are being deleted waits until they are gone.
  Result<uint64_t> CollectOrphans();

 private:
  struct Inode {
    uint64_t ino = 0;
    uint64_t parent = 0;
    std::string name;
    bool is_dir = false;
    bool sealed = false;
    uint32_t chunk_size = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
  };
  FileSystem(ObjectStore* store, uint32_t chunk_size);
  Status Load();
  Result<std::vector<std::byte>> EncodeLocked() const;  // REQUIRES mu_
  Status PutNamespace(std::span<const std::byte> bytes);
  Status Persist();                                             // REQUIRES mu_
  Status CommitSizeChange(std::unique_lock<std::mutex>& lock);  // REQUIRES lock on mu_
  // Runs `change` on the in-memory namespace and persists the result; on an error from either
  // the namespace is restored to what it was. REQUIRES mu_.
  Status ChangeNamespace(const std::function<Status()>& change);
  // The inode, size and chunk size of a file (FailedPrecondition for a folder). Takes mu_.
  Status FileOf(std::string_view path, uint64_t* ino, uint64_t* size, uint32_t* chunk_size);
  Result<uint64_t> Lookup(std::string_view path) const;  // REQUIRES mu_
  Result<uint64_t> MakeParents(std::string_view path);   // REQUIRES mu_
  std::string PathOf(uint64_t ino) const;                // REQUIRES mu_
  FileStat ToStat(const Inode& inode) const;             // REQUIRES mu_
  // Appends the keys of the data objects of a file of `size` bytes in chunks of `chunk_size`.
  static void AppendChunkKeys(uint64_t ino, uint64_t size, uint32_t chunk_size,
                              std::vector<ObjectKey>& keys);
  Status DeleteChunks(uint64_t ino, uint64_t size, uint32_t chunk_size);
  // True if data object `key` is an orphan now (see Fsck). REQUIRES mu_.
  bool IsOrphanLocked(ObjectKey key) const;
  // The orphans among every stored key, and the keys of files (for Fsck's checks).
  Status FindOrphans(std::vector<ObjectKey>* orphans, std::vector<ObjectKey>* owned);
  // Deletes the keys of `candidates` that are still orphans, holding off writes into their
  // inodes meanwhile; returns how many it deleted.
  Result<uint64_t> DeleteOrphans(const std::vector<ObjectKey>& candidates);
  // Registers a running write of chunks [first, end) of `ino` (waiting while that inode's orphans
  // are being deleted); returns the intent's id. REQUIRES a lock on mu_ (`lock`).
  uint64_t BeginWriteIntent(std::unique_lock<std::mutex>& lock, uint64_t ino, uint64_t first,
                            uint64_t end);
  void EndWriteIntent(uint64_t id);  // takes mu_
  // Ends a write intent when it goes out of scope.
  struct IntentScope {
    FileSystem* fs;
    uint64_t id;
    ~IntentScope() { fs->EndWriteIntent(id); }
  };
  // Hands out an inode number for a file that is not in the namespace yet (PutFile), first
  // persisting a higher bound when the persisted one does not cover it. REQUIRES mu_.
  Result<uint64_t> ReserveInode();

  ObjectStore* const store_;
  const uint32_t chunk_size_;
  std::mutex mu_;
  std::map<uint64_t, Inode> inodes_;                              // GUARDED_BY(mu_)
  std::map<uint64_t, std::map<std::string, uint64_t>> children_;  // GUARDED_BY(mu_)
  uint64_t next_ino_ = 2;                                         // GUARDED_BY(mu_)
  // The inode bound of the persisted namespace: every inode handed out is below it, so a node
  // that loads the namespace after a crash never hands out again the inode of a PutFile whose
  // chunks were stored but whose namespace change was not.
  uint64_t ino_bound_ = 2;  // GUARDED_BY(mu_)
  // Group commit of size changes (Write): generations of the in-memory namespace.
  std::mutex persist_mu_;  // held while a namespace object is written; taken after mu_
  std::condition_variable persist_cv_;
  uint64_t dirty_gen_ = 0;      // GUARDED_BY(mu_)
  uint64_t persisted_gen_ = 0;  // GUARDED_BY(mu_)
  uint64_t failed_gen_ = 0;     // GUARDED_BY(mu_)
  Status failed_status_;        // GUARDED_BY(mu_)
  bool persisting_ = false;     // GUARDED_BY(mu_)
  // Write intents: the chunk ranges [first, end) of writes running now, by id. They live in the
  // memory of the metadata node, the only writer of data objects, so they end with its process:
  // after a crash no write is running and everything past a file's size is an orphan.
  struct WriteIntent {
    uint64_t ino = 0;
    uint64_t first = 0;
    uint64_t end = 0;
  };
  std::map<uint64_t, WriteIntent> intents_;  // GUARDED_BY(mu_)
  uint64_t next_intent_ = 1;                 // GUARDED_BY(mu_)
  std::map<uint64_t, int> collecting_;       // inode → deletions running; GUARDED_BY(mu_)
  std::condition_variable collected_cv_;     // a deletion of orphans finished
};

}  // namespace rt::iofs
