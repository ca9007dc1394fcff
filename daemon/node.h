// Internals of the daemon (daemon/daemon.h is the face): the Node class, split over node.cc
// (start, stop, RPC handlers, status) and controller.cc (plans, generations, worker processes).
//
// Threading: every member below "io thread only" is touched only from the io_context's one
// thread; the membership service calls back on its own thread and only posts to it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/net/auth.h"
#include "base/net/rpc.h"
#include "base/process.h"
#include "comm/store.h"
#include "daemon/cluster_state.h"
#include "daemon/control_api.h"
#include "daemon/daemon.h"
#include "daemon/snapshot_service.h"
#include "elastic/planner.h"

namespace rt::daemon {

namespace asio = boost::asio;

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
};

// The last progress report of rank 0 (from this node's worker).
struct Progress {
  std::string generation;
  int64_t step = 0;
  double loss = 0;
  double tokens_per_s = 0;
  int64_t unix_ms = 0;
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
  Json LocalReport() const;
  asio::awaitable<Result<Json>> HandleSubmit(Json request);
  asio::awaitable<Result<Json>> HandleStop(Json request);
  asio::awaitable<Result<Json>> HandleScale(Json request);
  asio::awaitable<Result<Json>> HandleDrain(Json request);
  asio::awaitable<Result<Json>> HandleWorkerWatch(Json request);
  Result<Json> HandleWorkerReport(const Json& request);
  // Read-modify-CAS of the replicated state, retried while others change it first. `change`
  // returns false to leave the state as it is (then nothing is proposed).
  using StateChange = std::function<Result<bool>(ClusterState*)>;
  asio::awaitable<Status> UpdateState(StateChange change);

  // controller.cc
  asio::awaitable<void> ControlLoop();
  asio::awaitable<void> Reconcile();
  asio::awaitable<Status> StartGeneration(const elastic::View& view, const ClusterState& state,
                                          GenerationKey key);
  Status SpawnWorker(const elastic::JobPlan& plan, int rank, const GenerationKey& key,
                     const std::string& job_dir, const std::string& rendezvous);
  asio::awaitable<void> Supervise(std::shared_ptr<Worker> worker);
  asio::awaitable<void> OnWorkerFailed(std::shared_ptr<Worker> worker, const ChildExit& exit);
  asio::awaitable<void> StopWorkers(std::string why);
  void Wake();
  void ReleaseWatchers();

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
  uint16_t port_ = 0;
  std::atomic<bool> stopped_{false};

  // io thread only.
  bool stopping_ = false;
  bool dirty_ = true;
  asio::steady_timer wake_;
  std::optional<GenerationKey> running_;  // the generation this node runs (or waits in)
  std::string plan_text_;                 // its plan, or why the job waits
  std::map<int, std::shared_ptr<Worker>> workers_;  // by rank
  std::shared_ptr<asio::steady_timer> workers_changed_;
  std::shared_ptr<asio::steady_timer> generation_over_;  // cancelled when a generation ends
  std::optional<Progress> progress_;
  // The recovery being timed: what caused it and when the new generation started.
  std::string recovery_cause_;
  MonoTime generation_started_{};
  bool recovery_logged_ = true;
  int64_t last_step_ = 0;  // the last step rank 0 reported here (any generation)
};

}  // namespace rt::daemon
