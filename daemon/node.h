// Internals of the daemon (daemon/daemon.h is the face): the Node class, split over node.cc
// (start, stop, RPC handlers, status) and controller.cc (plans, generations, worker processes).
//
// Threading: every member below "io thread only" is touched only from the io_context's one
// thread; the membership service calls back on its own thread and only posts to it.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "base/metrics.h"
#include "base/net/auth.h"
#include "base/net/http_server.h"
#include "base/net/rpc.h"
#include "base/notify.h"
#include "base/process.h"
#include "base/wall_clock.h"
#include "comm/store.h"
#include "daemon/cluster_state.h"
#include "daemon/control_api.h"
#include "daemon/daemon.h"
#include "daemon/snapshot_service.h"
#include "daemon/web/node_metrics.h"
#include "daemon/web/progress_history.h"
#include "daemon/worker_counters.h"
#include "elastic/planner.h"
#include "iofs/server.h"

namespace rt::daemon {

namespace asio = boost::asio;

// How long a daemon waits for one RPC to another member (status fan-out, progress, commits).
inline constexpr auto kPeerCallTimeout = std::chrono::milliseconds(1500);

// A training generation: the job, the view generation and the replicated epoch.
struct GenerationKey {
  uint64_t job = 0;
  uint64_t view = 0;
  uint64_t epoch = 0;
  bool operator==(const GenerationKey&) const = default;
  // "job.view.epoch", e.g. "1.4.2".
  std::string ToString() const;
};

// One worker process of this node.
struct Worker {
  int rank = 0;
  int slot = 0;
  GenerationKey generation;
  std::unique_ptr<ChildProcess> process;
  bool stopping = false;  // this daemon is stopping it: its exit is not a failure
  std::string log_path;
  MonoTime heard{};  // its last heartbeat (kWorkerHeartbeat); its start until the first
  bool heard_once = false;
  bool frozen = false;  // killed for sending no heartbeat for [worker] hang_ms
};

// A recovery as the daemon of rank 0 saw it (the status page's `recoveries`).
struct RecoveryRecord {
  double time = 0;         // Unix seconds when the new generation started
  std::string cause;       // the `cause` label: node_lost, worker_exited, planned
  std::string what;        // what happened, in words
  std::string generation;  // the new training generation
  std::string layout;      // its plan
  int64_t steps_lost = 0;  // steps trained again
  double recovery_s = 0;   // generation start to its first step, seconds
};

// The last progress report of rank 0 (from this node's worker).
struct Progress {
  std::string generation;
  int64_t step = 0;
  double loss = 0;
  double tokens_per_s = 0;
  int64_t unix_ms = 0;
  int64_t first_unix_ms = 0;  // rank 0's report of the generation's first step (Unix ms)
};

class Node : public Daemon {
 public:
  explicit Node(DaemonOptions options);
  ~Node() override;
  Status Init();
  uint16_t port() const override { return port_; }
  Status Stop(bool leave, Deadline deadline) override;

 private:
  // node.cc: RPC handlers.
  void RegisterHandlers();
  asio::awaitable<Result<Json>> HandleStatus();
  // Every member's local report in view order: this node's own, the others' asked in parallel
  // (each within kPeerCallTimeout; one that fails is {"node": id, "error": "..."}).
  asio::awaitable<Json> MemberReports(const elastic::View& view);
  // `member`'s local report, or {"node": id, "error": "..."} when the call fails.
  asio::awaitable<Json> PeerReport(elastic::Member member);
  Json LocalReport() const;
  asio::awaitable<Result<Json>> HandleSubmit(Json request);
  asio::awaitable<Result<Json>> HandleStop(Json request);
  asio::awaitable<Result<Json>> HandleScale(Json request);
  asio::awaitable<Result<Json>> HandleDrain(Json request);
  asio::awaitable<Result<Json>> HandleWorkerWatch(Json request);
  // A worker's heartbeat: notes when its process was last heard of (WatchHeartbeats).
  asio::awaitable<Result<Json>> HandleWorkerHeartbeat(Json request);
  asio::awaitable<Result<Json>> HandleWorkerReport(Json request);
  // Read-modify-CAS of the replicated state, retried while others change it first. `change`
  // returns false to leave the state as it is (then nothing is proposed).
  using StateChange = std::function<Result<bool>(ClusterState*)>;
  asio::awaitable<Status> UpdateState(StateChange change);

