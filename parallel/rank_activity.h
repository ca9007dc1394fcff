// What one rank of a distributed run did that its daemon counts (docs/metrics.md): its checkpoint
// saves and loads (parallel/checkpointing.h) and the bytes its process groups moved. A worker
// hands it on through DistTrainOptions::on_activity (parallel/launch.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rt::parallel {

struct ProcessGroups;

// A checkpoint save or load as one rank saw it (RunCheckpoints::TakeTransfers).
struct CheckpointTransfer {
  bool memory = false;  // the memory tier; false: ckpt.dir
  int64_t step = 0;     // the checkpoint's step
  // This rank's bytes: a committed save's files that the checkpoint keeps (ckpt/writer.h
  // SaveFootprint), the bytes a load read (the MANIFEST and the pieces, as stored, of every
  // checkpoint the Resume tried). 0 for a failed save.
  uint64_t bytes = 0;
  // A save: from its snapshot until this rank's part ended (rank 0: the commit). A load: the
  // Resume call, the agreement with the other ranks included. Seconds.
  double seconds = 0;
};

// The saves and loads of one rank since the last TakeTransfers, oldest first.
struct CheckpointTransfers {
  std::vector<CheckpointTransfer> saves;   // committed (every rank that took part lists them)
  std::vector<CheckpointTransfer> failed;  // dropped saves (failed on some rank)
  std::vector<CheckpointTransfer> loads;   // Resume's load
  // None of them.
  bool empty() const { return saves.empty() && failed.empty() && loads.empty(); }
};

// The names of a rank's process groups (the fields of ProcessGroups), in field order.
inline constexpr std::array<std::string_view, 7> kProcessGroupNames = {
    "world", "tp", "dp_shard", "dp_replicate", "pp_forward", "pp_backward", "embedding"};

// The payload bytes one process group of a rank moved since it was built (comm::CommStats).
struct GroupBytes {
  std::string group;  // one of kProcessGroupNames
  uint64_t sent = 0;
  uint64_t received = 0;
};

// What a rank did, as DistTrainOptions::on_activity gets it.
struct RankActivity {
  CheckpointTransfers checkpoints;  // the transfers settled since the previous call
  std::vector<GroupBytes> comm;     // totals of every group of the rank, since it started
};

// The totals of every communicator in `groups` (those that exist), named and ordered as
// kProcessGroupNames. Thread-safe as Communicator::stats.
std::vector<GroupBytes> GroupTraffic(const ProcessGroups& groups);

}  // namespace rt::parallel
