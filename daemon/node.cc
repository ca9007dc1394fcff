#include "daemon/node.h"

#include <filesystem>
#include <fstream>
#include <future>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include "base/log.h"
#include "elastic/job.h"

namespace rt::daemon {
namespace {

using namespace asio::experimental::awaitable_operators;

constexpr auto kProposeTimeout = std::chrono::seconds(10);
constexpr int kCasAttempts = 20;

// Wraps a JSON handler as an RPC handler.
net::RpcHandler JsonHandler(std::function<asio::awaitable<Result<Json>>(Json)> handler,
                            std::string what) {
  return [handler = std::move(handler), what = std::move(what)](
             net::RpcRequest request) -> asio::awaitable<Result<std::vector<std::byte>>> {
    CO_ASSIGN_OR_RETURN(Json body, DecodeJsonObject(request.payload, what));
    CO_ASSIGN_OR_RETURN(Json reply, co_await handler(std::move(body)));
    co_return EncodeJson(reply);
  };
}

// The file under state_dir that keeps the rendezvous store's port for the next run.
constexpr const char* kRendezvousPortFile = "rendezvous.port";

// The rendezvous port this daemon's previous run used (0: none or unreadable). A restarted daemon
// binds it again, so its registration (which names it) stays valid: plans made from the entry
// its previous run registered still reach its rank 0.
uint16_t RememberedRendezvousPort(const std::string& state_dir) {
  std::ifstream in(state_dir + "/" + kRendezvousPortFile);
  unsigned port = 0;
  if (!(in >> port) || port > 65535) return 0;
  return static_cast<uint16_t>(port);
}

}  // namespace

std::string GenerationKey::ToString() const {
  return std::to_string(job) + "." + std::to_string(view) + "." + std::to_string(epoch);
}

Result<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  auto node = std::make_unique<Node>(std::move(options));
  RETURN_IF_ERROR(node->Init());
  return std::unique_ptr<Daemon>(std::move(node));
}

Node::Node(DaemonOptions options)
    : options_(std::move(options)), config_(options_.config), wake_(io_) {}

