// The memory tier's store in one daemon (docs/daemon.md "Memory tier"): the files of the jobs'
// memory snapshots, named like a checkpoint's files (ckpt/manifest.h: "latest",
// "step-…/MANIFEST", "step-…/rank-….data", …), held in this process's memory. No I/O and no
// threads: the daemon's snapshot service (daemon/snapshot_service.h) drives it from its io thread.
//
// Bounded: per job it keeps the newest complete snapshot (the step that the job's `latest` file
// names first: the commit point, docs/formats/checkpoint.md) and the snapshots being written
// (newer step folders); storing `latest` drops every older step folder of the job, and a file of
// a step older than the newest complete one is refused until `latest` is removed. Every byte
// held is accounted in bytes().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace rt::daemon {

// The bytes of one stored file (shared with readers that still send it).
using SnapshotBytes = std::shared_ptr<const std::vector<uint8_t>>;

// Files of memory snapshots, per job. Not thread-safe (one io thread).
class MemoryStore {
 public:
  // Stores `bytes` as `path` of `job`, replacing a file there; `latest` evicts the step folders
  // older than the step it names first. Errors: InvalidArgument for a malformed path;
  // FailedPrecondition when `path` lies in a step folder older than the job's newest complete
  // snapshot (a late write, dropped).
  Status Put(uint64_t job, const std::string& path, SnapshotBytes bytes);
  // The file, or nullptr when this store does not hold it.
  SnapshotBytes Get(uint64_t job, const std::string& path) const;
  // The names of the entries of folder `dir` ("" = the job's root) held here, sorted.
  std::vector<std::string> List(uint64_t job, const std::string& dir) const;
  // Removes the file or folder `path` ("" = every file of the job); no error when absent.
  void Remove(uint64_t job, const std::string& path);

  // Bytes of file data held, over every job.
  uint64_t bytes() const { return bytes_; }
  // Files held, over every job.
  size_t files() const;
  // The step the `latest` of `job` named first when stored here, -1 when none (or removed).
  int64_t NewestComplete(uint64_t job) const;

 private:
  struct Job {
    std::map<std::string, SnapshotBytes> files;
    int64_t newest_complete = -1;
  };
  // Drops the files of `job` under `prefix` (every file when empty).
  void Drop(Job& job, const std::string& prefix);

  std::map<uint64_t, Job> jobs_;
  uint64_t bytes_ = 0;
};

// True for the files every member keeps a copy of: those outside step folders ("latest", which
// tells every member which snapshot is complete). The others (manifests, data files, fragments)
// live on the writer's daemon and its successor.
bool IsSharedSnapshotFile(const std::string& path);

// The step of the step folder `path` lies in, or -1 for a path outside step folders.
int64_t SnapshotStepOf(const std::string& path);

}  // namespace rt::daemon
