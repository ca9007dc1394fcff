#include "parallel/checkpointing.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "base/deadline.h"
#include "base/log.h"
#include "ckpt/catalog.h"
#include "ckpt/codec.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "kernels/ops.h"

namespace rt::parallel {
namespace {

// Agreement between ranks: every collective of Resume and Create waits at most this long.
constexpr auto kAgreeTimeout = std::chrono::seconds(120);
constexpr size_t kRunIdBytes = 32;

// Runs `op` on `bytes` host bytes staged through `*staging` on `device` (NCCL takes device
// memory), copying the result back. `*staging` is allocated when smaller than `size` and kept
// for the next call: freeing device memory (cudaFree) would wait for the whole device.
template <typename Op>
Status OnDevice(Device device, Buffer* staging, void* bytes, size_t size, Op op) {
  if (device == Device::kCpu) return op(bytes);
  if (staging->size() < size) {
    ASSIGN_OR_RETURN(*staging, Buffer::Allocate(device, size));
  }
  const int64_t n = static_cast<int64_t>(size);
  const Tensor host(bytes, DType::kU8, Shape{n});
  RETURN_IF_ERROR(Copy(staging->View(DType::kU8, Shape{n}), host));
  RETURN_IF_ERROR(op(staging->data()));
  return Copy(host, staging->View(DType::kU8, Shape{n}));
}

}  // namespace

RunCheckpoints::~RunCheckpoints() {
  // Only after a failure (Finish settles the saves otherwise): no collective here, only this
  // rank's waits, each bounded by the writer's own deadlines.
  for (ckpt::CheckpointWriter* w : {writer_.get(), memory_writer_.get()}) {
    if (w == nullptr) continue;
    const Status s = w->Wait(Deadline::After(std::chrono::minutes(15)));
    if (!s.ok()) LOG_ERROR("checkpoint save at exit: {}", s.ToString());
  }
}

Result<std::unique_ptr<RunCheckpoints>> RunCheckpoints::Create(
    const RunConfig& config, const std::string& layout, comm::Communicator* world, Device device,
    std::shared_ptr<ckpt::Storage> memory, const ckpt::StorageOptions& storage) {
  if (config.ckpt.dir.empty())
    return InvalidArgument(
        "checkpoints need ckpt.dir (a folder, file://PATH or "
        "ringfs://HOST:PORT/PATH)");
  ASSIGN_OR_RETURN(const ckpt::Codec codec, ckpt::ParseCodec(config.ckpt.codec));
  std::unique_ptr<RunCheckpoints> c(new RunCheckpoints());
  c->config_ = config;
  c->world_ = world;
  c->device_ = device;
  c->memory_ = std::move(memory);
  double phase = MonoSeconds();
  ASSIGN_OR_RETURN(c->storage_, ckpt::OpenStorage(config.ckpt.dir, storage));
  WarnIfSlow(phase, "connecting to " + config.ckpt.dir);
  // One run id for every rank: rank 0's.
  std::string id = ckpt::NewRunId();
  id.resize(kRunIdBytes, '0');
  if (world != nullptr && world->size() > 1) {
    RETURN_IF_ERROR(OnDevice(device, &c->agree_staging_, id.data(), kRunIdBytes, [&](void* data) {
      return world->Broadcast(data, data, kRunIdBytes, DType::kU8, 0)
          ->Wait(Deadline::After(kAgreeTimeout))
          .WithContext("broadcast of the checkpoint run id");
    }));
  }
  // Every manifest this run writes carries the id, and a resume names the id it loaded: the log
  // lines tie each loaded state to the run that wrote it (the chaos replay follows them).
  if (world == nullptr || world->rank() == 0) LOG_INFO("checkpoint run id {}", id);
  if (config.ckpt.every > 0) {
    ckpt::WriterOptions o;
    o.storage = c->storage_;
    o.rank = world != nullptr ? world->rank() : 0;
    o.world = world != nullptr ? world->size() : 1;
    o.run_id = id;
    o.config_toml = DescribeRunConfig(config);
    o.layout = layout;
    o.keep = config.ckpt.keep;
    o.codec = codec;
    o.async = true;  // ckpt.async = false: Save settles the save at once
    phase = MonoSeconds();
    ASSIGN_OR_RETURN(c->writer_, ckpt::CheckpointWriter::Create(o));
    WarnIfSlow(phase, "opening the checkpoint writer of " + config.ckpt.dir);
    // For the failure messages ("the newest complete checkpoint is ...") and the first Resume,
    // which takes this listing rather than wait for an unreachable storage twice.
    phase = MonoSeconds();
    Result<std::vector<int64_t>> committed = ckpt::ListCommitted(*c->storage_);
    WarnIfSlow(phase, "listing the checkpoints in " + config.ckpt.dir);
    if (committed.ok() && !committed->empty()) c->newest_committed_ = committed->front();
    c->created_listing_ = std::move(committed);
  }
  if (c->memory_ != nullptr && config.ckpt.memory_every > 0) {
    // Only the newest snapshot is kept, uncompressed (memory is fast; the CPU is not).
    ckpt::WriterOptions o;
    o.storage = c->memory_;
    o.rank = world != nullptr ? world->rank() : 0;
    o.world = world != nullptr ? world->size() : 1;
    o.run_id = id;
    o.config_toml = DescribeRunConfig(config);
    o.layout = layout;
    o.keep = 1;
    o.async = true;
    o.fault_prefix = "ckpt.memory";
    phase = MonoSeconds();
    ASSIGN_OR_RETURN(c->memory_writer_, ckpt::CheckpointWriter::Create(std::move(o)));
    WarnIfSlow(phase, "opening the checkpoint writer of " + c->memory_->uri());
  }
  return c;
}

bool RunCheckpoints::Due(int64_t step, bool last) {
  last_due_ = last;
  memory_due_ = memory_writer_ != nullptr && step % config_.ckpt.memory_every == 0;
  durable_due_ = writer_ != nullptr && (step % config_.ckpt.every == 0 || last);
  if (durable_due_ && step <= skipped_up_to_) {
    LOG_WARN(
        "checkpoint of step {} not saved: the unloadable checkpoint of step {} in {} is "
        "still the newest committed one; saves resume after that step",
        step, skipped_up_to_, storage_->uri());
    durable_due_ = false;
  }
  return durable_due_ || memory_due_;
}

Status RunCheckpoints::Save(int64_t step, const ckpt::StateShards& shards,
                            const TrainerState& state,
                            const std::function<void(bool checkpoint)>& before_checkpoint) {
  const bool durable = durable_due_ || !memory_due_;
  // A planned stop's save (none was due) and the run's last must reach the store if it is back,
  // even right after a failed connect.
  if (durable && (last_due_ || (!durable_due_ && !memory_due_))) storage_->RetryNow();
  durable_due_ = false;
  last_due_ = false;
  if (durable && writer_ == nullptr) return FailedPrecondition("checkpoint save: ckpt.every is 0");
  const std::vector<std::byte> bytes = state.Serialize();
  std::string engine_state(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (memory_due_) {
    memory_due_ = false;
    ASSIGN_OR_RETURN(const bool previous_failed, SettleMemory());
    Start(*memory_writer_, memory_pending_, step, shards, engine_state);
    // After a failed snapshot this step's is waited for, so that the step is reported only once
    // a snapshot at most memory_every steps old is committed (unless this one fails too: logged).
    if (previous_failed) RETURN_IF_ERROR(SettleMemory().status());
  }
  if (before_checkpoint) before_checkpoint(durable);
  if (!durable) return Status();
  const double start = MonoSeconds();
  const int64_t previous = durable_pending_.step;
  RETURN_IF_ERROR(SettleDurable());
  if (const double waited = MonoSeconds() - start; waited > 0.01)
    LOG_INFO("checkpoint step {}: waited {:.3f} s for the save of step {}", step, waited, previous);
  durable_step_ = step;
  Start(*writer_, durable_pending_, step, shards, std::move(engine_state));
  return config_.ckpt.async ? Status() : SettleDurable();
}

void RunCheckpoints::Start(ckpt::CheckpointWriter& writer, PendingSave& pending, int64_t step,
                           const ckpt::StateShards& shards, std::string engine_state) {
  pending.active = true;
  pending.step = step;
  pending.started = writer.Save(step, shards, std::move(engine_state));
}

Result<int64_t> RunCheckpoints::Settle(ckpt::CheckpointWriter& writer, PendingSave& pending,
                                       Status* cause) {
  const int64_t world = world_ != nullptr ? world_->size() : 1;
  const int64_t rank = world_ != nullptr ? world_->rank() : 0;
  if (!pending.active) return world;
  pending.active = false;
  // The writer's own deadlines (commit timeout, storage calls) bound these waits; this one
  // only backs them up.
  const Deadline deadline = Deadline::After(std::chrono::minutes(15));
  Status mine = pending.started.ok() ? writer.WaitWritten(deadline) : pending.started;
  ASSIGN_OR_RETURN(const int64_t first, Reduce(mine.ok() ? world : rank, comm::ReduceOp::kMin));
  if (first < world) writer.Abandon();
  // Rank 0: the commit's outcome; the others: their own part, already known.
  const Status outcome = writer.Wait(deadline);
  int64_t verdict = world;
  if (rank == 0 && !outcome.ok()) verdict = first < world ? first : 0;
  ASSIGN_OR_RETURN(verdict, Reduce(verdict, comm::ReduceOp::kMin));
  // Every rank is done writing: rank 0 removes what the failed save left (if its own write
  // failed, its writer could not wait for the others).
  if (verdict < world && rank == 0 && world > 1) writer.RemoveFailedSave(pending.step);
  if (verdict == rank) *cause = mine.ok() ? outcome : mine;
  if (verdict == world && !mine.ok())
    LOG_WARN(
        "checkpoint step {}: rank {} failed after its part was durable ({}); the step is "
        "committed",
        pending.step, rank, mine.ToString());
  return verdict;
}

void RunCheckpoints::NoteSettled(const ckpt::CheckpointWriter& writer, bool memory, int64_t step,
                                 int64_t verdict) {
  CheckpointTransfer t{.memory = memory, .step = step};
  // A save the writer refused to start (its previous one failed) has no footprint of its own.
  if (const ckpt::SaveFootprint& f = writer.last_save(); f.step == step) {
    t.bytes = f.bytes;
    t.seconds = f.seconds;
  }
  if (verdict == (world_ != nullptr ? world_->size() : 1)) {
    transfers_.saves.push_back(t);
  } else {
    t.bytes = 0;
    transfers_.failed.push_back(t);
  }
}

std::string RunCheckpoints::NewestCommitted() const {
  return newest_committed_ < 0 ? std::string("none") : "step " + std::to_string(newest_committed_);
}

Status RunCheckpoints::SettleDurable() {
  if (!durable_pending_.active) return Status();
  const int64_t step = durable_pending_.step;
  Status cause;
  ASSIGN_OR_RETURN(const int64_t failed_on, Settle(*writer_, durable_pending_, &cause));
  NoteSettled(*writer_, /*memory=*/false, step, failed_on);
  if (failed_on == (world_ != nullptr ? world_->size() : 1)) {
    newest_committed_ = std::max(newest_committed_, step);
    failed_in_a_row_.clear();
    return Status();
  }
  ++failed_saves_;
  failed_in_a_row_.push_back(step);
  last_failure_ = "on rank " + std::to_string(failed_on) + ": " +
                  (cause.ok() ? std::string("its log names the cause") : cause.ToString());
  if (!cause.ok())
    LOG_ERROR(
        "checkpoint step {} failed {}; training continues, the newest complete checkpoint "
        "in {} is {}",
        step, last_failure_, storage_->uri(), NewestCommitted());
  const int limit = config_.ckpt.max_failed_saves;
  if (limit == 0 || failed_in_a_row_.size() < static_cast<size_t>(limit)) return Status();
  std::string steps;
  for (int64_t s : failed_in_a_row_) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
  return FailedPrecondition(
      "the last " + std::to_string(limit) + " checkpoint saves failed " + "(steps " + steps +
      "; the last " + last_failure_ +
      "): stopping the run (ckpt.max_failed_saves = " + std::to_string(limit) +
      ", 0 = never stop); the newest complete "
      "checkpoint in " +
      storage_->uri() + " is " + NewestCommitted());
}

Result<bool> RunCheckpoints::SettleMemory() {
  if (memory_writer_ == nullptr || !memory_pending_.active) return false;
  const int64_t step = memory_pending_.step;
  Status cause;
  ASSIGN_OR_RETURN(const int64_t failed_on, Settle(*memory_writer_, memory_pending_, &cause));
  NoteSettled(*memory_writer_, /*memory=*/true, step, failed_on);
  if (failed_on == (world_ != nullptr ? world_->size() : 1)) memory_committed_step_ = step;
  if (!cause.ok())
    LOG_WARN(
        "memory snapshot of step {} to {} failed on rank {}: {} (the memory tier skips it; "
        "ckpt.dir keeps the durable checkpoints)",
        step, memory_->uri(), failed_on, cause.ToString());
  return failed_on < (world_ != nullptr ? world_->size() : 1);
}

Status RunCheckpoints::SaveLast(int64_t step, const ckpt::StateShards& shards,
                                const TrainerState& state) {
  if (writer_ == nullptr || state.step != step) return Status();
  const bool missing = newest_committed_ < step && durable_step_ < step;
  ASSIGN_OR_RETURN(const int64_t any, Reduce(missing ? 1 : 0, comm::ReduceOp::kMax));
  if (any == 0) return Status();
  LOG_INFO(
      "checkpoint step {}: the run's last step has no checkpoint in {} (resumed at the end "
      "from a memory snapshot); saving it",
      step, storage_->uri());
  durable_due_ = true;
  memory_due_ = false;
  last_due_ = true;
  return Save(step, shards, state);
}

Result<bool> RunCheckpoints::SnapshotForStop(int64_t step, const ckpt::StateShards& shards,
                                             const TrainerState& state) {
  if (memory_writer_ == nullptr) return false;
  // Every rank holds the same pending saves (Save is collective), so every rank takes the same
  // branches here.
  const bool started = memory_pending_.active && memory_pending_.step == step;
  if (!started && memory_committed_step_ != step) {
    RETURN_IF_ERROR(SettleMemory().status());
    const std::vector<std::byte> bytes = state.Serialize();
    Start(*memory_writer_, memory_pending_, step, shards,
          std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  RETURN_IF_ERROR(SettleMemory().status());
  if (memory_committed_step_ == step) return true;
  LOG_WARN("planned stop after step {}: its memory snapshot did not commit; saving a checkpoint",
           step);
  return false;
}

Status RunCheckpoints::Finish() {
  RETURN_IF_ERROR(SettleMemory().status());
  if (writer_ == nullptr || !durable_pending_.active) return Status();
  const int64_t step = durable_pending_.step;
  const int64_t failed_before = failed_saves_;
  RETURN_IF_ERROR(SettleDurable());
  if (failed_saves_ == failed_before) return Status();
  return FailedPrecondition("the checkpoint of step " + std::to_string(step) +
                            ", the last of this run, failed " + last_failure_ +
                            "; the newest complete checkpoint in " + storage_->uri() + " is " +
                            NewestCommitted());
}

Status RunCheckpoints::DropNewerMemorySnapshots(const std::vector<int64_t>& memory_steps,
                                                int64_t step) {
  if (memory_ == nullptr) return Status();
  if (world_ == nullptr || world_->rank() == 0) {
    Status s;
    // `latest` first: without it the store takes the older steps the next snapshots write.
    if (!memory_steps.empty() && memory_steps.front() > step)
      s = memory_->Remove(ckpt::kLatestFile);
    Result<std::vector<int64_t>> folders = ckpt::ListStepDirs(*memory_);
    if (s.ok()) s = folders.status();
    if (s.ok())
      for (int64_t newer : *folders)
        if (s.ok() && newer > step) s = memory_->Remove(ckpt::StepDir(newer));
    if (!s.ok())
      LOG_WARN("memory tier {}: drop snapshots newer than step {}: {}", memory_->uri(), step,
               s.ToString());
  }
  return Reduce(0, comm::ReduceOp::kMin).status();
}

Result<int64_t> RunCheckpoints::Reduce(int64_t value, comm::ReduceOp op) {
  if (world_ == nullptr || world_->size() == 1) return value;
  RETURN_IF_ERROR(OnDevice(device_, &agree_staging_, &value, sizeof(value), [&](void* data) {
    return world_->AllReduce(data, data, 1, DType::kI64, op)
        ->Wait(Deadline::After(kAgreeTimeout))
        .WithContext("checkpoint agreement all-reduce");
  }));
  return value;
}

bool PassesOver(const Status& why, bool from_memory) {
  return from_memory || !ckpt::StorageOutOfReach(why);
}

Result<TrainerState> RunCheckpoints::Resume(const ckpt::StateShards& dest) {
  const std::string where = storage_->uri();
  const double started = MonoSeconds();
  uint64_t bytes_read = 0;  // by every candidate tried
  // A rank that cannot list says so to the others, so that none waits for it in the agreement.
  // The seconds of each phase, for the line that says where the time went.
  double listing_s = 0, memory_listing_s = 0, loading_s = 0, agreeing_s = 0;
  double phase = MonoSeconds();
  Result<std::vector<int64_t>> listed =
      created_listing_ ? std::move(*created_listing_) : ckpt::ListCommitted(*storage_);
  created_listing_.reset();
  WarnIfSlow(phase, "resume: listing the checkpoints in " + where);
  listing_s = MonoSeconds() - phase;
  phase = MonoSeconds();
  ASSIGN_OR_RETURN(const int64_t listed_everywhere,
                   Reduce(listed.ok() ? 1 : 0, comm::ReduceOp::kMin));
  WarnIfSlow(phase, "resume: waiting for every rank to list the checkpoints");
  agreeing_s += MonoSeconds() - phase;
  if (listed_everywhere == 0) {
    const Status why = listed.ok()
                           ? Unavailable("another rank could not list the checkpoints in " + where)
                           : listed.status().WithContext("list the checkpoints in " + where);
    // With a memory tier the job goes on from its snapshots while the durable tier is out of
    // reach (a chunk store whose metadata node is down); every rank decides alike.
    if (memory_ == nullptr) return why.WithContext("resume");
    LOG_WARN("resume: {}; resuming from the memory tier alone", why.ToString());
    listed = std::vector<int64_t>();
  }
  // The memory tier's snapshots join them; one that cannot be listed is only missed.
  std::vector<int64_t> memory_steps;
  if (memory_ != nullptr) {
    phase = MonoSeconds();
    Result<std::vector<int64_t>> in_memory = ckpt::ListCommitted(*memory_);
    WarnIfSlow(phase, "resume: listing the memory snapshots in " + memory_->uri());
    memory_listing_s = MonoSeconds() - phase;
    if (in_memory.ok()) {
      memory_steps = *in_memory;
    } else {
      LOG_WARN("resume: list the memory snapshots in {}: {}", memory_->uri(),
               in_memory.status().ToString());
    }
  }
  // Candidates as 2 * step + (1 for the memory tier), newest first: of two of one step the
  // memory snapshot (faster to load) comes first.
  std::vector<int64_t> candidates;
  for (int64_t step : *listed) candidates.push_back(2 * step);
  for (int64_t step : memory_steps) candidates.push_back(2 * step + 1);
  std::sort(candidates.rbegin(), candidates.rend());
  auto describe = [&](int64_t candidate) {
    return (candidate % 2 == 1 ? "memory snapshot " : "checkpoint ") +
           std::to_string(candidate / 2) + " in " + (candidate % 2 == 1 ? memory_->uri() : where);
  };
  Status newest_error;
  for (size_t i = 0;; ++i) {
    // Every rank tries the same candidate: the i-th newest, the same on all of them.
    const int64_t mine = i < candidates.size() ? candidates[i] : -1;
    phase = MonoSeconds();
    ASSIGN_OR_RETURN(const int64_t low, Reduce(mine, comm::ReduceOp::kMin));
    ASSIGN_OR_RETURN(const int64_t high, Reduce(mine, comm::ReduceOp::kMax));
    agreeing_s += MonoSeconds() - phase;
    if (low != high)
      return FailedPrecondition("resume from " + where +
                                ": the ranks see different committed "
                                "checkpoints (this rank's " +
                                std::to_string(i + 1) + "-th newest is " +
                                (mine < 0 ? "none" : describe(mine)) + ", another's " +
                                describe(mine == low ? high : low) + ")");
    if (mine < 0) {
      if (i == 0) return NotFound("resume: no committed checkpoint in " + where);
      if (listed_everywhere == 1 && listed->empty()) {
        // Only memory snapshots, none whole (their node and its neighbour both gone), and the
        // durable tier listed empty: they are dropped, so that the next generation starts from
        // step 0 rather than fail on them.
        RETURN_IF_ERROR(DropNewerMemorySnapshots(memory_steps, 0));
        return newest_error.WithContext(
            "resume: no memory snapshot in " + memory_->uri() + " loads and " + where +
            " holds no committed checkpoint; the snapshots are dropped and the next generation "
            "starts from step 0");
      }
      return newest_error.WithContext("resume: no committed checkpoint in " + where + " loads");
    }
    const int64_t step = mine / 2;
    const bool from_memory = mine % 2 == 1;
    TrainerState state;
    phase = MonoSeconds();
    Result<std::unique_ptr<ckpt::CheckpointReader>> reader =
        ckpt::CheckpointReader::Open(from_memory ? memory_ : storage_, step);
    Status s = reader.status();
    if (s.ok()) s = (*reader)->Load(dest);
    if (reader.ok()) bytes_read += (*reader)->bytes_read();
    if (s.ok()) {
      const std::string& bytes = (*reader)->manifest().engine_state;
      Result<TrainerState> decoded = TrainerState::Deserialize(
          std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
      s = decoded.status();
      if (s.ok()) state = *decoded;
    }
    WarnIfSlow(phase, "resume: loading " + describe(mine));
    loading_s += MonoSeconds() - phase;
    phase = MonoSeconds();
    // 1: loaded; 0: passed over (damaged, incomplete); -1: out of reach now (not passed over).
    const int64_t outcome = s.ok() ? 1 : (PassesOver(s, from_memory) ? 0 : -1);
    ASSIGN_OR_RETURN(const int64_t all_ok, Reduce(outcome, comm::ReduceOp::kMin));
    WarnIfSlow(phase, "resume: waiting for every rank to load " + describe(mine));
    agreeing_s += MonoSeconds() - phase;
    if (all_ok == -1)
      return Unavailable("resume: " + describe(mine) + " is committed but out of reach now (" +
                         (outcome == -1 ? s.ToString() : "on another rank") +
                         "); the resume fails and is tried again rather than lose its steps");
    if (all_ok == 1) {
      resumed_from_ = (from_memory ? "memory snapshot of step " : "checkpoint of step ") +
                      std::to_string(step) + " in " + (from_memory ? memory_->uri() : where);
      if (!listed->empty()) newest_committed_ = listed->front();
      // Durable saves resume after the newest committed checkpoint this resume passed over.
      for (int64_t durable : *listed)
        if (durable > step) skipped_up_to_ = std::max(skipped_up_to_, durable);
      RETURN_IF_ERROR(DropNewerMemorySnapshots(memory_steps, step));
      transfers_.loads.push_back({.memory = from_memory,
                                  .step = step,
                                  .bytes = bytes_read,
                                  .seconds = MonoSeconds() - started});
      if (state.step != step)
        LOG_WARN("{} holds trainer state of step {}", describe(mine), state.step);
      LOG_INFO(
          "resuming from {} (written by layout {}, run {}); found and loaded in {:.3f} s "
          "(listing the checkpoints {:.3f} s, the memory snapshots {:.3f} s, loading {:.3f} s, "
          "agreeing with the other ranks {:.3f} s)",
          describe(mine), (*reader)->manifest().layout, (*reader)->manifest().run_id,
          MonoSeconds() - started, listing_s, memory_listing_s, loading_s, agreeing_s);
      if (state.schedule_steps != config_.train.steps)
        LOG_WARN(
            "train.steps is {} but the checkpoint's learning-rate schedule decays over {} "
            "steps: the resumed run keeps the checkpoint's schedule",
            config_.train.steps, state.schedule_steps);
      return state;
    }
    if (newest_error.ok())
      newest_error = s.ok() ? Unavailable(describe(mine) + " failed to load on another rank")
                            : s.WithContext(describe(mine));
    if (s.ok()) {
      LOG_WARN("{} failed to load on another rank; all ranks fall back to an older one",
               describe(mine));
    } else {
      LOG_WARN("{} cannot be loaded here ({}); all ranks fall back to an older one", describe(mine),
               s.ToString());
    }
  }
}

}  // namespace rt::parallel