  // node_web.cc: the HTTP listener (/metrics, the status page), the metrics and systemd.
  Status StartWeb();
  void StopWeb(Deadline deadline);
  // The /api/status object (docs/formats/status_api.md). io thread only.
  Json StatusPageJson() const;
  Json LocalMembersJson(const elastic::View& view, const ClusterState* state) const;
  // Every second and after each membership notification: gauges, READY=1 and STATUS= lines, and
  // the job's progress from the daemon of rank 0 when that is another node.
  asio::awaitable<void> ObserveLoop();
  asio::awaitable<void> FetchPeerProgress(const elastic::View& view);
  // Every few seconds: the newest committed checkpoint in the job's ckpt.dir.
  asio::awaitable<void> RefreshLastCheckpoint();
  void Observe();
  // A progress report of rank 0 (this node's or fetched): the gauges and the chart's history.
  void NoteProgress(const Progress& p);
  // The first step of a generation whose rank 0 runs here: a recovery unless the job just started.
  void NoteFirstStep(const Progress& p, int64_t steps_lost, double seconds);
  // The `cause` label of the recovery that generation `key` on `view` is ("" = not a recovery:
  // the job was submitted or this node starts it first). Called once per generation, before
  // running_ changes.
  std::string RecoveryLabel(const GenerationKey& key, const elastic::View& view,
                            const ClusterState& state);
  // A worker's report carried counters: its checkpoint saves and loads and comm bytes.
  void NoteWorkerCounters(const WorkerCounters& counters);
  // A worker process is started for `key`: counts a restart when this node ran the job before.
  void NoteWorkerStarted(const GenerationKey& key);
  // The chunk-store metrics from the embedded store's counters (nothing without one).
  void ObserveStore();

  // The embedded chunk store ([store]; daemon/embedded_store.h).
  // Starts it when node.toml has [store]. Errors: StoreServerOptions's and iofs::Server::Start's.
  Status StartStore();
  // Tells the store the members of `view` (its chains follow the views), once per view.
  void FollowViewInStore(const elastic::View& view);
  // `uri` with a ringfs:/// (this node's store) resolved (ResolveLocalStore).
  Result<std::string> ResolveStoreUri(const std::string& uri) const;

  // controller.cc
  asio::awaitable<void> ControlLoop();
  asio::awaitable<void> Reconcile();
  asio::awaitable<Status> StartGeneration(const elastic::View& view, const ClusterState& state,
                                          GenerationKey key);
  Status SpawnWorker(const elastic::JobPlan& plan, int rank, const GenerationKey& key,
                     const std::string& job_dir, const std::string& rendezvous);
  asio::awaitable<void> Supervise(std::shared_ptr<Worker> worker);
  // Kills `worker` when it sends no heartbeat for [worker] hang_ms (its process is stopped or
  // frozen); Supervise then handles its death. Ends when the worker is stopped or gone.
  asio::awaitable<void> WatchHeartbeats(std::shared_ptr<Worker> worker);
  asio::awaitable<void> OnWorkerFailed(std::shared_ptr<Worker> worker, const ChildExit& exit);
  asio::awaitable<void> StopWorkers(std::string why);
  void Wake();
  void ReleaseWatchers();
  // True when every node of the running generation's plan is a member of `view` as the process
  // it was when the generation started (the same incarnation): a plan node that is gone, or a
  // new process since (its daemon restarted before the view lost it, as with etcd leases, and
  // its workers with it), ends the generation.
  bool PlanProcessesIn(const elastic::View& view) const;
  // The nodes the plan of (view, state) uses: members registered before the state's epoch
  // (ClusterState::Plannable) that are not drained. With `joining`, instead the members not
  // drained that registered during the epoch: the next epoch's plans use them.
  std::vector<elastic::NodeSlots> PlanNodes(const elastic::View& view, const ClusterState& state,
                                            bool joining = false) const;
  // Whether the job would run a larger world or another layout with `joining` added to `nodes`
  // (the job's max_nodes, its slots per node or its layout rules may leave them out): only then
  // does it grow. True when nothing runs or the job does not parse.
  bool PlanGrows(const ClusterState& state, const std::vector<elastic::NodeSlots>& nodes,
                 const std::vector<elastic::NodeSlots>& joining) const;
  // The job waits for nodes and `joined` registered during its epoch: a new epoch, whose plans
  // use them (once; the first daemon to see it proposes it).
  asio::awaitable<void> ReplanWithJoined(GenerationKey key, std::string joined);

