#include "daemon/worker.h"

#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include "base/log.h"
#include "base/net/auth.h"
#include "base/wall_clock.h"
#include "ckpt/catalog.h"
#include "daemon/control_api.h"
#include "daemon/node_config.h"
#include "daemon/snapshot_storage.h"
#include "daemon/worker_counters.h"
#include "parallel/config.h"
#include "parallel/rank_activity.h"
#include "parallel/train_loop.h"
#include "parallel/trainer.h"

namespace rt::daemon {
namespace asio = boost::asio;
namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kWatchPeriod = std::chrono::minutes(10);
constexpr auto kReportTimeout = std::chrono::seconds(2);
constexpr auto kStoppedReportTimeout = std::chrono::seconds(10);
// How often a rank other than 0 sends counters that are only comm bytes (rank 0's step reports
// carry them every step; checkpoint transfers are sent at once).
constexpr double kCountersPeriodSeconds = 1.0;

[[noreturn]] void ExitOrphaned(const std::string& why) {
  LOG_ERROR("worker: {}: exiting", why);
  spdlog::default_logger()->flush();
  std::_Exit(kWorkerOrphanedExit);
}

// The worker's link to its daemon: one RPC connection on its own io_context thread.
class DaemonLink {
 public:
  explicit DaemonLink(const WorkerOptions& options)
      : options_(options), counters_(options.train.rank == 0) {}
  ~DaemonLink() {
    guard_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  // Connects and starts watching. Errors: Unavailable naming the daemon.
  Status Start(std::shared_ptr<const net::ClusterSecret> secret) {
    ASSIGN_OR_RETURN(auto host_port, SplitHostPort(options_.daemon, "--daemon"));
    guard_.emplace(io_.get_executor());
    thread_ = std::thread([this] { io_.run(); });
    auto connect = [this, secret, host_port]() -> asio::awaitable<Status> {
      net::RpcClientOptions o;
      o.secret = secret;
      o.peer_name = "daemon at " + options_.daemon;
      CO_ASSIGN_OR_RETURN(client_,
                          co_await net::RpcClient::Connect(host_port.first, host_port.second,
                                                           Deadline::After(kConnectTimeout), o));
      asio::co_spawn(io_, Watch(), asio::detached);
      asio::co_spawn(io_, Heartbeat(), asio::detached);
      co_return Status();
    };
    return asio::co_spawn(io_, connect, asio::use_future).get().WithContext("worker");
  }

  // Takes what the rank did (its checkpoint transfers and comm bytes) into the next report; on
  // ranks other than 0, sends it at once (fire and forget) when it holds checkpoint transfers
  // or kCountersPeriodSeconds passed since the last one. The rank's thread only.
  void Note(const parallel::RankActivity& activity) {
    counters_.Add(activity);
    if (options_.train.rank == 0) return;
    const bool transfers = !activity.checkpoints.empty();
    if (!transfers && MonoSeconds() - counters_sent_ < kCountersPeriodSeconds) return;
    WorkerCounters pending = counters_.Take();
    if (pending.empty()) return;
    counters_sent_ = MonoSeconds();
    Json report = {{"generation", options_.generation}, {"rank", options_.train.rank}};
    AddCounters(pending, &report);
    asio::co_spawn(
        io_,
        [this, report = std::move(report)]() -> asio::awaitable<void> {
          Result<Json> r =
              co_await CallJson(*client_, kWorkerReport, report, Deadline::After(kReportTimeout));
          if (!r.ok()) LOG_WARN("worker: counters report: {}", r.status().ToString());
        },
        asio::detached);
  }

  // Sends the counters still pending (maybe none) and waits for the answer (a rank other than 0
  // at its end; rank 0's last report carries them): the frames go out in order, so every
  // earlier report is then on the wire too; waits at most kReportTimeout (only the daemon's
  // metrics miss the counters when it does not answer). Errors: those of the call.
  Status FlushCounters() {
    WorkerCounters pending = counters_.Take();
    Json report = {{"generation", options_.generation}, {"rank", options_.train.rank}};
    AddCounters(pending, &report);
    return Call(std::move(report), "report the counters", kReportTimeout);
  }

  // Sends a progress report with the pending counters (fire and forget; a lost report is only a
  // late status line, and its counters missing from the daemon's metrics).
  void Report(const StepStats& s, double seconds) {
    Json report = {{"generation", options_.generation},
                   {"rank", options_.train.rank},
                   {"step", s.step},
                   {"loss", s.loss},
                   {"tokens_per_s", seconds > 0 ? static_cast<double>(s.tokens) / seconds : 0.0},
                   {"unix_ms", UnixMs()}};
    AddCounters(counters_.Take(), &report);
    asio::co_spawn(
        io_,
        [this, report = std::move(report)]() -> asio::awaitable<void> {
          Result<Json> r =
              co_await CallJson(*client_, kWorkerReport, report, Deadline::After(kReportTimeout));
          if (!r.ok()) {
            LOG_WARN("worker: progress report: {}", r.status().ToString());
            co_return;
          }
          auto it = r->find("stop_at");
          if (it == r->end() || !it->is_number_integer()) co_return;
          // The kind first: a rank reads the step, then the kind (stop_at()).
          const auto snapshot = r->find("stop_snapshot");
          stop_snapshot_ = snapshot != r->end() && snapshot->is_boolean() && snapshot->get<bool>();
          stop_at_ = it->get<int64_t>();
        },
        asio::detached);
  }

  // The planned stop the daemon named in its last report answer; step INT64_MAX = none.
  parallel::PlannedStop stop_at() const {
    const int64_t step = stop_at_;
    return parallel::PlannedStop{step, step != INT64_MAX && stop_snapshot_};
  }

  // Tells the daemon that the ranks stopped after `step` with its checkpoint committed (or only
  // its memory snapshot, in `snapshot_in` when not ""), and waits for the answer. Errors: those
  // of the call.
  Status ReportStopped(int64_t step, const std::string& snapshot_in) {
    Json extra = Json::object();
    if (!snapshot_in.empty()) extra["snapshot_in"] = snapshot_in;
    return ReportEnd("stopped_at", step, "report the stop", std::move(extra));
  }

  // Tells the daemon that the run finished at `step` (its last step: the progress reports are
  // fire and forget, and a generation that resumed at the end reports none), and waits for the
  // answer. Errors: those of the call.
  Status ReportFinished(int64_t step) {
    return ReportEnd("finished_at", step, "report the end of the run");
  }

 private:
  // Sends {generation, rank, step, `key`: step} and `extra` with the pending counters and waits
  // for the answer.
  Status ReportEnd(const char* key, int64_t step, const char* what, Json extra = Json::object()) {
    Json report = {{"generation", options_.generation},
                   {"rank", options_.train.rank},
                   {"step", step},
                   {key, step}};
    report.update(extra);
    AddCounters(counters_.Take(), &report);
    return Call(std::move(report), what);
  }

  // Sends `report` and waits for the answer. Errors: those of the call, with `what`.
  Status Call(Json report, const char* what,
              std::chrono::milliseconds timeout = kStoppedReportTimeout) {
    auto call = [this, report = std::move(report), timeout]() -> asio::awaitable<Status> {
      Result<Json> r = co_await CallJson(*client_, kWorkerReport, report, Deadline::After(timeout));
      co_return r.status();
    };
    return asio::co_spawn(io_, call, asio::use_future).get().WithContext(what);
  }

  // Tells the daemon every kWorkerHeartbeatPeriod that this process runs, from this thread
  // whatever training does ([worker] hang_ms kills a worker that stops: SIGSTOP, a frozen
  // process). A failed call is the watch's business.
  asio::awaitable<void> Heartbeat() {
    const Json beat = {{"generation", options_.generation}, {"rank", options_.train.rank}};
    asio::steady_timer timer(io_);
    while (true) {
      (void)co_await CallJson(*client_, kWorkerHeartbeat, beat,
                              Deadline::After(5 * kWorkerHeartbeatPeriod));
      timer.expires_after(kWorkerHeartbeatPeriod);
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  // Long-polls the daemon; any answer but "keep waiting" ({"stop": false}, sent when the daemon
  // held the call for worker.watch_hold_ms) ends the process.
  asio::awaitable<void> Watch() {
    const Json request = {{"generation", options_.generation},
                          {"rank", options_.train.rank},
                          {"pid", static_cast<int64_t>(::getpid())}};
    while (true) {
      Result<Json> r =
          co_await CallJson(*client_, kWorkerWatch, request, Deadline::After(kWatchPeriod));
      if (!r.ok() && r.status().code() == StatusCode::kDeadlineExceeded) continue;
      if (!r.ok()) ExitOrphaned("lost the daemon: " + r.status().ToString());
      const auto stop = r->find("stop");
      if (stop != r->end() && stop->is_boolean() && !stop->get<bool>()) continue;
      ExitOrphaned("the daemon ended generation " + options_.generation);
    }
  }

  const WorkerOptions& options_;
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  std::shared_ptr<net::RpcClient> client_;
  std::thread thread_;
  std::atomic<int64_t> stop_at_{INT64_MAX};
  std::atomic<bool> stop_snapshot_{false};  // the memory snapshot is enough for that stop
  CounterDeltas counters_;                  // the rank's thread only
  double counters_sent_ = 0;                // MonoSeconds() of the last counters-only report
};

// True when `config` names a ckpt.dir that holds a committed checkpoint, or the memory tier
// holds a committed snapshot: the generation then resumes from the newest one (every rank
// decides alike from the same storages). A ringfs:// ckpt.dir is opened with `secret`.
Result<bool> HasCommittedCheckpoint(const RunConfig& config,
                                    const std::shared_ptr<ckpt::Storage>& memory,
                                    std::shared_ptr<const net::ClusterSecret> secret) {
  if (memory != nullptr) {
    Result<std::vector<int64_t>> in_memory = ckpt::ListCommitted(*memory);
    if (in_memory.ok() && !in_memory->empty()) return true;
  }
  if (config.ckpt.dir.empty()) return false;
  ckpt::StorageOptions options;
  options.secret = std::move(secret);  // the cluster secret of a ringfs:// ckpt.dir
  ASSIGN_OR_RETURN(std::shared_ptr<ckpt::Storage> storage,
                   ckpt::OpenStorage(config.ckpt.dir, options));
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ckpt::ListCommitted(*storage));
  return !steps.empty();
}

// The memory tier of the worker's job (the first number of its generation "job.view.epoch")
// through its daemon, when the run config asks for one (ckpt.memory_every > 0); else null.
Result<std::shared_ptr<ckpt::Storage>> OpenMemoryTier(
    const RunConfig& config, const WorkerOptions& options,
    std::shared_ptr<const net::ClusterSecret> secret) {
  if (config.ckpt.memory_every <= 0) return std::shared_ptr<ckpt::Storage>();
  uint64_t job = 0;
  const std::string& g = options.generation;
  auto [end, ec] = std::from_chars(g.data(), g.data() + g.size(), job);
  if (ec != std::errc() || end == g.data() + g.size() || *end != '.')
    return InvalidArgument("worker: --generation '" + g + "' is not JOB.VIEW.EPOCH");
  return OpenSnapshotStorage(options.daemon, std::move(secret), job, config.ckpt.memory_copies);
}

}  // namespace

Status RunWorker(WorkerOptions options, const std::string& executable) {
  ASSIGN_OR_RETURN(std::shared_ptr<const net::ClusterSecret> secret,
                   net::ClusterSecret::LoadWithTls(options.secret_file, options.tls));
  if (options.train.rank < 0) return InvalidArgument("worker: --rank is required");
  DaemonLink link(options);
  RETURN_IF_ERROR(link.Start(secret));
  options.train.generation = options.generation;
  // The rank links listen on the daemon's host: loopback for a single-host cluster, the
  // node's address when the daemon listens on one (other hosts, a network namespace).
  ASSIGN_OR_RETURN(auto daemon_host, SplitHostPort(options.daemon, "--daemon"));
  options.train.listen_address = daemon_host.first;
  // The job's store and rank links, and a ringfs:// ckpt.dir, are authenticated with the
  // cluster secret.
  options.train.secret_file = options.secret_file;
  options.train.tls = options.tls;
  ASSIGN_OR_RETURN(RunConfig config, LoadRunConfig(options.train.config, {}));
  ASSIGN_OR_RETURN(options.train.memory, OpenMemoryTier(config, options, secret));
  const double started = MonoSeconds();
  ASSIGN_OR_RETURN(options.train.resume,
                   HasCommittedCheckpoint(config, options.train.memory, secret));
  WarnIfSlow(started, "worker: looking for a committed checkpoint");
  LOG_INFO("worker: generation {} rank {}/{} layout {}, {}", options.generation, options.train.rank,
           options.train.ranks, options.train.layout,
           options.train.resume ? "resuming from the newest committed checkpoint"
                                : "from the start (no committed checkpoint)");
  options.train.on_activity = [&link](const parallel::RankActivity& a) { link.Note(a); };
  if (options.train.rank == 0)
    options.train.on_step = [&link](const StepStats& s, double seconds) {
      link.Report(s, seconds);
    };
  // Planned stops need a checkpoint to stop at; without one the daemons restart the generation.
  std::optional<int64_t> stopped;
  Status report_status;
  if (!config.ckpt.dir.empty() && config.ckpt.every > 0) {
    options.train.stop_at = [&link] { return link.stop_at(); };
    options.train.on_stopped = [&](int64_t step, const std::string& snapshot_in) {
      stopped = step;
      if (options.train.rank == 0) {
        report_status = link.ReportStopped(step, snapshot_in);
      } else if (Status flushed = link.FlushCounters(); !flushed.ok()) {
        LOG_WARN("worker: {}", flushed.ToString());  // only the metrics miss them
      }
    };
  }
  const Status trained = parallel::RunDistributedTrain(options.train, executable);
  // The counters of the last saves (best effort after a failure: the daemon may be gone).
  if (options.train.rank != 0 || !trained.ok()) {
    const Status flushed = link.FlushCounters();
    if (!flushed.ok()) LOG_WARN("worker: {}", flushed.ToString());
  }
  RETURN_IF_ERROR(trained);
  if (!stopped) {
    if (options.train.rank != 0) return Status();
    return link.ReportFinished(parallel::EndStep(config, options.train.stop_after));
  }
  RETURN_IF_ERROR(report_status);
  LOG_INFO("worker: generation {} rank {} stopped after step {} for a planned change",
           options.generation, options.train.rank, *stopped);
  spdlog::default_logger()->flush();
  std::fflush(stdout);
  std::_Exit(kWorkerStoppedExit);
}

}  // namespace rt::daemon
