// The training loop's side of checkpoints ([ckpt] of the run config, ckpt/writer.h and
// ckpt/reader.h): a save every ckpt.every steps and after the last, written in the background
// while training goes on (a step waits only while the previous save still runs, and the writer
// logs that it waited); and resume — the newest committed checkpoint that every rank loads, the
// ranks falling back together to an older one when any rank fails to load it. With a memory tier
// (a second storage, the daemon's memory: docs/daemon.md "Memory tier") it also saves a snapshot
// there every ckpt.memory_every steps, and resume takes the newest of both.
//
// A save that fails on any rank is dropped by every rank together (docs/formats/checkpoint.md
// "Failed saves"): before the next save starts (or at once for ckpt.async = false, or in
// Finish) the ranks agree on the first rank that failed to write its files, rank 0 abandons
// the commit and removes the step's folder, the first failing rank logs the step, the file and
// the cause once, and training goes on; the next save tries again. After ckpt.max_failed_saves
// consecutive failed saves the run stops with an error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ckpt/shard.h"
#include "ckpt/storage.h"
#include "ckpt/writer.h"
#include "comm/communicator.h"
#include "kernels/tensor.h"
#include "parallel/config.h"
#include "parallel/rank_activity.h"
#include "parallel/trainer.h"

namespace rt::parallel {

// Whether Resume passes over a candidate that failed to load with `why` and tries the next
// older one: yes for a memory snapshot (the memory tier may lose one: its holders died) and for a
// durable checkpoint that is damaged or incomplete; no for a durable checkpoint that could not
// be read for want of an answer (Unavailable, DeadlineExceeded, NotServing, Aborted: its
// replicas are cut off or restarting), whose steps would be lost: the resume fails instead and
// the daemon starts the generation again after a pause.
bool PassesOver(const Status& why, bool from_memory);

// One rank's checkpointing of one run. Not thread-safe; `world` must outlive it.
class RunCheckpoints {
 public:
  // Opens ckpt.dir. `world` is the run's world communicator (nullptr for one process), whose
  // buffers live on `device`; with a world, Create is collective (rank 0's run id is broadcast).
  // `layout` is the layout string recorded in the manifests. `memory` (may be null) is the
  // memory tier: with ckpt.memory_every > 0 a snapshot is saved there every that many steps
  // (asynchronously, only the newest kept; a failed one is logged, not fatal: ckpt.dir stays the
  // durable copy). `storage` says how ckpt.dir is opened (the cluster secret of a ringfs://
  // URI). Errors: InvalidArgument when ckpt.dir is empty or ckpt.codec unknown; those of
  // OpenStorage and comm.
  static Result<std::unique_ptr<RunCheckpoints>> Create(
      const RunConfig& config, const std::string& layout, comm::Communicator* world, Device device,
      std::shared_ptr<ckpt::Storage> memory = nullptr, const ckpt::StorageOptions& storage = {});
  // Waits for a save still running (its own deadlines bound the wait).
  ~RunCheckpoints();

  // Whether the run saves after step `step` (1-based): ckpt.every > 0 and `step` a multiple of
  // it, or `last` — but not at or below a newer checkpoint that Resume fell back from
  // (it stays committed; the writer only commits newer steps), which it logs; or a memory
  // snapshot is due (`step` a multiple of ckpt.memory_every).
  bool Due(int64_t step, bool last);

  // Starts the saves that the last Due(step, ...) found due: of `shards` and `state` as the
  // checkpoint of `step` (waiting first, with a log line, while the previous save still runs),
  // and as the memory snapshot of `step`. Without a Due that found one due, the checkpoint (a
  // planned stop's). First settles the previous saves (collective with a world: every rank
  // calls Save for the same steps): a failed one is dropped and logged, not returned. When the
  // previous memory snapshot failed, this step's is waited for as well, so that once Save
  // returns the newest committed memory snapshot is at most ckpt.memory_every steps old unless
  // that one failed too (logged). `before_checkpoint`, when set, is called once between the
  // memory snapshot and the checkpoint, with whether a checkpoint starts: the point from which
  // the step may be reported (see TrainLoopReporter::StepTaken). Errors: FailedPrecondition when
  // a checkpoint is to be saved and ckpt.every is 0, or when ckpt.max_failed_saves consecutive
  // saves failed (naming their steps and the last cause); those of comm.
  Status Save(int64_t step, const ckpt::StateShards& shards, const TrainerState& state,
              const std::function<void(bool checkpoint)>& before_checkpoint = {});

