// CheckpointWriter: asynchronous, two-phase-committed checkpoint saves (DESIGN.md "Checkpoints",
// docs/formats/checkpoint.md). Each rank snapshots the data it stores into host memory at Save
// and returns; a background thread encodes, checksums and writes the rank's data file and
// fragment. Rank 0's thread then waits (deadline-bounded, polling the storage) for every rank's
// fragment of this run and step, writes the MANIFEST, then the atomic `latest` pointer, and
// finally removes leftovers (files of this folder no manifest names, uncommitted older folders)
// and committed checkpoints beyond `keep`. A crash at any instant leaves the previous checkpoint
// committed and the new one either committed or ignored. A save that fails leaves nothing that
// looks complete: a rank removes its own data file and fragment, and rank 0, when its commit
// fails or is abandoned, removes the step's folder (RemoveFailedSave; docs/formats/checkpoint.md
// "Failed saves").
//
// Fault points (base/fault.h), in order: ckpt.save.before_data, ckpt.save.after_data,
// ckpt.save.after_fragment, ckpt.commit.after_fragments (rank 0), ckpt.commit.after_manifest,
// ckpt.commit.after_latest.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/deadline.h"
#include "base/status.h"
#include "ckpt/codec.h"
#include "ckpt/shard.h"
#include "ckpt/storage.h"

namespace rt::ckpt {

// How a CheckpointWriter saves.
struct WriterOptions {
  std::shared_ptr<Storage> storage;  // where (required)
  int rank = 0, world = 1;           // this rank and the number of ranks saving together
  std::string run_id;       // same on every rank of one run (NewRunId() on rank 0, broadcast)
  std::string config_toml;  // the run config that wrote it (recorded in the manifest by rank 0)
  std::string layout;       // layout string ("tp=2,pp=2,dp=1,zero=1") recorded in the manifest
  int keep = 3;             // newest complete checkpoints kept (>= 1)
  Codec codec = Codec::kNone;
  bool async = true;                   // false: Save returns after the commit (every rank)
  size_t piece_bytes = 4 << 20;        // raw bytes per stored piece (the unit of reads and CRCs)
  int zstd_level = 1;                  // for kZstd and kByteGroupedZstd
  int encode_threads = 2;              // threads compressing pieces in parallel
  int64_t commit_timeout_ms = 600000;  // rank 0's wait for the other ranks' fragments; and a
                                       // synchronous save's wait for the commit
  // The first part of the names of the fault points this writer hits (base/fault.h): PREFIX
  // .save.before_data, .save.after_data, .save.after_fragment, .commit.after_fragments,
  // .commit.after_manifest, .commit.after_latest. The memory tier's writer uses "ckpt.memory",
  // so that faults armed for durable saves leave its snapshots alone.
  std::string fault_prefix = "ckpt";
};

// What one finished save of a rank wrote (CheckpointWriter::last_save).
struct SaveFootprint {
  int64_t step = -1;  // the save's step; -1 = no save finished yet
  // Bytes of this rank's files that the committed checkpoint keeps: its data file and, on rank
  // 0, the MANIFEST (fragments are removed at the commit). Those written before a failure when
  // the save failed.
  uint64_t bytes = 0;
  // From Save (the snapshot) until this rank's part ended: on rank 0 the commit, on the other
  // ranks their fragment written (or, for a synchronous save, the commit seen).
  double seconds = 0;
};

// Saves checkpoints of one rank. Save and Wait from one thread; the background work runs on a
// thread of its own (a synchronous save without a snapshot: on the caller's thread).
class CheckpointWriter {
 public:
  // Errors: InvalidArgument naming a bad option.
  static Result<std::unique_ptr<CheckpointWriter>> Create(WriterOptions options);
  // Waits for the running save (bounded by its own deadlines).
  ~CheckpointWriter();

  // Copies the stored part of `shards` into a host snapshot now (waits for the previous save
  // first and logs that it waited), then encodes, checksums and writes in the background. A
  // synchronous save (async = false) of shards that are all in host memory takes no snapshot:
  // it encodes, checksums and writes them as they are, on the calling thread, and returns after
  // the commit. `engine_state` is opaque bytes (TrainerState::Serialize) recorded in the
  // manifest by rank 0.
  // Returns, without starting this save, the failure of the previous save if it failed (the
  // failure is reported once). Errors: InvalidArgument for malformed shards; those of copying.
  Status Save(int64_t step, const StateShards& shards, std::string engine_state);
  // Waits until the running save (if any) finished and returns its status (reported once; OK
  // when none ran). Errors: DeadlineExceeded when it has not finished by `deadline`.
  Status Wait(Deadline deadline);
  // Waits until this rank's files of the running save (data file and fragment) are written or
  // failed, and returns how that went (OK when no save runs); rank 0's commit may still be
  // running. Does not report the save's status (Wait still does). Errors: those of writing
  // (naming the file and the cause); DeadlineExceeded when not done by `deadline`.
  Status WaitWritten(Deadline deadline);
  // Tells the running save not to commit (a rank failed its part): rank 0 stops waiting for
  // fragments, fails with Aborted and removes the step's folder. No effect on a save past its
  // fragments or on ranks other than 0. Call once every rank finished writing (WaitWritten).
  void Abandon();
  // Removes the folder of `step`, a save that failed, unless `latest` lists it (returns true
  // then) or it is not newer than the newest committed checkpoint. Best effort: a failure is
  // logged and the next commit's cleanup removes the folder. Call once no rank writes to it
  // (rank 0's own write failed: the others are not waited for, so the caller removes it).
  bool RemoveFailedSave(int64_t step);

  // The footprint of the save the last Wait (or Save's wait for the previous save) finished,
  // successful or not; step -1 before any.
  const SaveFootprint& last_save() const { return last_save_; }

 private:
  struct Job;
  explicit CheckpointWriter(WriterOptions options);
  // The background part of a save.
  Status Run(Job& job);
  // Data file and fragment of this rank.
  Status WriteRankFiles(Job& job);
  // Rank 0: wait for fragments, write the manifest and `latest`, clean up.
  Status Commit(Job& job);
  // Hits the fault point named fault_prefix + "." + `point`.
  Status FaultPoint(std::string_view point) const;
  // Rank 0 after a failed or abandoned commit: OK when `latest` lists the step all the same
  // (the failure came after the commit point); otherwise RemoveFailedSave and `failure`.
  Status DropFailedCommit(int64_t step, Status failure);
  // Ranks > 0 of a synchronous save: wait until `latest` names the step or a later one.
  Status WaitCommitted(int64_t step);

  WriterOptions options_;
  std::unique_ptr<Job> job_;
  // The host snapshot, reused between saves (the previous save has finished when the next one
  // copies): not zero-filled, since every byte in use is copied in.
  std::unique_ptr<uint8_t[]> snapshot_;
  size_t snapshot_bytes_ = 0;
  SaveFootprint last_save_;
};

// A fresh random run id (32 hex digits).
std::string NewRunId();

}  // namespace rt::ckpt
