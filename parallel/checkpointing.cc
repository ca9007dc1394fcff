#include "parallel/checkpointing.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

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

// Runs `op` on `bytes` host bytes staged through a buffer on `device` (NCCL takes device
// memory), copying the result back.
template <typename Op>
Status OnDevice(Device device, void* bytes, size_t size, Op op) {
  if (device == Device::kCpu) return op(bytes);
  ASSIGN_OR_RETURN(Buffer staging, Buffer::Allocate(device, size));
  const int64_t n = static_cast<int64_t>(size);
  const Tensor host(bytes, DType::kU8, Shape{n});
  RETURN_IF_ERROR(Copy(staging.View(DType::kU8, Shape{n}), host));
  RETURN_IF_ERROR(op(staging.data()));
  return Copy(host, staging.View(DType::kU8, Shape{n}));
}

}  // namespace

RunCheckpoints::~RunCheckpoints() {
  if (writer_ == nullptr && memory_writer_ == nullptr) return;
  const Status s = Finish();
  if (!s.ok()) LOG_ERROR("{}", s.ToString());
}

Result<std::unique_ptr<RunCheckpoints>> RunCheckpoints::Create(const RunConfig& config,
                                                               const std::string& layout,
                                                               comm::Communicator* world,
                                                               Device device,
                                                               std::shared_ptr<ckpt::Storage> memory) {
  if (config.ckpt.dir.empty())
    return InvalidArgument("checkpoints need ckpt.dir (a folder, file://PATH or "
                           "ringfs://HOST:PORT/PATH)");
  ASSIGN_OR_RETURN(const ckpt::Codec codec, ckpt::ParseCodec(config.ckpt.codec));
  std::unique_ptr<RunCheckpoints> c(new RunCheckpoints());
  c->config_ = config;
  c->world_ = world;
  c->device_ = device;
  c->memory_ = std::move(memory);
  ASSIGN_OR_RETURN(c->storage_, ckpt::OpenStorage(config.ckpt.dir));
  // One run id for every rank: rank 0's.
  std::string id = ckpt::NewRunId();
  id.resize(kRunIdBytes, '0');
  if (world != nullptr && world->size() > 1) {
    RETURN_IF_ERROR(OnDevice(device, id.data(), kRunIdBytes, [&](void* data) {
      return world->Broadcast(data, data, kRunIdBytes, DType::kU8, 0)
          ->Wait(Deadline::After(kAgreeTimeout))
          .WithContext("broadcast of the checkpoint run id");
    }));
  }
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
    o.async = config.ckpt.async;
    ASSIGN_OR_RETURN(c->writer_, ckpt::CheckpointWriter::Create(o));
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
    ASSIGN_OR_RETURN(c->memory_writer_, ckpt::CheckpointWriter::Create(std::move(o)));
  }
  return c;
}

bool RunCheckpoints::Due(int64_t step, bool last) {
  memory_due_ = memory_writer_ != nullptr && step % config_.ckpt.memory_every == 0;
  durable_due_ = writer_ != nullptr && (step % config_.ckpt.every == 0 || last);
  if (durable_due_ && step <= skipped_up_to_) {
    LOG_WARN("checkpoint of step {} not saved: the unloadable checkpoint of step {} in {} is "
             "still the newest committed one; saves resume after that step", step,
             skipped_up_to_, storage_->uri());
    durable_due_ = false;
  }
  return durable_due_ || memory_due_;
}

