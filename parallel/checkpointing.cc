#include "parallel/checkpointing.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "base/log.h"
#include "ckpt/catalog.h"
#include "ckpt/codec.h"
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
  if (writer_ == nullptr) return;
  const Status s = Finish();
  if (!s.ok()) LOG_ERROR("{}", s.ToString());
}

Result<std::unique_ptr<RunCheckpoints>> RunCheckpoints::Create(const RunConfig& config,
                                                               const std::string& layout,
                                                               comm::Communicator* world,
                                                               Device device) {
  if (config.ckpt.dir.empty())
    return InvalidArgument("checkpoints need ckpt.dir (a folder, file://PATH or "
                           "ringfs://HOST:PORT/PATH)");
  ASSIGN_OR_RETURN(const ckpt::Codec codec, ckpt::ParseCodec(config.ckpt.codec));
  std::unique_ptr<RunCheckpoints> c(new RunCheckpoints());
  c->config_ = config;
  c->world_ = world;
  c->device_ = device;
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
    ASSIGN_OR_RETURN(c->writer_, ckpt::CheckpointWriter::Create(std::move(o)));
  }
  return c;
}

bool RunCheckpoints::Due(int64_t step, bool last) {
  if (writer_ == nullptr || (step % config_.ckpt.every != 0 && !last)) return false;
  if (step > skipped_up_to_) return true;
  LOG_WARN("checkpoint of step {} not saved: the unloadable checkpoint of step {} in {} is still "
           "the newest committed one; saves resume after that step", step, skipped_up_to_,
           storage_->uri());
  return false;
}

Status RunCheckpoints::Save(int64_t step, const ckpt::StateShards& shards,
                            const TrainerState& state) {
  if (writer_ == nullptr) return FailedPrecondition("checkpoint save: ckpt.every is 0");
  const std::vector<std::byte> bytes = state.Serialize();
  std::string engine_state(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return writer_->Save(step, shards, std::move(engine_state))
      .WithContext("checkpoint of step " + std::to_string(step) + " to " + storage_->uri());
}

Status RunCheckpoints::Finish() {
  if (writer_ == nullptr) return Status();
  // The writer's own deadlines (commit timeout) bound the save; this one only backs them up.
  return writer_->Wait(Deadline::After(std::chrono::minutes(15)))
      .WithContext("checkpoint save to " + storage_->uri());
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
  const std::vector<int64_t>& steps = *listed;
  Status newest_error;
  for (size_t i = 0;; ++i) {
    // Every rank tries the same step: the i-th newest, the same on all of them.
    const int64_t mine = i < steps.size() ? steps[i] : -1;
    ASSIGN_OR_RETURN(const int64_t low, Reduce(mine, comm::ReduceOp::kMin));
    ASSIGN_OR_RETURN(const int64_t high, Reduce(mine, comm::ReduceOp::kMax));
    if (low != high)
      return FailedPrecondition("resume from " + where + ": the ranks see different committed "
                                "checkpoints (this rank's " + std::to_string(i + 1) +
                                "-th newest is step " + std::to_string(mine) + ", others' " +
                                std::to_string(mine == low ? high : low) + ")");
    if (mine < 0) {
      if (i == 0) return NotFound("resume: no committed checkpoint in " + where);
      return newest_error.WithContext("resume: no committed checkpoint in " + where + " loads");
    }
    TrainerState state;
    Result<std::unique_ptr<ckpt::CheckpointReader>> reader = ckpt::CheckpointReader::Open(
        storage_, mine);
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
      if (i > 0) skipped_up_to_ = steps.front();
      if (state.step != mine)
        LOG_WARN("checkpoint step {} in {} holds trainer state of step {}", mine, where,
                 state.step);
      LOG_INFO("resuming from checkpoint step {} in {} (written by layout {})", mine, where,
               (*reader)->manifest().layout);
      if (state.schedule_steps != config_.train.steps)
        LOG_WARN("train.steps is {} but the checkpoint's learning-rate schedule decays over {} "
                 "steps: the resumed run keeps the checkpoint's schedule", config_.train.steps,
                 state.schedule_steps);
      return state;
    }
    if (newest_error.ok())
      newest_error = s.ok() ? Unavailable("step " + std::to_string(mine) +
                                          " failed to load on another rank")
                            : s.WithContext("step " + std::to_string(mine));
    if (s.ok()) {
      LOG_WARN("checkpoint step {} in {} failed to load on another rank; all ranks fall back "
               "to an older one", mine, where);
    } else {
      LOG_WARN("checkpoint step {} in {} cannot be loaded here ({}); all ranks fall back to an "
               "older one", mine, where, s.ToString());
    }
  }
}

}  // namespace rt::parallel
