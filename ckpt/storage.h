// Where checkpoints live: a small file interface (after leveldb's Env) that the checkpoint writer
// and reader use, with three backends behind OpenStorage: a POSIX directory, the ringfs chunk
// store (iofs client) and process memory. Paths are relative to the storage's root, '/'-separated,
// without "." or ".." components.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace rt::net {
class ClusterSecret;
}

namespace rt::ckpt {

// A file being written: bytes appended in order, invisible under its final name until Commit.
// Destroying it before Commit removes what was written. Not thread-safe.
class StorageFileWriter {
 public:
  virtual ~StorageFileWriter() = default;
  // Appends `bytes` (the backend may buffer them). Errors: IoError/NoSpace/Unavailable naming
  // the file.
  virtual Status Append(std::span<const uint8_t> bytes) = 0;
  // Makes the file durable and atomically visible under its final name, replacing an existing
  // file there (POSIX: fsync, rename, fsync of the folder). Call once.
  virtual Status Commit() = 0;
};

// A checkpoint store. Thread-safe: any call from any thread. Calls that reach a server bound their
// waits with the backend's own deadline (ringfs: 120 s per call).
class Storage {
 public:
  virtual ~Storage() = default;
  // Starts writing `path`, creating missing parent folders.
  virtual Result<std::unique_ptr<StorageFileWriter>> CreateFile(const std::string& path) = 0;
  // Writes `bytes` as `path` durably and atomically (CreateFile, one Append, Commit).
  Status WriteFile(const std::string& path, std::span<const uint8_t> bytes);
  // The whole file. Errors: NotFound naming the path.
  virtual Result<std::vector<uint8_t>> ReadFile(const std::string& path) = 0;
  // Exactly out.size() bytes at `offset`. Errors: NotFound; OutOfRange naming the path, the range
  // and the file's size when the file is shorter (a truncated file).
  virtual Status ReadRange(const std::string& path, uint64_t offset, std::span<uint8_t> out) = 0;
  // The names (not paths) of the entries of folder `dir` ("" for the root), sorted. A missing
  // folder lists as empty.
  virtual Result<std::vector<std::string>> List(const std::string& dir) = 0;
  // The size of file `path` in bytes. Errors: NotFound.
  virtual Result<uint64_t> FileSize(const std::string& path) = 0;
  // Deletes a file or a whole folder; OK when it does not exist.
  virtual Status Remove(const std::string& path) = 0;
  // Deletes each of `paths` as Remove does. Default: one Remove after another; ringfs deletes
  // them all in one request (one namespace change).
  virtual Status RemoveAll(const std::vector<std::string>& paths);
  // Atomically moves file `from` to `to`, replacing a file at `to`.
  virtual Status RenameAtomic(const std::string& from, const std::string& to) = 0;
  // The URI this storage was opened with (for messages).
  virtual std::string uri() const = 0;
  // Forgets a failed attempt to reach the store, so that the next call tries again at once
  // rather than failing with the remembered error (ringfs fails fast for a few seconds after a
  // failed connect). For saves that must try: a planned stop's, a run's last. Default: nothing.
  virtual void RetryNow() {}
};

// How OpenStorage reaches a storage behind a server.
struct StorageOptions {
  // The cluster secret proven to the ringfsd nodes of a ringfs:// URI (base/net/auth.h); null
  // (default): none, for a cluster that runs without one. The other schemes ignore it.
  std::shared_ptr<const net::ClusterSecret> secret = nullptr;
  // A ringfs:// storage opens even when its cluster cannot be reached (its calls fail until it
  // can; a worker with a memory tier trains on while the chunk store is down). Default: the
  // open fails with Unavailable.
  bool connect_lazily = false;
};

// Opens a storage: "DIR" or "file:///DIR" (a POSIX folder, created if missing),
// "ringfs://HOST:PORT/PATH" (a folder on a ringfsd cluster, through the iofs client, with
// options.secret; connects with a 10 s deadline; "ringfs:///PATH", a daemon's own chunk store,
// is resolved by the daemon, daemon/embedded_store.h, and refused here), "mem://NAME" (process
// memory: every OpenStorage of the same NAME in one process shares the files, which live until the
// process ends). Errors: InvalidArgument for a malformed URI, IoError/Unavailable when the folder
// or server cannot be reached, Unauthenticated when the ringfsd requires a secret that `options`
// lacks or holds another one.
Result<std::shared_ptr<Storage>> OpenStorage(const std::string& uri, const StorageOptions& options);
// The same without a secret.
Result<std::shared_ptr<Storage>> OpenStorage(const std::string& uri);

// Joins two relative paths with '/' (either may be empty).
std::string JoinPath(const std::string& a, const std::string& b);

// Whether `s`, an error of a storage call, says the storage cannot be reached or serve now
// (Unavailable, DeadlineExceeded, NotServing, Aborted) rather than that the bytes asked for are
// missing or bad: a retry of any part of the request would meet the same.
bool StorageOutOfReach(const Status& s);

}  // namespace rt::ckpt