Status RunCheckpoints::Save(int64_t step, const ckpt::StateShards& shards,
                            const TrainerState& state) {
  const bool durable = durable_due_ || !memory_due_;
  durable_due_ = false;
  if (durable && writer_ == nullptr) return FailedPrecondition("checkpoint save: ckpt.every is 0");
  const std::vector<std::byte> bytes = state.Serialize();
  std::string engine_state(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (memory_due_) {
    memory_due_ = false;
    Status s = memory_writer_->Save(step, shards, engine_state);
    if (!s.ok()) {
      // The previous snapshot failed, and Save reported that without starting this one: this
      // step's is taken now and waited for, so that the step is reported only once a snapshot
      // at most memory_every steps old is committed (rank 0's wait covers the commit).
      LOG_WARN("memory snapshot to {}: {}; the snapshot of step {} is taken now and waited for",
               memory_->uri(), s.ToString(), step);
      s = memory_writer_->Save(step, shards, engine_state);
      if (s.ok()) s = memory_writer_->Wait(Deadline::After(kAgreeTimeout));
    }
    if (!s.ok())
      LOG_WARN("memory snapshot of step {} to {}: {} (the memory tier skips it)", step,
               memory_->uri(), s.ToString());
  }
  if (!durable) return Status();
  durable_step_ = step;
  return writer_->Save(step, shards, std::move(engine_state))
      .WithContext("checkpoint of step " + std::to_string(step) + " to " + storage_->uri());
}

Status RunCheckpoints::Finish() {
  if (memory_writer_ != nullptr) {
    const Status s = memory_writer_->Wait(Deadline::After(std::chrono::minutes(15)));
    if (!s.ok()) LOG_WARN("memory snapshot to {}: {}", memory_->uri(), s.ToString());
  }
  if (writer_ == nullptr) return Status();
  // The writer's own deadlines (commit timeout) bound the save; this one only backs them up.
  return writer_->Wait(Deadline::After(std::chrono::minutes(15)))
      .WithContext("checkpoint save to " + storage_->uri());
}

void RunCheckpoints::DropNewerMemorySnapshots(const std::vector<int64_t>& memory_steps,
                                              int64_t step) {
  if (memory_ == nullptr || (world_ != nullptr && world_->rank() != 0)) return;
  if (memory_steps.empty() || memory_steps.front() <= step) return;
  // `latest` first: without it the store takes the older steps the next snapshots write.
  Status s = memory_->Remove(ckpt::kLatestFile);
  for (int64_t newer : memory_steps)
    if (s.ok() && newer > step) s = memory_->Remove(ckpt::StepDir(newer));
  if (!s.ok()) LOG_WARN("memory tier {}: drop snapshots newer than step {}: {}", memory_->uri(),
                        step, s.ToString());
}

Result<int64_t> RunCheckpoints::Reduce(int64_t value, comm::ReduceOp op) {
  if (world_ == nullptr || world_->size() == 1) return value;
  RETURN_IF_ERROR(OnDevice(device_, &value, sizeof(value), [&](void* data) {
    return world_->AllReduce(data, data, 1, DType::kI64, op)
        ->Wait(Deadline::After(kAgreeTimeout))
        .WithContext("checkpoint agreement all-reduce");
  }));
  return value;
}

Result<TrainerState> RunCheckpoints::Resume(const ckpt::StateShards& dest) {
  const std::string where = storage_->uri();
  // A rank that cannot list says so to the others, so that none waits for it in the agreement.
  Result<std::vector<int64_t>> listed = ckpt::ListCommitted(*storage_);
  ASSIGN_OR_RETURN(const int64_t listed_everywhere, Reduce(listed.ok() ? 1 : 0,
                                                           comm::ReduceOp::kMin));
  if (!listed.ok())
    return listed.status().WithContext("resume: list the checkpoints in " + where);
  if (listed_everywhere == 0)
    return Unavailable("resume: another rank could not list the checkpoints in " + where);
  // The memory tier's snapshots join them; one that cannot be listed is only missed.
  std::vector<int64_t> memory_steps;
  if (memory_ != nullptr) {
    Result<std::vector<int64_t>> in_memory = ckpt::ListCommitted(*memory_);
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
           std::to_string(candidate / 2) + " in " +
           (candidate % 2 == 1 ? memory_->uri() : where);
  };
  Status newest_error;
  for (size_t i = 0;; ++i) {
    // Every rank tries the same candidate: the i-th newest, the same on all of them.
    const int64_t mine = i < candidates.size() ? candidates[i] : -1;
    ASSIGN_OR_RETURN(const int64_t low, Reduce(mine, comm::ReduceOp::kMin));
    ASSIGN_OR_RETURN(const int64_t high, Reduce(mine, comm::ReduceOp::kMax));
    if (low != high)
      return FailedPrecondition("resume from " + where + ": the ranks see different committed "
                                "checkpoints (this rank's " + std::to_string(i + 1) +
                                "-th newest is " + (mine < 0 ? "none" : describe(mine)) +
                                ", another's " +
                                describe(mine == low ? high : low) + ")");
    if (mine < 0) {
      if (i == 0) return NotFound("resume: no committed checkpoint in " + where);
      return newest_error.WithContext("resume: no committed checkpoint in " + where + " loads");
    }
    const int64_t step = mine / 2;
    const bool from_memory = mine % 2 == 1;
    TrainerState state;
    Result<std::unique_ptr<ckpt::CheckpointReader>> reader =
        ckpt::CheckpointReader::Open(from_memory ? memory_ : storage_, step);
    Status s = reader.status();
    if (s.ok()) s = (*reader)->Load(dest);
    if (s.ok()) {
      const std::string& bytes = (*reader)->manifest().engine_state;
      Result<TrainerState> decoded = TrainerState::Deserialize(
          std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
      s = decoded.status();
      if (s.ok()) state = *decoded;
    }
    ASSIGN_OR_RETURN(const int64_t all_ok, Reduce(s.ok() ? 1 : 0, comm::ReduceOp::kMin));
    if (all_ok == 1) {
      // Durable saves resume after the newest committed checkpoint this resume passed over.
      for (int64_t durable : *listed)
        if (durable > step) skipped_up_to_ = std::max(skipped_up_to_, durable);
      DropNewerMemorySnapshots(memory_steps, step);
      if (state.step != step)
        LOG_WARN("{} holds trainer state of step {}", describe(mine), state.step);
      LOG_INFO("resuming from {} (written by layout {})", describe(mine),
               (*reader)->manifest().layout);
      if (state.schedule_steps != config_.train.steps)
        LOG_WARN("train.steps is {} but the checkpoint's learning-rate schedule decays over {} "
                 "steps: the resumed run keeps the checkpoint's schedule", config_.train.steps,
                 state.schedule_steps);
      return state;
    }
    if (newest_error.ok())
      newest_error = s.ok() ? Unavailable(describe(mine) + " failed to load on another rank")
                            : s.WithContext(describe(mine));
    if (s.ok()) {
      LOG_WARN("{} failed to load on another rank; all ranks fall back to an older one",
               describe(mine));
    } else {
      LOG_WARN("{} cannot be loaded here ({}); all ranks fall back to an older one",
               describe(mine), s.ToString());
    }
  }
}

}  // namespace rt::parallel
