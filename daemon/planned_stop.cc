// Planned changes that lose nothing (docs/daemon.md): `stop_at` through the replicated state,
// the workers' agreed stop and synchronous checkpoint, then the change; and `ringctl checkpoint`
// / `checkpoints`.
#include <algorithm>
#include <filesystem>
#include <functional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/log.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "daemon/node.h"
#include "elastic/job.h"

namespace rt::daemon {
namespace {

// How long a planned change waits for its checkpoint before it falls back to a restart from
// the newest committed checkpoint (ringctl's default timeout is 20 s).
constexpr auto kPlannedStopTimeout = std::chrono::seconds(15);
// How long a generation whose ranks stopped for a planned change waits for that change.
constexpr auto kStoppedIdleLimit = std::chrono::seconds(45);
// stop_at = newest reported step + this: a step no rank has finished yet (ranks run at most
// about one step apart, and the answer reaches rank 0 with its next report).
constexpr int64_t kStopAhead = 2;

// The job's ckpt.dir when it checkpoints (ckpt.dir set and ckpt.every > 0).
Result<std::string> CheckpointDir(const JobEntry& job) {
  ASSIGN_OR_RETURN(elastic::JobSpec spec, elastic::ParseJobSpec(job.text, "job " + job.name));
  if (spec.run.ckpt.dir.empty() || spec.run.ckpt.every <= 0)
    return FailedPrecondition("job " + job.name + " saves no checkpoints (ckpt.dir, ckpt.every)");
  return spec.run.ckpt.dir;
}

// Whether the job keeps memory snapshots (ckpt.memory_every > 0).
bool KeepsMemorySnapshots(const JobEntry& job) {
  Result<elastic::JobSpec> spec = elastic::ParseJobSpec(job.text, "job " + job.name);
  return spec.ok() && spec->run.ckpt.memory_every > 0;
}

// The committed checkpoints of `uri`, newest first: step, bytes, the MANIFEST's time where the
// storage is a local folder, URI. Blocking (storage I/O).
Result<Json> ListCheckpoints(const std::string& uri, const ckpt::StorageOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<ckpt::Storage> storage, ckpt::OpenStorage(uri, options));
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ckpt::ListCommitted(*storage));
  std::string local = storage->uri();
  if (local.rfind("file://", 0) == 0) local = local.substr(7);
  if (local.empty() || local[0] != '/') local.clear();  // not a local folder: no time
  Json list = Json::array();
  for (int64_t step : steps) {
    const std::string dir = ckpt::StepDir(step);
    ASSIGN_OR_RETURN(std::vector<std::string> files, storage->List(dir));
    uint64_t bytes = 0;
    for (const std::string& f : files) {
      ASSIGN_OR_RETURN(const uint64_t size, storage->FileSize(ckpt::JoinPath(dir, f)));
      bytes += size;
    }
    Json entry = {{"step", step}, {"bytes", bytes}, {"uri", ckpt::JoinPath(storage->uri(), dir)}};
    if (!local.empty()) {
      std::error_code ec;
      const auto written = std::filesystem::last_write_time(
          std::filesystem::path(local) / dir / ckpt::kManifestFile, ec);
      if (!ec)
        entry["unix_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::file_clock::to_sys(written).time_since_epoch())
                               .count();
    }
    list.push_back(std::move(entry));
  }
  return list;
}

// Whether the checkpoint (or snapshot) of planned stop `stop` is recorded in `state`.
bool StopCommitted(const ClusterState& state, const StopAt& stop) {
  return state.committed && state.committed->generation == stop.generation &&
         state.committed->step >= stop.step;
}

// Whether job `job_id` is the job of `state` and is to run.
bool JobRuns(const ClusterState& state, uint64_t job_id) {
  return state.job && state.job->id == job_id && state.job->desire == JobDesire::kRun;
}

}  // namespace

asio::awaitable<std::optional<Progress>> Node::NewestProgress() {
  std::optional<Progress> newest;
  const elastic::View view = membership_->CurrentView();
  for (const elastic::Member& m : view.members) {
    Result<Json> local = Json::object();
    if (m.id == static_cast<uint64_t>(config_.id)) {
      local = LocalReport();
    } else {
      local = co_await CallJsonOnce(m.address, secret_, kCtlLocal, Json::object(),
                                    Deadline::After(kPeerCallTimeout));
    }
    if (!local.ok() || !local->contains("progress")) continue;
    const Json& p = (*local)["progress"];
    Progress got;
    got.generation = p.value("generation", "");
    got.step = p.value("step", int64_t{0});
    got.unix_ms = p.value("unix_ms", int64_t{0});
    if (!newest || got.unix_ms > newest->unix_ms) newest = got;
  }
  co_return newest;
}

