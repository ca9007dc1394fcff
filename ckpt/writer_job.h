// The state of one save, shared by writer.cc (snapshot, rank files) and commit.cc (rank 0's
// commit). Internal to ckpt/.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/region.h"
#include "ckpt/shard.h"
#include "ckpt/writer.h"

namespace rt::ckpt {

// One planned piece and where its bytes are: in the snapshot, or (a synchronous save of host
// shards) in the shard itself.
struct SnapshotPiece {
  StateKind kind = StateKind::kParam;
  std::string name;
  DType dtype = DType::kF32;
  Region region;
  const uint8_t* data = nullptr;  // not owned: the writer's snapshot or the caller's shard
  size_t bytes = 0;
};

// How long a poll of the storage (rank 0 for the fragments, the other ranks of a synchronous save
// for the commit) sleeps after `waited_s` seconds of waiting: an eighth of the wait so far,
// between 1 and 20 ms, so that a short wait ends within a millisecond or two of what it waits for
// and a long one costs at most 50 polls a second.
inline std::chrono::microseconds PollInterval(double waited_s) {
  const auto us = static_cast<int64_t>(waited_s * 1e6 / 8);
  return std::chrono::microseconds(std::clamp<int64_t>(us, 1000, 20000));
}

struct CheckpointWriter::Job {
  int64_t step = 0;
  double started = 0;  // MonoSeconds() when Save took the snapshot
  std::string engine_state;
  std::vector<SnapshotPiece> pieces;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool written = false;                // this rank's files are written or failed; GUARDED_BY(mu)
  Status write_status;                 // of writing them; GUARDED_BY(mu)
  bool done = false;                   // GUARDED_BY(mu)
  Status status;                       // GUARDED_BY(mu)
  std::atomic<bool> abandoned{false};  // Abandon(): rank 0 must not commit this save
  bool reported = false;               // the status was returned by Save or Wait
  // Written by the save's thread, read once it is done (Wait joins it first).
  uint64_t data_bytes = 0;      // this rank's data file, once written
  uint64_t manifest_bytes = 0;  // the MANIFEST (rank 0), once written
  double finished = 0;          // MonoSeconds() when the save's thread ended
  // Where a commit's time went (rank 0), for its log line: seconds spent on this rank's data and
  // fragment files, on waiting for the other ranks' fragments, on the manifest and `latest`,
  // and on the cleanup after the commit point.
  double files_s = 0, gather_s = 0, commit_point_s = 0, cleanup_s = 0;
};

}  // namespace rt::ckpt
