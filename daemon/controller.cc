// The daemon's controller: from (view, replicated state) to this node's worker processes.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <toml++/toml.h>

#include "base/deadline.h"
#include "base/log.h"
#include "base/subprocess.h"
#include "daemon/embedded_store.h"
#include "daemon/node.h"
#include "daemon/worker.h"
#include "elastic/job.h"

namespace rt::daemon {
namespace {

constexpr auto kReconcilePeriod = std::chrono::seconds(1);
constexpr auto kKillWait = std::chrono::seconds(10);
constexpr auto kFarFuture = std::chrono::hours(24);
// How long a worker failure caused by a lost peer waits for the view without that peer's node
// before it starts a new epoch (the ring reports a dead node within ~0.3-0.5 s).
constexpr auto kPeerLossGrace = std::chrono::seconds(1);
// How long a new worker may take to send its first heartbeat (a process start on a loaded
// machine) before [worker] hang_ms applies.
constexpr auto kFirstHeartbeatLimit = std::chrono::seconds(30);
// A heartbeat check this late means the daemon itself did not run meanwhile (it was stopped,
// or its loop held): it could not hear the heartbeats either, so it starts counting anew.
constexpr auto kHeartbeatCheckLate = std::chrono::milliseconds(500);
// The longest pause before the next epoch when generation after generation fails before its
// first step (RestartPause).
constexpr auto kMaxRestartPause = std::chrono::seconds(30);

// The pause before the epoch that follows the `failures`-th generation in a row to fail before
// its first step: none for the first (a recovery starts at once), then 1 s, doubling up to
// kMaxRestartPause.
std::chrono::milliseconds RestartPause(int failures) {
  if (failures < 2) return std::chrono::milliseconds(0);
  const std::chrono::milliseconds pause(1000LL << std::min(failures - 2, 5));
  return std::min<std::chrono::milliseconds>(pause, kMaxRestartPause);
}

// The message of the newest error line (level E) among the last 4 KiB of a worker's log
// (spdlog lines "YYYY-MM-DD HH:MM:SS.mmm E worker[PID] MESSAGE"), at most 300 characters; ""
// when there is none. What a failed worker said last, for its failure's cause.
std::string LastErrorOfLog(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  std::istringstream lines(tail);
  std::string message;
  for (std::string line; std::getline(lines, line);) {
    const size_t named = line.find("] ");
    if (line.size() > 26 && line[23] == ' ' && line[24] == 'E' && line[25] == ' ' &&
        named != std::string::npos)
      message = line.substr(named + 2, 300);
  }
  return message;
}

// The run config a worker reads: the job's TOML without [job] and [elastic], with the plan's
// micro-batch count and a ringfs:/// ckpt.dir resolved to `store`, this node's chunk server.
// (toml++ writes it back; values keep their exact text representation.)
Result<std::string> WorkerRunConfig(const std::string& job_text, const std::string& source,
                                    int micro_batches, const std::string& store) {
  toml::table table;
  try {
    table = toml::parse(job_text, source);
  } catch (const toml::parse_error& e) {
    return InvalidArgument(source + ": " + std::string(e.description()));
  }
  table.erase("job");
  table.erase("elastic");
  if (!table.contains("train")) table.insert("train", toml::table{});
  toml::table* train = table["train"].as_table();
  if (train == nullptr) return InvalidArgument(source + ": [train] is not a table");
  train->insert_or_assign("micro_batches", static_cast<int64_t>(micro_batches));
  if (const toml::node* dir = table.at_path("ckpt.dir").node(); dir && dir->is_string()) {
    ASSIGN_OR_RETURN(std::string resolved, ResolveLocalStore(**dir->as_string(), store));
    table["ckpt"].as_table()->insert_or_assign("dir", resolved);
  }
  std::ostringstream out;
  out << table << "\n";
  return out.str();
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return ErrnoStatus(errno, "write " + path);
  return Status();
}

std::string Join(const std::vector<uint64_t>& ids) {
  std::string s;
  for (uint64_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

}  // namespace

void Node::Wake() {
  dirty_ = true;
  wake_.cancel();
}

void Node::ReleaseWatchers() {
  if (generation_over_) generation_over_->cancel();
}

std::vector<elastic::NodeSlots> Node::PlanNodes(const elastic::View& view,
                                                const ClusterState& state, bool joining) const {
  std::vector<elastic::NodeSlots> nodes;
  for (const elastic::Member& m : view.members) {
    const NodeEntry* entry = state.FindNode(m.id);
    if (entry == nullptr) continue;  // not registered yet: it joins a later epoch
    if (std::binary_search(state.drained.begin(), state.drained.end(), m.id)) continue;
    if (state.Plannable(*entry) == joining) continue;
    nodes.push_back({m.id, entry->slots});
  }
  return nodes;
}

bool Node::PlanGrows(const ClusterState& state, const std::vector<elastic::NodeSlots>& nodes,
                     const std::vector<elastic::NodeSlots>& joining) const {
  if (!plan_ || !state.job) return true;
  Result<elastic::JobSpec> spec = elastic::ParseJobSpec(state.job->text, "job " + state.job->name);
  if (!spec.ok()) return true;
  if (state.max_nodes > 0) spec->elastic.max_nodes = state.max_nodes;
  std::vector<elastic::NodeSlots> all = nodes;
  all.insert(all.end(), joining.begin(), joining.end());
  // Only a larger world or another layout is worth a planned stop: the same layout moved to
  // other nodes (the planner prefers the lowest ids, so a returning node 1 would take the job
  // back) gains nothing.
  Result<elastic::JobPlan> plan = elastic::PlanJob(all, *spec);
  return plan.ok() &&
         (plan->layout.world() > plan_->layout.world() ||
          parallel::DescribeLayout(plan->layout) != parallel::DescribeLayout(plan_->layout));
}

asio::awaitable<void> Node::ReplanWithJoined(GenerationKey key, std::string joined) {
  const int64_t at = UnixMs();
  StateChange change = [key, joined, at](ClusterState* st) -> Result<bool> {
    if (!st->job || st->job->id != key.job || st->epoch != key.epoch) return false;
    ++st->epoch;
    st->cause = {"node(s) " + joined + " registered; the waiting job plans again", at};
    return true;
  };
  Status s = co_await UpdateState(std::move(change));
  if (!s.ok())
    LOG_WARN("plan the waiting job again (node(s) {} registered): {}", joined, s.ToString());
}

asio::awaitable<void> Node::ControlLoop() {
  workers_changed_ = std::make_shared<asio::steady_timer>(io_);
  while (!stopping_) {
    dirty_ = false;
    co_await Reconcile();
    if (stopping_ || dirty_) continue;
    wake_.expires_after(kReconcilePeriod);
    co_await wake_.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<void> Node::Reconcile() {
  const uint64_t self = static_cast<uint64_t>(config_.id);
  const elastic::View view = membership_->CurrentView();
  if (view.Contains(self)) FollowViewInStore(view);
  if (!view.Contains(self)) {
    if (!workers_.empty()) co_await StopWorkers("this node is not in the view");
    running_.reset();
    plan_text_ = view.generation == 0 ? "joining the cluster" : "not a member of the view";
    co_return;
  }
  const elastic::ReplicatedState replicated = membership_->CurrentState();
  Result<ClusterState> decoded = DecodeClusterState(replicated.blob);
  if (!decoded.ok()) {
    LOG_ERROR("replicated state version {}: {}", replicated.version, decoded.status().ToString());
    co_await StopWorkers("the replicated state does not decode");
    co_return;
  }
  const ClusterState& state = *decoded;
  // Register this node (slots, rendezvous address) once, or again after a change.
  const NodeEntry me{self, config_.slots, rendezvous_address_};
  const NodeEntry* registered = state.FindNode(self);
  if (registered == nullptr || !registered->SameRegistration(me)) {
    // A new node starts no epoch: the epoch's plans leave it out (joined_epoch), a running job
    // grows to include it after a planned stop (GrowAfterCheckpoint), a waiting job plans again
    // in a new epoch at once (ReplanWithJoined). A restarted one does (ClusterState::Register).
    const int64_t at = UnixMs();
    StateChange change = [me, at](ClusterState* st) -> Result<bool> {
      return st->Register(me, at);
    };
    Status s = co_await UpdateState(std::move(change));
    if (!s.ok()) LOG_WARN("register node {}: {}", self, s.ToString());
    co_return;  // the state changed: reconcile again on its notification
  }
  if (!state.job || state.job->desire != JobDesire::kRun) {
    if (!workers_.empty()) co_await StopWorkers("the job is not running");
    running_.reset();
    plan_text_ = !state.job ? "no job"
                            : "job " + state.job->name + " " +
                                  std::string(JobDesireName(state.job->desire)) +
                                  (state.job->desire == JobDesire::kFinished
                                       ? " at step " + std::to_string(state.job->finished_step)
                                       : "");
    co_return;
  }
  const GenerationKey key{state.job->id, view.generation, state.epoch};
  const std::vector<elastic::NodeSlots> nodes = PlanNodes(view, state);
  const std::vector<elastic::NodeSlots> joining = PlanNodes(view, state, /*joining=*/true);
  auto has = [](const std::vector<elastic::NodeSlots>& set, const elastic::NodeSlots& n) {
    return std::any_of(set.begin(), set.end(), [&n](const elastic::NodeSlots& m) {
      return m.id == n.id && m.slots == n.slots;
    });
  };
  std::string joined;  // members the running plan does not use that the next epoch's may
  for (const std::vector<elastic::NodeSlots>* set : {&nodes, &joining})
    for (const elastic::NodeSlots& n : *set)
      if (!has(running_nodes_, n)) joined += (joined.empty() ? "" : ",") + std::to_string(n.id);
  if (running_ && running_->job == key.job && running_->epoch == key.epoch && running_lead_ == 0) {
    // The job waits for nodes: it plans again in a new view, or in a new epoch when nodes
    // registered during this one.
    if (!joining.empty()) {
      std::string ids;
      for (const elastic::NodeSlots& n : joining)
        ids += (ids.empty() ? "" : ",") + std::to_string(n.id);
      co_await ReplanWithJoined(key, std::move(ids));
      co_return;
    }
    if (*running_ == key) co_return;
  } else if (running_ && running_->job == key.job && running_->epoch == key.epoch) {
    // A view change or a registration within one epoch: the generation goes on while its
    // plan's nodes are unchanged (a node outside the plan came or went); nodes that joined are
    // taken in after a planned stop, which the daemon of rank 0 starts.
    bool kept = PlanProcessesIn(view);
    for (const elastic::NodeSlots& n : running_nodes_) kept = kept && has(nodes, n);
    kept = kept && nodes.size() >= running_nodes_.size();
    if (kept && joined.empty()) co_return;
    if (kept) {
      if (running_lead_ == self && !grow_pending_ && PlanGrows(state, nodes, joining)) {
        grow_pending_ = true;
        asio::co_spawn(io_, GrowAfterCheckpoint(*running_, "node(s) " + joined + " joined"),
                       asio::detached);
      }
      co_return;
    }
    if (*running_ == key) co_return;  // one start per generation: a failure makes a new epoch
  }
  Status s = co_await StartGeneration(view, state, key);
  if (!s.ok()) LOG_ERROR("generation {}: {}", key.ToString(), s.ToString());
}

asio::awaitable<Status> Node::StartGeneration(const elastic::View& view, const ClusterState& state,
                                              GenerationKey key) {
  const uint64_t self = static_cast<uint64_t>(config_.id);
  // A new epoch says why in the state; otherwise the view changed.
  const std::string cause =
      running_ && running_->epoch == key.epoch && running_->view != key.view
          ? "view " + std::to_string(key.view) + " (members " + Join(view.Ids()) + ")"
          : state.cause.what;
  const std::string recovery_label = RecoveryLabel(key, view, state);
  std::string why = "generation " + key.ToString() + " starts";
  if (!workers_.empty()) co_await StopWorkers(std::move(why));
  if (generation_over_) generation_over_->cancel();
  generation_over_ = std::make_shared<asio::steady_timer>(io_);
  generation_over_->expires_after(kFarFuture);
  running_ = key;
  running_nodes_.clear();
  running_members_.clear();
  running_lead_ = 0;
  progress_.reset();
  plan_.reset();
  const JobEntry& job = *state.job;
  Result<elastic::JobSpec> spec = elastic::ParseJobSpec(job.text, "job " + job.name);
  if (!spec.ok()) {
    plan_text_ = "job does not parse: " + spec.status().ToString();
    co_return spec.status();
  }
  if (state.max_nodes > 0) spec->elastic.max_nodes = state.max_nodes;
  const std::vector<elastic::NodeSlots> nodes = PlanNodes(view, state);
  running_nodes_ = nodes;
  running_members_ = view.members;
  Result<elastic::JobPlan> plan = elastic::PlanJob(nodes, *spec);
  if (!plan.ok()) {
    plan_text_ = "waiting: " + plan.status().ToString();
    LOG_WARN("generation {}: job {} waits: {}", key.ToString(), job.name, plan.status().ToString());
    co_return Status();
  }
  plan_text_ = plan->Describe();
  plan_ = *plan;
  running_lead_ = plan->ranks[0].node;
  const NodeEntry* lead = state.FindNode(plan->ranks[0].node);
  const std::string job_dir = config_.state_dir + "/jobs/" + job.name + "-" + key.ToString();
  std::vector<int> mine;
  for (size_t r = 0; r < plan->ranks.size(); ++r)
    if (plan->ranks[r].node == self) mine.push_back(static_cast<int>(r));
  LOG_INFO("generation {}: {}; this node runs rank(s) {}", key.ToString(), plan_text_, [&] {
    std::string s;
    for (int r : mine) s += (s.empty() ? "" : ",") + std::to_string(r);
    return s.empty() ? std::string("none") : s;
  }());
  if (plan->ranks[0].node == self) {
    recovery_cause_ = cause;
    recovery_label_ = recovery_label;
    generation_started_ = MonoClock::now();
    recovery_logged_ = false;
  }
  if (mine.empty()) co_return Status();
  std::error_code ec;
  std::filesystem::create_directories(job_dir, ec);
  if (ec) co_return Status(StatusCode::kIoError, "create " + job_dir + ": " + ec.message());
  CO_ASSIGN_OR_RETURN(std::string run_config, WorkerRunConfig(job.text, "job " + job.name,
                                                              plan->micro_batches, store_address_));
  CO_RETURN_IF_ERROR(WriteText(job_dir + "/run.toml", run_config));
  for (int r : mine) {
    Status spawned = SpawnWorker(*plan, r, key, job_dir, lead->rendezvous);
    if (!spawned.ok()) {
      // Treated like a worker death: the others cannot train without this rank.
      auto dead = std::make_shared<Worker>();
      dead->rank = r;
      dead->generation = key;
      const ChildExit not_started{true, 127, 0};
      co_await OnWorkerFailed(dead, not_started);
      co_return spawned;
    }
  }
  co_return Status();
}

Status Node::SpawnWorker(const elastic::JobPlan& plan, int rank, const GenerationKey& key,
                         const std::string& job_dir, const std::string& rendezvous) {
  auto listen = SplitHostPort(config_.listen, "node.listen");
  const std::string host = listen->first == "0.0.0.0" ? "127.0.0.1" : listen->first;
  auto worker = std::make_shared<Worker>();
  worker->rank = rank;
  worker->slot = plan.ranks[static_cast<size_t>(rank)].slot;
  worker->generation = key;
  worker->log_path = job_dir + "/rank-" + std::to_string(rank) + ".log";
  SpawnOptions o;
  o.argv = {options_.executable,
            "worker",
            "--daemon",
            host + ":" + std::to_string(port_),
            "--generation",
            key.ToString(),
            "--config",
            job_dir + "/run.toml",
            "--layout",
            parallel::DescribeLayout(plan.layout),
            "--ranks",
            std::to_string(plan.layout.world()),
            "--rank",
            std::to_string(rank),
            "--gpu",
            std::to_string(worker->slot),
            "--store",
            rendezvous,
            "--job",
            "gen-" + key.ToString()};
  if (!config_.secret_file.empty())
    o.argv.insert(o.argv.end(), {"--secret-file", config_.secret_file});
  for (std::string& arg : net::TlsArguments(config_.tls)) o.argv.push_back(std::move(arg));
  o.env = EnvironmentWithout({});
  for (const std::string& e : SplitCommaList(config_.worker_env)) o.env.push_back(e);
  o.env.push_back("RINGTRAIN_SLOT=" + std::to_string(worker->slot));
  o.stdout_path = worker->log_path;
  o.nice = config_.worker_nice;
  const double spawning = MonoSeconds();
  ASSIGN_OR_RETURN(worker->process, ChildProcess::Spawn(io_.get_executor(), std::move(o)));
  LOG_INFO("generation {}: rank {} on slot {} started in {:.3f} s (pid {}, log {})", key.ToString(),
           rank, worker->slot, MonoSeconds() - spawning, worker->process->pid(), worker->log_path);
  workers_[rank] = worker;
  NoteWorkerStarted(key);
  worker->heard = MonoClock::now();
  asio::co_spawn(io_, Supervise(worker), asio::detached);
  if (config_.worker_hang_ms > 0) asio::co_spawn(io_, WatchHeartbeats(worker), asio::detached);
  return Status();
}

asio::awaitable<void> Node::WatchHeartbeats(std::shared_ptr<Worker> worker) {
  const std::chrono::milliseconds hang(config_.worker_hang_ms);
  asio::steady_timer tick(io_);
  MonoTime due = MonoClock::now() + kWorkerHeartbeatPeriod;
  while (true) {
    tick.expires_at(due);
    co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    auto it = workers_.find(worker->rank);
    if (stopping_ || worker->stopping || it == workers_.end() || it->second != worker) co_return;
    const MonoTime now = MonoClock::now();
    if (now - due > kHeartbeatCheckLate) worker->heard = now;
    due = now + kWorkerHeartbeatPeriod;
    const auto limit =
        worker->heard_once ? hang : std::max<std::chrono::milliseconds>(hang, kFirstHeartbeatLimit);
    if (now - worker->heard <= limit) continue;
    worker->frozen = true;
    LOG_WARN(
        "generation {}: rank {} (pid {}) sent no heartbeat for {:.1f} s (stopped or frozen): "
        "killing it",
        worker->generation.ToString(), worker->rank, worker->process->pid(),
        std::chrono::duration<double>(now - worker->heard).count());
    (void)worker->process->Signal(SIGKILL);
    co_return;
  }
}

asio::awaitable<void> Node::Supervise(std::shared_ptr<Worker> worker) {
  Result<ChildExit> exit = Aborted("not awaited");
  do {
    exit = co_await worker->process->Wait(Deadline::After(kFarFuture));
  } while (!exit.ok() && exit.status().code() == StatusCode::kDeadlineExceeded);
  auto it = workers_.find(worker->rank);
  if (it != workers_.end() && it->second == worker) workers_.erase(it);
  workers_changed_->cancel();
  if (!exit.ok()) {
    LOG_ERROR("rank {}: {}", worker->rank, exit.status().ToString());
    co_return;
  }
  const bool current = running_ && *running_ == worker->generation;
  if (worker->stopping || !current || stopping_) {
    LOG_INFO("generation {}: rank {} stopped ({})", worker->generation.ToString(), worker->rank,
             exit->Describe());
    co_return;
  }
  if (exit->exited && exit->exit_code == kWorkerStoppedExit) {
    LOG_INFO("generation {}: rank {} stopped for a planned change", worker->generation.ToString(),
             worker->rank);
    if (worker->rank == 0) co_await WatchStoppedGeneration(worker->generation);
    co_return;
  }
  if (exit->ok()) {
    LOG_INFO("generation {}: rank {} finished", worker->generation.ToString(), worker->rank);
    if (worker->rank != 0) co_return;
    const GenerationKey key = worker->generation;
    const int64_t step = last_step_;
    StateChange change = [key, step](ClusterState* st) -> Result<bool> {
      if (!st->job || st->job->id != key.job || st->job->desire != JobDesire::kRun) return false;
      st->job->desire = JobDesire::kFinished;
      st->job->finished_step = step;
      return true;
    };
    Status s = co_await UpdateState(std::move(change));
    if (!s.ok()) LOG_WARN("mark the job finished: {}", s.ToString());
    co_return;
  }
  co_await OnWorkerFailed(worker, *exit);
}

bool Node::PlanProcessesIn(const elastic::View& view) const {
  auto incarnation = [](const std::vector<elastic::Member>& members, uint64_t id) {
    for (const elastic::Member& m : members)
      if (m.id == id) return std::optional<uint64_t>(m.incarnation);
    return std::optional<uint64_t>();
  };
  for (const elastic::NodeSlots& n : running_nodes_) {
    const std::optional<uint64_t> now = incarnation(view.members, n.id);
    if (!now || *now != incarnation(running_members_, n.id).value_or(0)) return false;
  }
  return true;
}

asio::awaitable<void> Node::OnWorkerFailed(std::shared_ptr<Worker> worker, const ChildExit& exit) {
  const GenerationKey key = worker->generation;
  const std::string said = LastErrorOfLog(worker->log_path);
  const std::string what =
      "worker rank " + std::to_string(worker->rank) + " on node " + std::to_string(config_.id) +
      " exited: " + exit.Describe() +
      (worker->frozen ? " (killed: no heartbeat for worker.hang_ms, stopped or frozen)" : "") +
      (said.empty() ? "" : " (" + said + ")");
  LOG_WARN("generation {}: {}", key.ToString(), what);
  // A worker often fails because a node of its plan died (its peers see the connection close),
  // at about the time the membership removes that node. The view change starts the next
  // generation by itself; a new epoch on top of it would start yet another one. So the failure
  // starts a generation only while the generation is this node's and the view still holds every
  // node of its plan as the same process (the rule Reconcile keeps a generation going by).
  auto superseded = [this, key] {
    return !running_ || *running_ != key || !PlanProcessesIn(membership_->CurrentView());
  };
  // A worker that lost a peer waits (at most kPeerLossGrace) for the view that removes the node.
  if (exit.exited && exit.exit_code == kWorkerPeerLostExit) {
    asio::steady_timer poll(io_);
    for (const MonoTime until = MonoClock::now() + kPeerLossGrace;
         !superseded() && !stopping_ && MonoClock::now() < until;) {
      poll.expires_after(std::chrono::milliseconds(20));
      co_await poll.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }
  // A generation that fails before its first step time after time (the job cannot start, its
  // checkpoint store is down) is restarted after a growing pause, not in a tight loop.
  const std::string generation = key.ToString();
  const bool stepped = (progress_ && progress_->generation == generation) ||
                       (peer_progress_ && peer_progress_->generation == generation);
  if (!superseded() && counted_failure_ != key) {  // once per generation, not per rank
    counted_failure_ = key;
    quick_failures_ = stepped ? 0 : quick_failures_ + 1;
  }
  if (const auto pause = RestartPause(quick_failures_); pause.count() > 0 && !superseded()) {
    LOG_WARN(
        "generation {}: {} generations in a row failed before their first step; the next "
        "epoch starts in {:.1f} s",
        generation, quick_failures_, std::chrono::duration<double>(pause).count());
    asio::steady_timer poll(io_);
    for (const MonoTime until = MonoClock::now() + pause;
         !superseded() && !stopping_ && MonoClock::now() < until;) {
      poll.expires_after(std::chrono::milliseconds(50));
      co_await poll.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    if (stopping_) co_return;
  }
  if (superseded()) {
    LOG_INFO("generation {}: a newer generation or view supersedes it; no new epoch for {}",
             key.ToString(), what);
    Wake();
    co_return;
  }
  // A new epoch restarts every node's workers; only the first daemon to see a failure of this
  // generation bumps it (the others find the epoch already moved on).
  const int64_t at = UnixMs();
  StateChange change = [key, what, at, superseded](ClusterState* st) -> Result<bool> {
    if (!st->job || st->job->id != key.job || st->epoch != key.epoch) return false;
    if (superseded()) return false;
    ++st->epoch;
    st->cause = {what, at};
    return true;
  };
  Status s = co_await UpdateState(std::move(change));
  if (!s.ok()) LOG_WARN("propose a new epoch after {}: {}", what, s.ToString());
  Wake();
}

asio::awaitable<void> Node::StopWorkers(std::string why) {
  if (workers_.empty()) co_return;
  LOG_INFO("stopping {} worker(s): {}", workers_.size(), why);
  ReleaseWatchers();
  for (auto& [rank, w] : workers_) {
    w->stopping = true;
    Status s = w->process->Signal(SIGTERM);
    if (!s.ok()) LOG_WARN("rank {}: {}", rank, s.ToString());
  }
  const auto wait_until = [this](MonoTime until) -> asio::awaitable<void> {
    while (!workers_.empty() && MonoClock::now() < until) {
      workers_changed_->expires_at(until);
      co_await workers_changed_->async_wait(asio::as_tuple(asio::use_awaitable));
    }
  };
  co_await wait_until(MonoClock::now() + std::chrono::milliseconds(config_.stop_grace_ms));
  for (auto& [rank, w] : workers_) (void)w->process->Signal(SIGKILL);
  co_await wait_until(MonoClock::now() + kKillWait);
  if (!workers_.empty()) LOG_ERROR("{} worker(s) did not exit after SIGKILL", workers_.size());
}

}  // namespace rt::daemon