asio::awaitable<Result<int64_t>> Node::CheckpointFirst(std::string why, Deadline deadline,
                                                       bool snapshot_enough) {
  CO_ASSIGN_OR_RETURN(ClusterState state, DecodeClusterState(membership_->CurrentState().blob));
  if (!state.job || state.job->desire != JobDesire::kRun)
    co_return FailedPrecondition("the job is not running");
  CO_RETURN_IF_ERROR(CheckpointDir(*state.job).status());
  const std::optional<Progress> progress = co_await NewestProgress();
  if (!progress || progress->generation.rfind(std::to_string(state.job->id) + ".", 0) != 0)
    co_return FailedPrecondition("no rank of job " + state.job->name + " has reported a step");
  const StopAt stop{progress->generation, progress->step + kStopAhead, why,
                    snapshot_enough && KeepsMemorySnapshots(*state.job)};
  StateChange propose = [stop](ClusterState* st) -> Result<bool> {
    if (st->stop_at && st->stop_at->generation == stop.generation) return false;  // one pending
    st->stop_at = stop;
    return true;
  };
  CO_RETURN_IF_ERROR(co_await UpdateState(std::move(propose)));
  // The stop in force may be an earlier one of this generation: wait for that one's step.
  CO_ASSIGN_OR_RETURN(state, DecodeClusterState(membership_->CurrentState().blob));
  const StopAt agreed = state.stop_at ? *state.stop_at : stop;
  LOG_INFO("planned stop ({}): generation {} stops after step {}", why, agreed.generation,
           agreed.step);
  // (Named and moved, never a temporary in the co_await expression: GCC 12 destroys such
  // temporaries twice.)
  // Done when the stop's checkpoint is recorded, or when the job ends first (its last step
  // comes before the stop's): nothing is left to save then, and waiting would only run out the
  // deadline.
  const uint64_t job_id = state.job->id;
  std::function<bool(const elastic::ReplicatedState&)> done =
      [agreed, job_id](const elastic::ReplicatedState& r) {
        Result<ClusterState> s = DecodeClusterState(r.blob);
        if (!s.ok()) return false;
        return StopCommitted(*s, agreed) || !JobRuns(*s, job_id);
      };
  Result<elastic::ReplicatedState> committed =
      co_await membership_->AwaitState(std::move(done), deadline);
  if (!committed.ok())
    co_return committed.status().WithContext("the checkpoint of the planned stop after step " +
                                             std::to_string(agreed.step));
  CO_ASSIGN_OR_RETURN(state, DecodeClusterState(committed->blob));
  if (!StopCommitted(state, agreed)) {
    const std::string ended =
        state.job && state.job->id == job_id && state.job->desire == JobDesire::kFinished
            ? "finished after step " + std::to_string(state.job->finished_step)
            : "stopped";
    co_return FailedPrecondition("the job " + ended + " before the planned stop after step " +
                                 std::to_string(agreed.step));
  }
  LOG_INFO("planned stop ({}): {} of step {} committed in {}", why,
           agreed.snapshot ? "memory snapshot (or checkpoint)" : "checkpoint",
           state.committed->step, state.committed->uri);
  co_return state.committed->step;
}

asio::awaitable<Status> Node::PlannedChange(std::string why, StateChange change,
                                            bool snapshot_enough) {
  Result<int64_t> saved =
      co_await CheckpointFirst(why, Deadline::After(kPlannedStopTimeout), snapshot_enough);
  if (!saved.ok())
    LOG_WARN(
        "planned change ({}): no checkpoint first ({}); the next generation resumes from "
        "the newest committed checkpoint",
        why, saved.status().ToString());
  StateChange apply = [change = std::move(change)](ClusterState* st) -> Result<bool> {
    ASSIGN_OR_RETURN(const bool changed, change(st));
    if (changed) st->stop_at.reset();
    return changed;
  };
  co_return co_await UpdateState(std::move(apply));
}

asio::awaitable<void> Node::GrowAfterCheckpoint(GenerationKey key, std::string joined) {
  const int64_t at = UnixMs();
  StateChange change = [key, joined, at](ClusterState* st) -> Result<bool> {
    if (!st->job || st->job->id != key.job || st->epoch != key.epoch) return false;
    ++st->epoch;
    st->cause = {joined, at};
    return true;
  };
  Status s = co_await PlannedChange(joined, std::move(change), /*snapshot_enough=*/true);
  if (!s.ok()) LOG_WARN("grow the job ({}): {}", joined, s.ToString());
  grow_pending_ = false;
  Wake();
}

asio::awaitable<void> Node::CheckpointBeforeLeaving(Deadline deadline) {
  const uint64_t self = static_cast<uint64_t>(config_.id);
  const bool in_plan = running_ && running_lead_ != 0 &&
                       std::any_of(running_nodes_.begin(), running_nodes_.end(),
                                   [self](const elastic::NodeSlots& n) { return n.id == self; });
  if (!in_plan) {
    LOG_INFO("node {} stops: it runs no part of the job; leaving at once", self);
    co_return;
  }
  const std::string why = "node " + std::to_string(self) + " stops";
  Result<int64_t> saved = co_await CheckpointFirst(why, deadline);
  if (saved.ok()) {
    LOG_INFO("node {} stops: checkpoint of step {} committed; leaving", self, *saved);
  } else {
    LOG_WARN(
        "node {} stops: no checkpoint first ({}); the next generation resumes from the "
        "newest committed checkpoint",
        self, saved.status().ToString());
  }
}