  // Saves the checkpoint of `step`, the run's last, when ckpt.dir holds none of it and no save
  // of it started: a run that resumed at its last step from a memory snapshot trains no step, so
  // the loop saved nothing, yet a finished run must end with its final state durable.
  // Collective with a world (the ranks agree by a max all-reduce). Nothing to do with
  // ckpt.every = 0 or when `state` is not at `step`. Errors: those of Save.
  Status SaveLast(int64_t step, const ckpt::StateShards& shards, const TrainerState& state);

  // For a planned stop after `step` that a memory snapshot is enough for: makes sure the memory
  // snapshot of `step` is committed — settling the one Save started, or saving one of `shards`
  // and `state` now when none of `step` was — and returns true once it is. False when there is
  // no memory tier or the snapshot failed (logged): the caller then saves a checkpoint. The
  // checkpoint save still running is neither waited for nor settled (it may be cut short with
  // the process: the next save cleans up after it). Collective with a world. Errors: those of
  // comm.
  Result<bool> SnapshotForStop(int64_t step, const ckpt::StateShards& shards,
                               const TrainerState& state);

  // Waits for the running saves and settles them (collective with a world). Errors: the failure
  // of the last checkpoint save, which leaves the end of the run without its checkpoint
  // (FailedPrecondition naming the step, the failing rank and the newest complete checkpoint);
  // those of comm.
  Status Finish();

  // Loads the newest committed checkpoint into `dest` (this rank's Shards() of an engine created
  // with WeightInit::kForLoad) and returns its trainer state, for the engine's Restore. Tries
  // the committed checkpoints newest first, those of ckpt.dir and of the memory tier together
  // (the memory snapshot first of two of one step; rank 0 then drops memory snapshots newer than
  // the one loaded, so that the next ones commit); with a world every rank tries the same one and
  // they agree (an all-reduce of an ok flag) before using it, falling back together and saying so
  // in the log. Collective with a world. Errors: NotFound when the storage holds no committed
  // checkpoint; those of listing it (Unavailable on the ranks that could list it);
  // FailedPrecondition when the ranks see different checkpoints; the newest error (with the step)
  // when none loads (when only memory snapshots were committed and ckpt.dir lists none, they are
  // dropped first, so that the next resume starts from step 0); Unavailable when a committed
  // durable checkpoint is out of reach now (see PassesOver); those of comm.
  Result<TrainerState> Resume(const ckpt::StateShards& dest);

  // What the last Resume loaded: "checkpoint of step N in URI" or "memory snapshot of step N in
  // URI"; empty before.
  const std::string& resumed_from() const { return resumed_from_; }

  // The saves settled (committed or dropped) and the load of Resume since the last call; the
  // running saves are not in it until a later Save, Finish or SaveLast settles them.
  CheckpointTransfers TakeTransfers() { return std::exchange(transfers_, {}); }

  // The URI of the memory tier ("" without one).
  std::string memory_uri() const { return memory_ ? memory_->uri() : std::string(); }

  // Whether Save works (ckpt.every > 0).
  bool saves() const { return writer_ != nullptr; }
  // The step of the newest checkpoint (not memory snapshot) Save started; -1 before any.
  int64_t durable_step() const { return durable_step_; }
  // How many checkpoint saves (not memory snapshots) of this run failed and were dropped.
  int64_t failed_saves() const { return failed_saves_; }

  // The minimum (kMin) or maximum (kMax) of `value` over the world (the value itself without
  // one). Collective. Errors: those of comm (DeadlineExceeded after 120 s).
  Result<int64_t> Reduce(int64_t value, comm::ReduceOp op);

