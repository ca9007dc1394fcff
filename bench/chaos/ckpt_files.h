// The chaos campaign's look at a checkpoint folder on disk (docs/formats/checkpoint.md): which
// steps are committed, which save is in which phase, and the two disk faults (a flipped byte, a
// full file system).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace rt::chaos {

// The committed steps listed in `dir`/latest, newest first (empty when there is no such file or
// it cannot be parsed: nothing is committed yet).
std::vector<int64_t> CommittedSteps(const std::string& dir);

// The newest committed step not in `corrupted`, or -1.
int64_t NewestIntact(const std::string& dir, const std::set<int64_t>& corrupted);

// A save caught in a phase: the step and the rank whose files say so.
struct SaveWindow {
  int64_t step = 0;
  int rank = 0;
};

// A save newer than every committed step in which some rank's data file is complete and its
// fragment not yet written (the shard-write phase).
std::optional<SaveWindow> FindShardWrite(const std::string& dir);
// A save newer than every committed step with `world` fragments and no MANIFEST yet (rank 0 is
// about to write the manifest).
std::optional<SaveWindow> FindManifestWrite(const std::string& dir, int world);

// Flips (xor 0xFF) the byte at `offset % size` of a non-empty rank-N.data file of committed step
// `step`, chosen by `pick` (an index below the number of such files), and syncs it. Returns
// "step-S/rank-R.data at byte B". Errors: NotFound when the step has no non-empty data file;
// IoError naming the file.
Result<std::string> FlipByte(const std::string& dir, int64_t step, size_t pick, uint64_t offset);

// Fills the file system that holds `dir` with `dir`/filler until it has no free byte.
// Errors: IoError naming the file (other than ENOSPC, which is the goal).
Status FillDisk(const std::string& dir);
// Removes the filler. Errors: IoError naming it.
Status FreeDisk(const std::string& dir);

}  // namespace rt::chaos