asio::awaitable<Status> Node::RecordCommitted(std::string generation, int64_t step,
                                              std::string snapshot_in) {
  CO_ASSIGN_OR_RETURN(ClusterState state, DecodeClusterState(membership_->CurrentState().blob));
  if (!state.job) co_return FailedPrecondition("no job");
  CO_ASSIGN_OR_RETURN(std::string uri, CheckpointDir(*state.job));
  const bool snapshot = !snapshot_in.empty();
  if (snapshot) uri = std::move(snapshot_in);
  const Committed committed{generation, step, uri};
  StateChange change = [committed](ClusterState* st) -> Result<bool> {
    if (st->committed == committed) return false;
    st->committed = committed;
    return true;
  };
  CO_RETURN_IF_ERROR(co_await UpdateState(std::move(change)));
  LOG_INFO("generation {}: stopped after step {}, its {} committed in {}", generation, step,
           snapshot ? "memory snapshot" : "checkpoint", uri);
  co_return Status();
}

asio::awaitable<void> Node::WatchStoppedGeneration(GenerationKey key) {
  asio::steady_timer idle(io_);
  idle.expires_after(kStoppedIdleLimit);
  co_await idle.async_wait(asio::as_tuple(asio::use_awaitable));
  if (stopping_ || !running_ || !(*running_ == key)) co_return;
  const std::string what =
      "generation " + key.ToString() + " stopped for a planned change that did not follow";
  LOG_WARN("{}: restarting it", what);
  const int64_t at = UnixMs();
  StateChange change = [key, what, at](ClusterState* st) -> Result<bool> {
    if (!st->job || st->job->id != key.job || st->epoch != key.epoch) return false;
    ++st->epoch;
    st->cause = {what, at};
    st->stop_at.reset();
    return true;
  };
  Status s = co_await UpdateState(std::move(change));
  if (!s.ok()) LOG_WARN("{}: {}", what, s.ToString());
}

asio::awaitable<Result<Json>> Node::HandleCheckpoint(Json) {
  const std::string why = "ringctl checkpoint";
  const Deadline deadline = Deadline::After(kPlannedStopTimeout);
  CO_ASSIGN_OR_RETURN(const ClusterState before,
                      DecodeClusterState(membership_->CurrentState().blob));
  CO_ASSIGN_OR_RETURN(const int64_t step, co_await CheckpointFirst(why, deadline));
  // The ranks stopped at `step`: a new epoch resumes from that checkpoint at once (unless a
  // change that came meanwhile already began one).
  const int64_t at = UnixMs();
  const uint64_t epoch = before.epoch;
  StateChange change = [step, at, epoch](ClusterState* st) -> Result<bool> {
    if (!st->job || st->job->desire != JobDesire::kRun || st->epoch != epoch) return false;
    ++st->epoch;
    st->cause = {"ringctl checkpoint (step " + std::to_string(step) + ")", at};
    st->stop_at.reset();
    return true;
  };
  CO_RETURN_IF_ERROR(co_await UpdateState(std::move(change)));
  CO_ASSIGN_OR_RETURN(ClusterState state, DecodeClusterState(membership_->CurrentState().blob));
  co_return Json{{"step", step}, {"uri", state.committed ? state.committed->uri : ""}};
}

asio::awaitable<Result<Json>> Node::HandleCheckpoints(Json) {
  CO_ASSIGN_OR_RETURN(ClusterState state, DecodeClusterState(membership_->CurrentState().blob));
  if (!state.job) co_return FailedPrecondition("no job has been submitted");
  CO_ASSIGN_OR_RETURN(elastic::JobSpec spec,
                      elastic::ParseJobSpec(state.job->text, "job " + state.job->name));
  if (spec.run.ckpt.dir.empty())
    co_return FailedPrecondition("job " + state.job->name + " has no ckpt.dir");
  CO_ASSIGN_OR_RETURN(const std::string uri, ResolveStoreUri(spec.run.ckpt.dir));
  // Storage I/O runs off the io thread. (std::optional: co_spawn's result must be
  // default-constructible, Result is not. The lambda is named and moved: GCC 12 destroys
  // temporaries of a co_await expression twice.)
  ckpt::StorageOptions options;
  options.secret = secret_;  // the cluster secret of a ringfs:// ckpt.dir
  auto list = [uri, options]() -> asio::awaitable<std::optional<Result<Json>>> {
    co_return ListCheckpoints(uri, options);
  };
  std::optional<Result<Json>> listed =
      co_await asio::co_spawn(blocking_.get_executor(), std::move(list), asio::use_awaitable);
  if (!listed->ok()) co_return listed->status().WithContext("list the checkpoints in " + uri);
  co_return Json{{"job", state.job->name}, {"uri", uri}, {"checkpoints", std::move(**listed)}};
}

}  // namespace rt::daemon