 private:
  // A save started by Save and not settled yet.
  struct PendingSave {
    bool active = false;
    int64_t step = -1;
    Status started;  // the writer's Save: an error means this rank wrote nothing
  };
  RunCheckpoints() = default;
  // Starts `writer`'s save of `step`, to be settled by Settle.
  void Start(ckpt::CheckpointWriter& writer, PendingSave& pending, int64_t step,
             const ckpt::StateShards& shards, std::string engine_state);
  // Settles `pending` (nothing when not active), collectively: waits for this rank's files,
  // agrees with the other ranks on the first one that failed (rank 0 then abandons the commit),
  // waits for rank 0's commit and agrees on its outcome. Returns the rank the save failed on
  // (the world size when it committed or none was pending); `cause` receives the error on that
  // rank (empty elsewhere). Errors: those of comm.
  Result<int64_t> Settle(ckpt::CheckpointWriter& writer, PendingSave& pending, Status* cause);
  // Records the save of `step` that Settle just settled on `writer` (verdict: the world size
  // when it committed) in transfers_.
  void NoteSettled(const ckpt::CheckpointWriter& writer, bool memory, int64_t step,
                   int64_t verdict);
  // Settles the durable save and applies ckpt.max_failed_saves. Errors: FailedPrecondition
  // when the last `max_failed_saves` saves failed; those of Settle.
  Status SettleDurable();
  // Settles the memory snapshot (a failure is only logged: ckpt.dir stays the durable copy).
  // Returns whether it failed (the same on every rank). Errors: those of Settle.
  Result<bool> SettleMemory();
  // "step N" of the newest committed checkpoint, or "none".
  std::string NewestCommitted() const;
  // Rank 0 removes every memory-tier step folder newer than `step`, committed or not (and
  // `latest` first when it names one), then all ranks meet in an all-reduce so that no rank
  // writes a newer snapshot before the removal is done. A leftover of an unfinished snapshot can
  // sit on a member that the next writer of that step does not reach, and would be read in place
  // of the fresh file (the commit then waits for a fragment of its own run forever).
  Status DropNewerMemorySnapshots(const std::vector<int64_t>& memory_steps, int64_t step);

  RunConfig config_;
  comm::Communicator* world_ = nullptr;
  Device device_ = Device::kCpu;
  std::shared_ptr<ckpt::Storage> storage_;
  std::unique_ptr<ckpt::CheckpointWriter> writer_;
  std::shared_ptr<ckpt::Storage> memory_;                  // the memory tier, or null
  std::unique_ptr<ckpt::CheckpointWriter> memory_writer_;  // with ckpt.memory_every > 0
  bool durable_due_ = false, memory_due_ = false;          // what the last Due found due
  bool last_due_ = false;  // the last Due was for the run's last step (or SaveLast's save)
  int64_t durable_step_ = -1;
  int64_t memory_committed_step_ = -1;  // the newest memory snapshot settled committed; -1 none
  int64_t skipped_up_to_ = -1;  // Resume fell back from committed checkpoints up to this step
  PendingSave durable_pending_, memory_pending_;
  int64_t newest_committed_ = -1;  // newest committed checkpoint in ckpt.dir known; -1 none
  // The listing of ckpt.dir that Create made, for the first Resume (then empty).
  std::optional<Result<std::vector<int64_t>>> created_listing_;
  int64_t failed_saves_ = 0;              // failed checkpoint saves of this run
  std::string resumed_from_;              // resumed_from()
  std::vector<int64_t> failed_in_a_row_;  // steps of the consecutive failed saves up to now
  std::string last_failure_;  // how the last failed save failed (for the policy's error)
  // On a device: the staging of the agreement collectives (Reduce, the run id's broadcast),
  // kept between them (the stop_at agreement runs every step).
  Buffer agree_staging_;
  CheckpointTransfers transfers_;  // TakeTransfers
};

}  // namespace rt::parallel