Node::~Node() {
  if (!stopped_) (void)Stop(/*leave=*/false, Deadline::AfterMs(10'000));
}

Status Node::Init() {
  const std::string name = "node " + std::to_string(config_.id);
  ASSIGN_OR_RETURN(secret_, net::ClusterSecret::LoadWithTls(config_.secret_file, config_.tls));
  ASSIGN_OR_RETURN(auto listen, SplitHostPort(config_.listen, "node.listen"));
  if (listen.second == 0)
    return InvalidArgument("node.listen '" + config_.listen +
                           "' needs a fixed port: the other members reach this node there");
  std::error_code ec;
  std::filesystem::create_directories(config_.state_dir + "/jobs", ec);
  if (ec) return Status(StatusCode::kIoError, "create " + config_.state_dir + ": " + ec.message());

  net::RpcServerOptions server_options;
  server_options.bind_address = listen.first;
  server_options.port = listen.second;
  server_options.secret = secret_;
  server_options.name = "ringtraind " + name;
  server_ = net::RpcServer::Create(io_.get_executor(), server_options);
  RegisterHandlers();
  SnapshotServiceOptions snapshot_options;
  snapshot_options.self = static_cast<uint64_t>(config_.id);
  snapshot_options.secret = secret_;
  snapshot_options.members = [this] {
    std::vector<SnapshotPeer> peers;
    for (const elastic::Member& m : membership_->CurrentView().members)
      peers.push_back({m.id, m.address});
    return peers;
  };
  snapshots_ = SnapshotService::Create(io_.get_executor(), std::move(snapshot_options));
  snapshots_->Register(*server_);
  RETURN_IF_ERROR(StartWeb());

  comm::TcpStoreServerOptions store_options;
  store_options.bind_address = config_.rendezvous_host;
  store_options.secret = secret_;
  store_options.port = RememberedRendezvousPort(config_.state_dir);
  Result<std::unique_ptr<comm::TcpStoreServer>> rendezvous =
      comm::TcpStoreServer::Start(store_options);
  if (!rendezvous.ok() && store_options.port != 0) {
    // Taken meanwhile: a new port, which this daemon registers (a new epoch if plans used it).
    LOG_WARN("rendezvous store: port {} of the previous run: {}; taking another",
             store_options.port, rendezvous.status().ToString());
    store_options.port = 0;
    rendezvous = comm::TcpStoreServer::Start(store_options);
  }
  if (!rendezvous.ok()) return rendezvous.status();
  rendezvous_ = std::move(*rendezvous);
  rendezvous_address_ = config_.rendezvous_host + ":" + std::to_string(rendezvous_->port());
  {
    std::ofstream out(config_.state_dir + "/" + kRendezvousPortFile, std::ios::trunc);
    out << rendezvous_->port() << "\n";
    if (!out) LOG_WARN("cannot keep the rendezvous port in {}", config_.state_dir);
  }
  RETURN_IF_ERROR(StartStore());

  elastic::MembershipServiceOptions m;
  m.node_id = static_cast<elastic::NodeId>(config_.id);
  m.listen = config_.listen;
  m.seeds = config_.SeedList();
  m.state_dir = config_.state_dir + "/membership";
  m.secret = secret_;
  m.server = server_;
  m.advertise = config_.AdvertisedAddress();
  m.timing = options_.timing;
  m.on_notification = [this](const elastic::MembershipNotification& n) {
    if (n.kind == elastic::MembershipNotification::Kind::kViewInstalled) {
      if (n.led) led_view_ = n.view.generation;
      std::lock_guard lock(installed_mutex_);
      installed_ = {n.view.generation, UnixMs()};
    }
    if (n.kind == elastic::MembershipNotification::Kind::kSuspected)
      LOG_WARN("{}: suspects node {} ({} ms after its last sign of life)", "membership", n.node,
               n.detected_after.count());
    asio::post(io_, [this] {
      Wake();
      if (observe_wake_) observe_wake_->cancel();
    });
  };
  if (config_.etcd.empty()) {
    ASSIGN_OR_RETURN(membership_, elastic::StartMembershipService(std::move(m)));
  } else {
    elastic::EtcdMembershipOptions etcd{config_.etcd, config_.etcd_prefix,
                                        std::chrono::seconds(config_.etcd_lease_s)};
    ASSIGN_OR_RETURN(membership_,
                     elastic::StartEtcdMembershipService(std::move(m), std::move(etcd)));
  }
  ASSIGN_OR_RETURN(port_, server_->Start());
  LOG_INFO("ringtraind {}: control and membership on {}, rendezvous store on {}, {} slot(s)", name,
           config_.AdvertisedAddress(), rendezvous_address_, config_.slots);
  asio::co_spawn(io_, ControlLoop(), asio::detached);
  asio::co_spawn(io_, ObserveLoop(), asio::detached);
  notifier_->StartWatchdog();
  thread_ = std::thread([this] { io_.run(); });
  return Status();
}

Status Node::Stop(bool leave, Deadline deadline) {
  if (stopped_.exchange(true)) return Status();
  if (notifier_) {
    notifier_->StopWatchdog();  // no WATCHDOG=1 after STOPPING=1
    Status s = notifier_->Stopping(leave ? "checkpointing, leaving the view, stopping the workers"
                                         : "stopping the workers");
    if (!s.ok()) LOG_WARN("systemd STOPPING=1: {}", s.ToString());
  }
  if (!thread_.joinable()) {  // Init failed before the io thread started
    StopWeb(deadline);
    if (membership_) (void)membership_->Shutdown(deadline);
    if (store_) (void)store_->Shutdown(deadline);
    if (rendezvous_) rendezvous_->Stop();
    return Status();
  }
  Status first;
  auto note = [&first](Status s, std::string_view what) {
    if (!s.ok()) {
      LOG_WARN("stop: {}: {}", what, s.ToString());
      if (first.ok()) first = s.WithContext(what);
    }
  };
  if (leave && membership_) {
    // Planned: checkpoint first (docs/daemon.md "Planned changes lose nothing"), then leave.
    const Deadline saved = deadline.Min(Deadline::After(deadline.Remaining() / 2));
    asio::co_spawn(io_, CheckpointBeforeLeaving(saved), asio::use_future).get();
  }
  // The last member has no view to leave (and systemd must not see that as a failure).
  if (leave && membership_ && membership_->CurrentView().members.size() > 1) {
    auto left = asio::co_spawn(
        io_,
        [this, deadline]() -> asio::awaitable<Status> {
          co_return co_await membership_->Leave(deadline);
        },
        asio::use_future);
    note(left.get(), "leave the view");
  }
  auto stopped = asio::co_spawn(
      io_,
      [this]() -> asio::awaitable<void> {
        stopping_ = true;
        Wake();
        if (observe_wake_) observe_wake_->cancel();
        co_await StopWorkers("the daemon stops");
        ReleaseWatchers();
        snapshots_->Close();
      },
      asio::use_future);
  stopped.get();
  StopWeb(deadline);
  if (membership_) note(membership_->Shutdown(deadline), "membership shutdown");
  if (server_) note(server_->Shutdown(deadline), "RPC server shutdown");
  if (store_) note(store_->Shutdown(deadline), "chunk store shutdown");
  if (rendezvous_) rendezvous_->Stop();
  io_.stop();
  if (thread_.joinable()) thread_.join();
  blocking_.join();
  LOG_INFO("ringtraind node {}: stopped", config_.id);
  return first;
}

void Node::RegisterHandlers() {
  server_->Handle(kCtlStatus, JsonHandler([this](Json) { return HandleStatus(); }, "status"));
  server_->Handle(
      kCtlLocal,
      JsonHandler([this](Json) -> asio::awaitable<Result<Json>> { co_return LocalReport(); },
                  "local status"));
  server_->Handle(kCtlSubmit,
                  JsonHandler([this](Json r) { return HandleSubmit(std::move(r)); }, "submit"));
  server_->Handle(kCtlStop,
                  JsonHandler([this](Json r) { return HandleStop(std::move(r)); }, "stop"));
  server_->Handle(kCtlScale,
                  JsonHandler([this](Json r) { return HandleScale(std::move(r)); }, "scale"));
  server_->Handle(kCtlDrain,
                  JsonHandler([this](Json r) { return HandleDrain(std::move(r)); }, "drain"));
  server_->Handle(
      kCtlCheckpoint,
      JsonHandler([this](Json r) { return HandleCheckpoint(std::move(r)); }, "checkpoint"));
  server_->Handle(
      kCtlCheckpoints,
      JsonHandler([this](Json r) { return HandleCheckpoints(std::move(r)); }, "checkpoints"));
  server_->Handle(
      kWorkerWatch,
      JsonHandler([this](Json r) { return HandleWorkerWatch(std::move(r)); }, "worker watch"));
  server_->Handle(kWorkerHeartbeat,
                  JsonHandler([this](Json r) { return HandleWorkerHeartbeat(std::move(r)); },
                              "worker heartbeat"));
  server_->Handle(
      kWorkerReport,
      JsonHandler([this](Json r) { return HandleWorkerReport(std::move(r)); }, "worker report"));
}

// The StateChange functions below are named locals moved into UpdateState, never temporaries
// in the co_await expression: GCC 12 destroys such temporaries twice.

asio::awaitable<Result<Json>> Node::HandleStop(Json) {
  StateChange change = [](ClusterState* s) -> Result<bool> {
    if (!s->job) return FailedPrecondition("no job to stop");
    if (s->job->desire != JobDesire::kRun) return false;
    s->job->desire = JobDesire::kStop;
    return true;
  };
  CO_RETURN_IF_ERROR(co_await UpdateState(std::move(change)));
  co_return Json::object();
}

asio::awaitable<Result<Json>> Node::HandleScale(Json request) {
  CO_ASSIGN_OR_RETURN(const int64_t nodes, IntField(request, "nodes", 0, 4096, "scale"));
  const int64_t at = UnixMs();
  const std::string why = "ringctl scale --nodes " + std::to_string(nodes);
  StateChange change = [nodes, at, why](ClusterState* s) -> Result<bool> {
    if (s->max_nodes == nodes) return false;
    s->max_nodes = static_cast<int>(nodes);
    ++s->epoch;
    s->cause = {why, at};
    return true;
  };
  CO_RETURN_IF_ERROR(co_await PlannedChange(why, std::move(change)));
  co_return Json::object();
}

asio::awaitable<Result<Json>> Node::HandleDrain(Json request) {
  CO_ASSIGN_OR_RETURN(const int64_t node, IntField(request, "node", 1, INT64_MAX, "drain"));
  CO_ASSIGN_OR_RETURN(const int64_t undrain, IntField(request, "undrain", 0, 1, "drain", 0));
  const int64_t at = UnixMs();
  const std::string why =
      std::string("ringctl ") + (undrain ? "undrain" : "drain") + " node " + std::to_string(node);
  StateChange change = [node, undrain, at, why](ClusterState* s) -> Result<bool> {
    auto& d = s->drained;
    const uint64_t id = static_cast<uint64_t>(node);
    auto it = std::lower_bound(d.begin(), d.end(), id);
    const bool present = it != d.end() && *it == id;
    if (present != static_cast<bool>(undrain)) return false;
    if (undrain) {
      d.erase(it);
    } else {
      d.insert(it, id);
    }
    ++s->epoch;
    s->cause = {why, at};
    return true;
  };
  CO_RETURN_IF_ERROR(co_await PlannedChange(why, std::move(change)));
  co_return Json::object();
}

asio::awaitable<Status> Node::UpdateState(StateChange change) {
  Status last;
  for (int attempt = 0; attempt < kCasAttempts; ++attempt) {
    const elastic::ReplicatedState current = membership_->CurrentState();
    CO_ASSIGN_OR_RETURN(ClusterState state, DecodeClusterState(current.blob));
    CO_ASSIGN_OR_RETURN(const bool changed, change(&state));
    if (!changed) co_return Status();
    Result<uint64_t> r = co_await membership_->ProposeState(
        current.version, EncodeClusterState(state), Deadline::After(kProposeTimeout));
    if (r.ok()) {
      // Apply locally at once; the notification follows.
      Wake();
      co_return Status();
    }
    last = r.status();
    if (last.code() != StatusCode::kFailedPrecondition) co_return last;
    // Someone changed the state first: wait until we know the newer version, then retry.
    (void)co_await membership_->AwaitState(
        [v = current.version](const elastic::ReplicatedState& s) { return s.version > v; },
        Deadline::AfterMs(2'000));
  }
  co_return last.WithContext("replicated state kept changing");
}

asio::awaitable<Result<Json>> Node::HandleSubmit(Json request) {
  CO_ASSIGN_OR_RETURN(std::string text, StringField(request, "text", "submit"));
  CO_ASSIGN_OR_RETURN(std::string source, StringField(request, "source", "submit", "job"));
  if (text.size() > kMaxClusterStateBytes / 2)
    co_return InvalidArgument(source + ": the job file is too large");
  // Refused here, before anything changes, when it does not parse.
  CO_ASSIGN_OR_RETURN(elastic::JobSpec spec, elastic::ParseJobSpec(text, source));
  // A ringfs:/// ckpt.dir needs the daemons' embedded chunk stores (this one's, at least).
  if (Result<std::string> dir = ResolveStoreUri(spec.run.ckpt.dir); !dir.ok())
    co_return dir.status().WithContext(source + ": ckpt.dir");
  uint64_t id = 0;
  const int64_t at = UnixMs();
  StateChange change = [&](ClusterState* s) -> Result<bool> {
    id = (s->job ? s->job->id : 0) + 1;
    s->job = JobEntry{id, spec.name, text, JobDesire::kRun, 0};
    ++s->epoch;
    s->cause = {"job " + spec.name + " submitted", at};
    return true;
  };
  CO_RETURN_IF_ERROR(co_await UpdateState(std::move(change)));
  LOG_INFO("job {} (id {}) submitted from {}", spec.name, id, source);
  co_return Json{{"job_id", id}, {"name", spec.name}};
}

asio::awaitable<Result<Json>> Node::HandleWorkerWatch(Json request) {
  CO_ASSIGN_OR_RETURN(std::string generation, StringField(request, "generation", "watch"));
  if (stopping_ || !running_ || running_->ToString() != generation) co_return Json{{"stop", true}};
  // generation_over_ never expires; it is cancelled when the generation ends, which wakes every
  // watcher of it. Otherwise the worker is told to keep waiting after a while (a new call).
  auto over = generation_over_;
  asio::steady_timer hold(io_);
  hold.expires_after(std::chrono::milliseconds(config_.worker_watch_hold_ms));
  auto r = co_await (over->async_wait(asio::as_tuple(asio::use_awaitable)) ||
                     hold.async_wait(asio::as_tuple(asio::use_awaitable)));
  const bool current = !stopping_ && running_ && running_->ToString() == generation;
  co_return Json{{"stop", r.index() == 0 || !current}};
}

asio::awaitable<Result<Json>> Node::HandleWorkerHeartbeat(Json request) {
  CO_ASSIGN_OR_RETURN(std::string generation, StringField(request, "generation", "heartbeat"));
  CO_ASSIGN_OR_RETURN(const int64_t rank, IntField(request, "rank", 0, INT32_MAX, "heartbeat"));
  auto it = workers_.find(static_cast<int>(rank));
  if (it != workers_.end() && it->second->generation.ToString() == generation) {
    it->second->heard = MonoClock::now();
    it->second->heard_once = true;
  }
  co_return Json::object();
}

asio::awaitable<Result<Json>> Node::HandleWorkerReport(Json r) {
  CO_ASSIGN_OR_RETURN(std::string generation, StringField(r, "generation", "report"));
  CO_ASSIGN_OR_RETURN(const WorkerCounters counters, ParseCounters(r));
  if (r.contains("step")) CO_RETURN_IF_ERROR(IntField(r, "step", 0, INT64_MAX, "report").status());
  // Counters count what this node's workers did, in whichever generation.
  NoteWorkerCounters(counters);
  if (!running_ || running_->ToString() != generation) co_return Json::object();  // stale
  // The other ranks report only counters.
  if (!r.contains("step") && !r.contains("stopped_at") && !r.contains("finished_at"))
    co_return Json::object();
  if (r.contains("stopped_at")) {
    CO_ASSIGN_OR_RETURN(const int64_t step, IntField(r, "stopped_at", 1, INT64_MAX, "report"));
    std::string snapshot_in;
    if (r.contains("snapshot_in")) {
      CO_ASSIGN_OR_RETURN(snapshot_in, StringField(r, "snapshot_in", "report"));
    }
    CO_RETURN_IF_ERROR(co_await RecordCommitted(generation, step, std::move(snapshot_in)));
    co_return Json::object();
  }
  if (r.contains("finished_at")) {  // rank 0's last word: the job's final step
    CO_ASSIGN_OR_RETURN(last_step_, IntField(r, "finished_at", 0, INT64_MAX, "report"));
    co_return Json::object();
  }
  Progress p;
  p.generation = generation;
  CO_ASSIGN_OR_RETURN(p.step, IntField(r, "step", 0, INT64_MAX, "report"));
  CO_ASSIGN_OR_RETURN(p.unix_ms, IntField(r, "unix_ms", 0, INT64_MAX, "report", 0));
  auto number = [&r](const char* key) {
    auto it = r.find(key);
    return it != r.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  p.loss = number("loss");
  p.tokens_per_s = number("tokens_per_s");
  p.first_unix_ms =
      progress_ && progress_->generation == generation ? progress_->first_unix_ms : p.unix_ms;
  if (!recovery_logged_) {
    recovery_logged_ = true;
    const double seconds =
        std::chrono::duration<double>(MonoClock::now() - generation_started_).count();
    // The last step rank 0 reported before: here, or (when rank 0 ran on another node since)
    // as this node last fetched it from that node, whichever report is newer.
    int64_t before = last_step_;
    std::string where = "here";
    if (peer_progress_ && peer_progress_->unix_ms > last_step_unix_ms_) {
      before = peer_progress_->step;
      where = "on rank 0's previous node";
    }
    const int64_t lost = std::max<int64_t>(0, before - (p.step - 1));
    // Rank 0's first report carries the loads of its resume (the last one is what it loaded).
    std::string loaded = "nothing (a fresh start)";
    if (!counters.loads.empty()) {
      const parallel::CheckpointTransfer& l = counters.loads.back();
      loaded = (l.memory ? "the memory snapshot of step " : "the checkpoint of step ") +
               std::to_string(l.step);
    }
    LOG_INFO(
        "recovery: {}; generation {}; plan {}; loaded {}, resumed at step {}, steps lost {} "
        "(the last step reported {} was {}); first step done {:.2f} s after the generation "
        "started",
        recovery_cause_, generation, plan_text_, loaded, p.step, lost, where, before, seconds);
    NoteFirstStep(p, lost, seconds);
  }
  last_step_ = p.step;
  last_step_unix_ms_ = p.unix_ms;
  progress_ = p;
  NoteProgress(p);
  // A planned stop of this generation: rank 0 learns its step here.
  Json reply = Json::object();
  Result<ClusterState> state = DecodeClusterState(membership_->CurrentState().blob);
  if (state.ok() && state->stop_at && state->stop_at->generation == generation) {
    reply["stop_at"] = state->stop_at->step;
    if (state->stop_at->snapshot) reply["stop_snapshot"] = true;
  }
  co_return reply;
}

Json Node::LocalReport() const {
  Json workers = Json::array();
  for (const auto& [rank, w] : workers_)
    workers.push_back(
        {{"rank", rank}, {"slot", w->slot}, {"pid", w->process->pid()}, {"log", w->log_path}});
  Json report = {{"node", config_.id},
                 {"led_view", led_view_.load()},
                 {"generation", running_ ? running_->ToString() : ""},
                 {"plan", plan_text_},
                 {"workers", std::move(workers)},
                 {"memory_tier", snapshots_->Report()}};
  if (http_)
    report["http"] = config_.http_listen.substr(0, config_.http_listen.rfind(':') + 1) +
                     std::to_string(http_port_);
  if (store_) {
    const iofs::ServerStats st = store_->Stats();
    report["store"] = {{"address", store_address_},
                       {"metadata_node", st.metadata_node},
                       {"metadata_takeovers", st.takeovers},
                       {"chunks", st.chunks},
                       {"data_bytes", st.data_bytes}};
    if (st.metadata_node)
      report["store"].update({{"chains", st.chains},
                              {"chains_degraded", st.chains_degraded},
                              {"chains_stopped", st.chains_stopped}});
  }
  if (last_checkpoint_)
    report["checkpoint"] = {{"step", last_checkpoint_->first}, {"uri", last_checkpoint_->second}};
  if (progress_)
    report["progress"] = {{"generation", progress_->generation},
                          {"step", progress_->step},
                          {"loss", progress_->loss},
                          {"tokens_per_s", progress_->tokens_per_s},
                          {"unix_ms", progress_->unix_ms},
                          {"first_unix_ms", progress_->first_unix_ms}};
  return report;
}

asio::awaitable<Json> Node::PeerReport(elastic::Member member) {
  Result<Json> local = co_await CallJsonOnce(member.address, secret_, kCtlLocal, Json::object(),
                                             Deadline::After(kPeerCallTimeout));
  if (!local.ok()) co_return Json{{"node", member.id}, {"error", local.status().ToString()}};
  co_return std::move(*local);
}

asio::awaitable<Json> Node::MemberReports(const elastic::View& view) {
  auto executor = co_await asio::this_coro::executor;
  using Call = decltype(asio::co_spawn(executor, PeerReport({}), asio::deferred));
  std::vector<Call> calls;
  for (const elastic::Member& m : view.members)
    if (m.id != static_cast<uint64_t>(config_.id))
      calls.push_back(asio::co_spawn(executor, PeerReport(m), asio::deferred));
  std::vector<Json> peers;
  if (!calls.empty()) {
    auto [order, exceptions, reports] =
        co_await asio::experimental::make_parallel_group(std::move(calls))
            .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
    peers = std::move(reports);
  }
  Json nodes = Json::array();
  size_t next_peer = 0;
  for (const elastic::Member& m : view.members)
    nodes.push_back(m.id == static_cast<uint64_t>(config_.id) ? LocalReport()
                                                              : std::move(peers[next_peer++]));
  co_return nodes;
}

asio::awaitable<Result<Json>> Node::HandleStatus() {
  const elastic::View view = membership_->CurrentView();
  const elastic::ReplicatedState replicated = membership_->CurrentState();
  CO_ASSIGN_OR_RETURN(ClusterState state, DecodeClusterState(replicated.blob));
  Json members = Json::array();
  for (const elastic::Member& m : view.members)
    members.push_back({{"id", m.id}, {"address", m.address}, {"admitted", m.admitted}});
  Json view_json = {{"generation", view.generation}, {"members", std::move(members)}};
  {
    std::lock_guard lock(installed_mutex_);
    if (installed_.first == view.generation) view_json["installed_unix_ms"] = installed_.second;
  }
  Json status = {
      {"answered_by", config_.id},
      {"view", std::move(view_json)},
      {"state_version", replicated.version},
      {"epoch", state.epoch},
      {"max_nodes", state.max_nodes},
      {"drained", state.drained},
      {"cause", state.cause.what},
      {"membership",
       config_.etcd.empty() ? std::string("ring") : "etcd " + config_.etcd + config_.etcd_prefix}};
  if (state.job)
    status["job"] = {{"id", state.job->id},
                     {"name", state.job->name},
                     {"desire", JobDesireName(state.job->desire)},
                     {"finished_step", state.job->finished_step}};
  // Every member's own report (this one's without a call), the others asked all at once so that
  // members cut off from this one cost one call timeout in all, not one each.
  Json nodes = co_await MemberReports(view);
  Json best_progress;
  Json best_checkpoint;
  for (const Json& local : nodes) {
    if (local.contains("checkpoint") &&
        (best_checkpoint.is_null() ||
         local["checkpoint"].value("step", 0) > best_checkpoint.value("step", 0)))
      best_checkpoint = local["checkpoint"];
    if (local.contains("progress")) {
      const Json& p = local["progress"];
      if (best_progress.is_null() || p.value("unix_ms", 0) > best_progress.value("unix_ms", 0))
        best_progress = p;
    }
  }
  status["nodes"] = std::move(nodes);
  if (!best_progress.is_null()) status["progress"] = best_progress;
  if (!best_checkpoint.is_null()) status["checkpoint"] = best_checkpoint;
  co_return status;
}

}  // namespace rt::daemon
