// The memory tier as a checkpoint storage (ckpt/storage.h) for a worker: every call goes to the
// worker's own daemon over its loopback RPC (SnapshotPut/Get/List/Remove, daemon/snapshot_wire.h),
// which stores the files in its memory, replicates them to its successor and serves reads from
// whichever live member holds them (daemon/snapshot_service.h). The checkpoint writer and
// reader use it unchanged: a memory snapshot is a checkpoint in this storage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "ckpt/storage.h"

namespace rt::net {
class ClusterSecret;
}

namespace rt::daemon {

// Opens the memory tier of job `job` through the daemon at `address` ("host:port"), proving
// `secret` (null: none); each file written is copied to `copies` other daemons
// (ckpt.memory_copies). Connects with a 10 s deadline; every call is bounded by 120 s (a put waits
// for the replication). Not atomic across daemons: RenameAtomic is Unimplemented (the checkpoint
// writer never renames). Errors: Unavailable naming the daemon.
Result<std::shared_ptr<ckpt::Storage>> OpenSnapshotStorage(
    const std::string& address, std::shared_ptr<const net::ClusterSecret> secret, uint64_t job,
    int copies = 1);

}  // namespace rt::daemon