  // planned_stop.cc: planned changes that lose nothing (docs/daemon.md).
  // The newest progress any member's rank 0 reported (a fan-out); nullopt when none did.
  asio::awaitable<std::optional<Progress>> NewestProgress();
  // Proposes stop_at = (newest reported generation, its step + 2) and waits until rank 0's
  // daemon records the committed checkpoint of that stop (≥ that step). With `snapshot_enough`
  // and a job that keeps memory snapshots (ckpt.memory_every > 0), the memory snapshot of the
  // step will do (StopAt::snapshot). Returns its step. Errors: FailedPrecondition when the job
  // runs no generation that reports steps or has no checkpoints (ckpt.dir, ckpt.every);
  // DeadlineExceeded when the checkpoint did not commit by `deadline`; those of the replicated
  // state.
  asio::awaitable<Result<int64_t>> CheckpointFirst(std::string why, Deadline deadline,
                                                   bool snapshot_enough = false);
  // A planned change: CheckpointFirst (bounded by kPlannedStopTimeout), then `change` with
  // stop_at cleared. When the checkpoint fails, logs why and applies the change anyway (the new
  // generation then resumes from the newest committed checkpoint).
  asio::awaitable<Status> PlannedChange(std::string why, StateChange change,
                                        bool snapshot_enough = false);
  // Nodes joined the plan's node set: the daemon of rank 0 makes sure of a memory snapshot (or
  // checkpoints) first — every member stays, so their snapshots do — then bumps the epoch so
  // that the next generation includes them.
  asio::awaitable<void> GrowAfterCheckpoint(GenerationKey key, std::string joined);
  // SIGTERM: when this node runs ranks of the job, checkpoint first (bounded by `deadline`).
  asio::awaitable<void> CheckpointBeforeLeaving(Deadline deadline);
  // Rank 0 stopped after `step` with the checkpoint committed in the job's ckpt.dir (or, when
  // `snapshot_in` is not "", only the memory snapshot, there): records it in `committed`.
  asio::awaitable<Status> RecordCommitted(std::string generation, int64_t step,
                                          std::string snapshot_in);
  // A rank stopped for a planned change: if no change follows in time, restarts the generation.
  asio::awaitable<void> WatchStoppedGeneration(GenerationKey key);
  asio::awaitable<Result<Json>> HandleCheckpoint(Json request);
  asio::awaitable<Result<Json>> HandleCheckpoints(Json request);

