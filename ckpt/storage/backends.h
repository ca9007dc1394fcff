// The storage backends behind OpenStorage (ckpt/storage.h); callers use OpenStorage.
#pragma once

#include <memory>
#include <string>

#include "ckpt/storage.h"

namespace rt::ckpt::internal {

// A POSIX folder `root` (created if missing). Errors: IoError naming the folder.
Result<std::shared_ptr<Storage>> OpenPosixStorage(const std::string& root, std::string uri);
// The process-memory storage called `name` (shared by every opener in this process).
std::shared_ptr<Storage> OpenMemoryStorage(const std::string& name);
// The folder `root` on the ringfsd at host:port, connecting with `secret` (may be null); a call
// that finds the connection gone connects again. Errors: Unavailable when it cannot connect
// (with `connect_lazily` it still opens: its calls fail until the cluster can be reached);
// Unauthenticated (iofs::Client::Connect).
Result<std::shared_ptr<Storage>> OpenRingfsStorage(const std::string& host, uint16_t port,
                                                   const std::string& root, std::string uri,
                                                   std::shared_ptr<const net::ClusterSecret> secret,
                                                   bool connect_lazily);

// OK when `path` is a relative '/'-separated path without empty, "." or ".." components
// (empty `path` only when `allow_root`). Errors: InvalidArgument naming the path.
Status CheckPath(const std::string& path, bool allow_root);

}  // namespace rt::ckpt::internal
