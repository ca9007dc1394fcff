// The daemon's face to operators' tools: the HTTP listener (/metrics, the status page and its
// /api/status JSON), the metric catalogue's values, and the systemd notifications (READY=1,
// STATUS=, WATCHDOG=1, STOPPING=1). docs/operations.md says what each promises.
#include <algorithm>
#include <map>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/log.h"
#include "base/version.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "ckpt/storage.h"
#include "daemon/node.h"
#include "daemon/web/status_page.h"
#include "elastic/job.h"

namespace rt::daemon {
namespace {

constexpr auto kObservePeriod = std::chrono::seconds(1);
constexpr auto kPeerProgressTimeout = std::chrono::milliseconds(1500);
constexpr auto kCheckpointListPeriod = std::chrono::seconds(5);
constexpr size_t kMaxRecoveries = 20;

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Json LayoutJson(const parallel::ParallelLayout& l) {
  return {{"pp", l.pp},
          {"dp_replicate", l.dp_replicate},
          {"dp_shard", l.dp_shard},
          {"tp", l.tp},
          {"world", l.world()},
          {"zero", l.zero}};
}

}  // namespace

Status Node::StartWeb() {
  ASSIGN_OR_RETURN(metrics_, web::RegisterNodeMetrics(metrics_registry_));
  notifier_ = SystemdNotifier::Create(io_.get_executor());
  if (config_.http_listen.empty()) return Status();
  ASSIGN_OR_RETURN(auto listen, SplitHostPort(config_.http_listen, "http.listen"));
  net::HttpServerOptions options;
  options.bind_address = listen.first;
  options.port = listen.second;
  options.name = "ringtraind node " + std::to_string(config_.id) + " http";
  http_ = net::HttpServer::Create(io_.get_executor(), options);
  web::ServeMetrics(*http_, metrics_registry_);
  web::RegisterStatusPage(*http_, [this] { return StatusPageJson(); });
  ASSIGN_OR_RETURN(http_port_, http_->Start());
  LOG_INFO("ringtraind node {}: /metrics and the status page on http://{}:{}/", config_.id,
           listen.first, http_port_);
  return Status();
}

void Node::StopWeb(Deadline deadline) {
  if (!http_) return;
  if (!thread_.joinable()) {  // the io thread never ran: nothing is being served
    http_->Abort();
    return;
  }
  Status s = http_->Shutdown(deadline);
  if (!s.ok()) LOG_WARN("stop: http: {}", s.ToString());
}

asio::awaitable<void> Node::ObserveLoop() {
  observe_wake_ = std::make_shared<asio::steady_timer>(io_);
  while (!stopping_) {
    Observe();
    const elastic::View view = membership_->CurrentView();
    co_await FetchPeerProgress(view);
    if (stopping_) break;
    co_await RefreshLastCheckpoint();
    if (stopping_) break;
    observe_wake_->expires_after(kObservePeriod);
    co_await observe_wake_->async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<void> Node::FetchPeerProgress(const elastic::View& view) {
  const uint64_t self = static_cast<uint64_t>(config_.id);
  if (!running_ || !plan_ || plan_->ranks.empty() || plan_->ranks[0].node == self) co_return;
  const uint64_t lead = plan_->ranks[0].node;
  const std::string generation = running_->ToString();
  for (const elastic::Member& m : view.members) {
    if (m.id != lead) continue;
    Result<Json> local = co_await CallJsonOnce(m.address, secret_, kCtlLocal, Json::object(),
                                               Deadline::After(kPeerProgressTimeout));
    if (!local.ok() || !local->contains("progress")) co_return;
    const Json& j = (*local)["progress"];
    if (j.value("generation", "") != generation || !running_ || running_->ToString() != generation)
      co_return;  // an older generation's, or ours changed meanwhile
    Progress p;
    p.generation = generation;
    p.step = j.value("step", int64_t{0});
    p.loss = j.value("loss", 0.0);
    p.tokens_per_s = j.value("tokens_per_s", 0.0);
    p.unix_ms = j.value("unix_ms", int64_t{0});
    if (peer_progress_ && peer_progress_->generation == generation &&
        peer_progress_->step == p.step)
      co_return;
    peer_progress_ = p;
    NoteProgress(p);
  }
}

asio::awaitable<void> Node::RefreshLastCheckpoint() {
  if (!running_ || MonoClock::now() < next_checkpoint_list_) co_return;
  next_checkpoint_list_ = MonoClock::now() + kCheckpointListPeriod;
  Result<ClusterState> state = DecodeClusterState(membership_->CurrentState().blob);
  if (!state.ok() || !state->job) co_return;
  Result<elastic::JobSpec> spec = elastic::ParseJobSpec(state->job->text, "job");
  if (!spec.ok() || spec->run.ckpt.dir.empty()) co_return;
  Result<std::string> resolved = ResolveStoreUri(spec->run.ckpt.dir);
  if (!resolved.ok()) co_return;
  const std::string dir = *resolved;
  // Storage calls block (a folder, or a ringfsd cluster): off the event loop. (co_spawn's
  // result must be default-constructible: a Status and the steps rather than a Result.)
  using Listing = std::pair<Status, std::vector<int64_t>>;
  ckpt::StorageOptions options;
  options.secret = secret_;  // the cluster secret of a ringfs:// ckpt.dir
  auto list = [dir, options]() -> asio::awaitable<Listing> {
    Result<std::shared_ptr<ckpt::Storage>> storage = ckpt::OpenStorage(dir, options);
    if (!storage.ok()) co_return Listing{storage.status(), {}};
    Result<std::vector<int64_t>> steps = ckpt::ListCommitted(**storage);
    if (!steps.ok()) co_return Listing{steps.status(), {}};
    co_return Listing{Status(), std::move(*steps)};
  };
  const Listing listing = co_await asio::co_spawn(blocking_, list, asio::use_awaitable);
  if (!listing.first.ok()) {
    LOG_DEBUG("list the checkpoints in {}: {}", dir, listing.first.ToString());
    co_return;
  }
  const std::vector<int64_t>& steps = listing.second;  // newest first
  if (steps.empty()) co_return;
  last_checkpoint_ = {steps.front(), dir + "/" + ckpt::StepDir(steps.front())};
  metrics_.checkpoint_last_step->Get().Set(static_cast<double>(steps.front()));
}

void Node::Observe() {
  const uint64_t self = static_cast<uint64_t>(config_.id);
  const elastic::View view = membership_->CurrentView();
  Result<ClusterState> state = DecodeClusterState(membership_->CurrentState().blob);
  metrics_.membership_members->Get().Set(static_cast<double>(view.members.size()));
  metrics_.membership_generation->Get().Set(static_cast<double>(view.generation));
  metrics_.workers_running->Get().Set(static_cast<double>(workers_.size()));
  if (state.ok()) metrics_.job_epoch->Get().Set(static_cast<double>(state->epoch));
  ObserveStore();
  if (!view.Contains(self) || stopping_) return;

  std::string line = "generation " + std::to_string(view.generation) + ", " +
                     std::to_string(view.members.size()) + " member(s)";
  if (state.ok() && state->job) {
    line += ", job " + state->job->name + " " + std::string(JobDesireName(state->job->desire));
    const std::optional<Progress>& p = progress_ ? progress_ : peer_progress_;
    if (running_ && p && p->generation == running_->ToString())
      line += ", training generation " + p->generation + " at step " + std::to_string(p->step);
  } else {
    line += ", no job";
  }
  if (!ready_sent_) {
    ready_sent_ = true;
    status_line_ = line;
    Status s = notifier_->Ready(line);
    if (!s.ok()) LOG_WARN("systemd READY=1: {}", s.ToString());
    LOG_INFO("ready: {}", line);
    return;
  }
  if (line == status_line_) return;
  status_line_ = line;
  Status s = notifier_->SetStatus(line);
  if (!s.ok()) LOG_WARN("systemd STATUS=: {}", s.ToString());
}

void Node::NoteProgress(const Progress& p) {
  metrics_.job_step->Get().Set(static_cast<double>(p.step));
  metrics_.job_loss->Get().Set(p.loss);
  metrics_.job_tokens_per_second->Get().Set(p.tokens_per_s);
  history_.Add({p.step, p.loss, p.tokens_per_s,
                p.unix_ms > 0 ? static_cast<double>(p.unix_ms) / 1000 : UnixSeconds()});
  Observe();
}

void Node::NoteFirstStep(const Progress& p, int64_t steps_lost, double seconds) {
  if (recovery_label_.empty()) return;
  metrics_.recoveries->With({recovery_label_}).Increment();
  metrics_.recovery_seconds->Get().Observe(seconds);
  metrics_.recovery_steps_lost->Get().Increment(static_cast<double>(steps_lost));
  RecoveryRecord r;
  r.time = UnixSeconds() - seconds;
  r.cause = recovery_label_;
  r.what = recovery_cause_;
  r.generation = p.generation;
  r.layout = plan_text_;
  r.steps_lost = steps_lost;
  r.recovery_s = seconds;
  recoveries_.push_front(std::move(r));
  if (recoveries_.size() > kMaxRecoveries) recoveries_.pop_back();
}

std::string Node::RecoveryLabel(const GenerationKey& key, const elastic::View& view,
                                const ClusterState& state) {
  const size_t members_before = generation_members_;
  generation_members_ = view.members.size();
  if (!running_ || running_->job != key.job) return "";  // the job starts (here)
  // The generation that ends saved a checkpoint in a planned stop (scale, drain, SIGTERM, ...).
  if (state.committed && state.committed->generation == running_->ToString())
    return web::kCausePlanned;
  if (running_->view != key.view)
    return view.members.size() < members_before ? web::kCauseNodeLost : web::kCausePlanned;
  if (state.cause.what.find(" exited") != std::string::npos) return web::kCauseWorkerExited;
  return web::kCausePlanned;
}

void Node::NoteWorkerCounters(const WorkerCounters& c) {
  auto tier = [](const parallel::CheckpointTransfer& t) -> std::vector<std::string> {
    return {t.memory ? web::kTierMemory : web::kTierStore};
  };
  for (const parallel::CheckpointTransfer& t : c.saves) {
    metrics_.checkpoint_saved_bytes->With(tier(t)).Increment(static_cast<double>(t.bytes));
    if (t.seconds >= 0) metrics_.checkpoint_save_seconds->With(tier(t)).Observe(t.seconds);
  }
  for (const parallel::CheckpointTransfer& t : c.failed)
    metrics_.checkpoint_failed_saves->With(tier(t)).Increment();
  for (const parallel::CheckpointTransfer& t : c.loads) {
    metrics_.checkpoint_loaded_bytes->With(tier(t)).Increment(static_cast<double>(t.bytes));
    if (t.seconds >= 0) metrics_.checkpoint_load_seconds->With(tier(t)).Observe(t.seconds);
  }
  for (const parallel::GroupBytes& g : c.comm) {
    metrics_.comm_sent_bytes->With({g.group}).Increment(static_cast<double>(g.sent));
    metrics_.comm_received_bytes->With({g.group}).Increment(static_cast<double>(g.received));
  }
}

void Node::NoteWorkerStarted(const GenerationKey& key) {
  const std::string generation = key.ToString();
  if (worker_generation_ != generation) {
    // Every worker of a later generation of the same job replaces one that ended.
    workers_restart_ = worker_job_ == key.job;
    worker_job_ = key.job;
    worker_generation_ = generation;
  }
  if (workers_restart_) metrics_.worker_restarts->Get().Increment();
}

Json Node::LocalMembersJson(const elastic::View& view, const ClusterState* state) const {
  std::map<uint64_t, Json> members;
  auto slots_of = [state](uint64_t id) -> Json {
    const NodeEntry* entry = state ? state->FindNode(id) : nullptr;
    return entry ? Json(entry->slots) : Json();
  };
  auto drained = [state](uint64_t id) {
    return state && std::binary_search(state->drained.begin(), state->drained.end(), id);
  };
  for (const elastic::Member& m : view.members)
    members[m.id] = {{"id", m.id},
                     {"address", m.address},
                     {"state", drained(m.id) ? "draining" : "up"},
                     {"slots", slots_of(m.id)}};
  if (state)
    for (const NodeEntry& n : state->nodes)
      if (!members.count(n.id))
        members[n.id] = {{"id", n.id}, {"address", ""}, {"state", "down"}, {"slots", n.slots}};
  if (running_ && plan_) {
    for (size_t r = 0; r < plan_->ranks.size(); ++r) {
      auto it = members.find(plan_->ranks[r].node);
      if (it != members.end()) it->second["ranks"].push_back(r);
    }
  }
  auto self = members.find(static_cast<uint64_t>(config_.id));
  if (self != members.end()) self->second["workers"] = workers_.size();
  Json out = Json::array();
  for (auto& [id, m] : members) out.push_back(std::move(m));
  return out;
}

Json Node::StatusPageJson() const {
  const elastic::View view = membership_->CurrentView();
  Result<ClusterState> state = DecodeClusterState(membership_->CurrentState().blob);
  const ClusterState* s = state.ok() ? &*state : nullptr;
  Json status = {{"version", 1},
                 {"node",
                  {{"id", config_.id},
                   {"address", config_.AdvertisedAddress()},
                   {"version", std::string(kRingtrainVersion)}}},
                 {"time", UnixSeconds()},
                 {"cluster",
                  {{"generation", view.generation},
                   {"epoch", s ? s->epoch : 0},
                   {"members", LocalMembersJson(view, s)}}},
                 {"job", nullptr},
                 {"recoveries", Json::array()},
                 {"checkpoints", Json::array()}};
  if (s && s->job) {
    const JobEntry& job = *s->job;
    const std::optional<Progress>& p = progress_ ? progress_ : peer_progress_;
    const bool current = running_ && p && p->generation == running_->ToString();
    std::string job_state = "starting";
    if (job.desire == JobDesire::kStop)
      job_state = "stopped";
    else if (job.desire == JobDesire::kFinished)
      job_state = "finished";
    else if (current)
      job_state = "running";
    else if (!history_.Points().empty())
      job_state = "recovering";
    Json j = {{"id", std::to_string(job.id)},
              {"name", job.name},
              {"state", job_state},
              {"step", p ? p->step : (job.desire == JobDesire::kFinished ? job.finished_step : 0)},
              {"loss", p ? Json(p->loss) : Json()},
              {"tokens_per_second", p ? Json(p->tokens_per_s) : Json()},
              {"history", history_.ToJson()}};
    if (running_ && plan_) j["layout"] = LayoutJson(plan_->layout);
    status["job"] = std::move(j);
  }
  if (last_checkpoint_)
    status["checkpoints"].push_back({{"step", last_checkpoint_->first},
                                     {"tier", web::kTierStore},
                                     {"uri", last_checkpoint_->second}});
  for (const RecoveryRecord& r : recoveries_)
    status["recoveries"].push_back({{"time", r.time},
                                    {"cause", r.cause},
                                    {"what", r.what},
                                    {"generation", r.generation},
                                    {"layout", r.layout},
                                    {"steps_lost", r.steps_lost},
                                    {"recovery_s", r.recovery_s}});
  return status;
}

}  // namespace rt::daemon