  DaemonOptions options_;
  const NodeConfig& config_;
  std::shared_ptr<const net::ClusterSecret> secret_;
  asio::io_context io_;
  std::thread thread_;
  std::shared_ptr<net::RpcServer> server_;
  std::unique_ptr<comm::TcpStoreServer> rendezvous_;
  std::string rendezvous_address_;
  std::unique_ptr<elastic::MembershipService> membership_;
  std::shared_ptr<SnapshotService> snapshots_;  // the memory tier (its handlers: io thread)
  std::unique_ptr<iofs::Server> store_;         // the embedded chunk store; null without [store]
  std::string store_address_;                   // its "host:port" for clients; "" without one
  uint64_t store_view_ = 0;                     // the view generation it was told last (io thread)
  iofs::ServerStats store_seen_;                // its counters at the last ObserveStore
  uint16_t port_ = 0;
  std::atomic<bool> stopped_{false};
  MetricsRegistry metrics_registry_;
  web::NodeMetrics metrics_{};
  web::ProgressHistory history_;
  std::shared_ptr<net::HttpServer> http_;  // null without [http] listen
  uint16_t http_port_ = 0;
  std::shared_ptr<SystemdNotifier> notifier_;
  // The generation of the newest view this node's own proposal installed (0: none): it led
  // that view change (written on the membership thread).
  std::atomic<uint64_t> led_view_{0};
  // When this node installed its newest view (Unix ms) and that view's generation (written on
  // the membership thread; the status's view.installed_unix_ms).
  std::mutex installed_mutex_;
  std::pair<uint64_t, int64_t> installed_{0, 0};
  // Storage I/O of the control API and RefreshLastCheckpoint, off the io thread.
  asio::thread_pool blocking_{1};

  // io thread only.
  bool stopping_ = false;
  bool dirty_ = true;
  asio::steady_timer wake_;
  std::optional<GenerationKey> running_;           // the generation this node runs (or waits in)
  std::string plan_text_;                          // its plan, or why the job waits
  std::vector<elastic::NodeSlots> running_nodes_;  // the nodes of its plan (none: no plan)
  std::vector<elastic::Member> running_members_;   // the view it started in (incarnations)
  uint64_t running_lead_ = 0;                      // the node of its plan's rank 0
  bool grow_pending_ = false;                      // GrowAfterCheckpoint runs
  // Generations in a row whose worker here failed before rank 0 reported a step of theirs
  // (OnWorkerFailed pauses before the next epoch from the second on).
  int quick_failures_ = 0;
  std::optional<GenerationKey> counted_failure_;    // the generation quick_failures_ counted last
  std::map<int, std::shared_ptr<Worker>> workers_;  // by rank
  std::shared_ptr<asio::steady_timer> workers_changed_;
  std::shared_ptr<asio::steady_timer> generation_over_;  // cancelled when a generation ends
  std::optional<Progress> progress_;
  // The recovery being timed: what caused it and when the new generation started.
  std::string recovery_cause_;
  MonoTime generation_started_{};
  bool recovery_logged_ = true;
  int64_t last_step_ = 0;                  // the last step rank 0 reported here (any generation)
  int64_t last_step_unix_ms_ = 0;          // and when (the report's unix_ms)
  std::optional<elastic::JobPlan> plan_;   // the running generation's plan
  std::string recovery_label_;             // RecoveryLabel of the generation being timed
  size_t generation_members_ = 0;          // view members when the running generation started
  std::optional<Progress> peer_progress_;  // rank 0's progress fetched from its daemon
  std::deque<RecoveryRecord> recoveries_;  // newest first, at most 20
  std::shared_ptr<asio::steady_timer> observe_wake_;  // cancelled to run ObserveLoop now
  uint64_t worker_job_ = 0;        // NoteWorkerStarted: the job of the last worker started
  std::string worker_generation_;  // and its generation
  bool workers_restart_ = false;   // whether that generation's workers replace earlier ones
  MonoTime next_checkpoint_list_{};
  std::optional<std::pair<int64_t, std::string>> last_checkpoint_;  // step, where
  bool ready_sent_ = false;
  std::string status_line_;  // the last STATUS= sent
};

}  // namespace rt::daemon
