#include "parallel/launch.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/deadline.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/net/auth.h"
#include "base/process.h"
#include "base/subprocess.h"
#include "comm/communicator.h"
#include "comm/store.h"
#include "data/data_loader.h"
#include "parallel/checkpointing.h"
#include "parallel/config.h"
#include "parallel/engine.h"
#include "parallel/layout.h"
#include "parallel/rank_activity.h"
#include "parallel/run_metrics.h"
#include "parallel/train_loop.h"
#if defined(RINGTRAIN_WITH_CUDA)
#include "kernels/cuda/device.h"
#endif

namespace rt::parallel {
namespace {

namespace asio = boost::asio;

constexpr auto kBootstrapTimeout = std::chrono::seconds(60);

Result<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument("--store must be host:port, got '" + s + "'");
  const int port = std::atoi(s.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return InvalidArgument("--store has a bad port: '" + s + "'");
  return std::make_pair(s.substr(0, colon), static_cast<uint16_t>(port));
}

// train.device = "cuda" for the launcher: one GPU per rank, every rank on this machine. Checks
// that the machine has `ranks` devices before any worker starts.
Status CheckLocalGpus(int ranks) {
#if defined(RINGTRAIN_WITH_CUDA)
  ASSIGN_OR_RETURN(const int devices, CudaDeviceCount());
  if (devices < ranks)
    return InvalidArgument("train.device = \"cuda\" with --ranks " + std::to_string(ranks) +
                           " needs one GPU per rank, but this machine has " +
                           std::to_string(devices) + " (NCCL refuses two ranks on one GPU)");
  return Status();
#else
  (void)ranks;
  return Unimplemented(
      "train.device = \"cuda\": no CUDA backend in this build (configure with "
      "-DRINGTRAIN_CUDA=ON)");
#endif
}

// train.device = "cuda" for a worker: makes WorkerGpu(o) its current device, after checking
// that this machine has it.
Status SelectWorkerGpu(const DistTrainOptions& o) {
#if defined(RINGTRAIN_WITH_CUDA)
  const int gpu = WorkerGpu(o);
  ASSIGN_OR_RETURN(const int devices, CudaDeviceCount());
  if (gpu >= devices)
    return InvalidArgument("train.device = \"cuda\": rank " + std::to_string(o.rank) +
                           " computes on GPU " + std::to_string(gpu) + ", but this machine has " +
                           std::to_string(devices) + " (one GPU per rank or slot)");
  return SetCudaDevice(gpu).WithContext("select GPU " + std::to_string(gpu));
#else
  (void)o;
  return Unimplemented(
      "train.device = \"cuda\": no CUDA backend in this build (configure with "
      "-DRINGTRAIN_CUDA=ON)");
#endif
}

Result<RunConfig> LoadConfig(const DistTrainOptions& o) {
  std::vector<std::string> sets = o.sets;
  if (o.steps >= 0) sets.push_back("train.steps=" + std::to_string(o.steps));
  return LoadRunConfig(o.config, sets);
}

// RINGTRAIN_FAULTS_RANK=R: RINGTRAIN_FAULTS applies to the worker of rank R only; the others
// disarm every point before any is hit. Errors: InvalidArgument for a value that is not a rank.
Status ScopeFaultsToRank(int rank, int ranks) {
  const char* only = std::getenv("RINGTRAIN_FAULTS_RANK");
  if (only == nullptr) return Status();
  char* end = nullptr;
  const long r = std::strtol(only, &end, 10);
  if (*only == '\0' || *end != '\0' || r < 0 || r >= ranks)
    return InvalidArgument("RINGTRAIN_FAULTS_RANK='" + std::string(only) + "' is not a rank of " +
                           std::to_string(ranks));
  if (r != rank) fault::DisarmAll();
  return Status();
}

// A worker's report of each step: on rank 0 the metrics file (each line once its step may be
// reported, TrainLoopReporter::StepTaken; written out before each checkpoint); once the step's
// saves are done the on_step hook, and on rank 0 the progress lines ("step N/M  loss L  lr R
// T tok/s" every train.log_every steps and after the last; "step N: val_loss V").
class WorkerReporter final : public TrainLoopReporter {
 public:
  // Reports for the worker of `options` (rank 0 when `lead`), calling `note_activity` before
  // the on_step hook; `config` and `options` must outlive the reporter.
  WorkerReporter(const RunConfig& config, const DistTrainOptions& options, bool lead,
                 std::function<void()> note_activity)
      : config_(config), options_(options), lead_(lead), note_activity_(std::move(note_activity)) {}

  // Opens the metrics file (rank 0), appending on resume. Errors: RunMetrics::Open's.
  Status OpenMetrics(bool append) { return metrics_.Open(config_.metrics.path, append); }

  void StepTaken(const StepReport& r) override {
    if (lead_)
      metrics_.WriteStep(r.stats, r.tokens_per_s, config_.train.precision == "fp16",
                         options_.generation);
  }
  void Evaluated(int64_t step, double val_loss) override {
    if (lead_) metrics_.WriteEval(step, val_loss);
  }
  void Saving(int64_t step) override { metrics_.WaitWrittenBeforeCheckpoint(step); }
  void StepSaved(const StepReport& r) override {
    const StepStats& s = r.stats;
    note_activity_();
    if (options_.on_step) options_.on_step(s, r.seconds);
    if (!lead_) return;
    if (r.last || config_.train.log_every <= 0 || s.step % config_.train.log_every == 0)
      std::printf("step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s\n",
                  static_cast<long long>(s.step), static_cast<long long>(config_.train.steps),
                  s.loss, s.lr, r.tokens_per_s);
    if (r.val_loss) {
      std::printf("step %lld: val_loss %.4f\n", static_cast<long long>(s.step), *r.val_loss);
    }
  }

 private:
  const RunConfig& config_;
  const DistTrainOptions& options_;
  const bool lead_;
  const std::function<void()> note_activity_;
  RunMetrics metrics_;
};

Status RunWorker(const DistTrainOptions& o) {
  RETURN_IF_ERROR(ScopeFaultsToRank(o.rank, o.ranks));
  ASSIGN_OR_RETURN(RunConfig config, LoadConfig(o));
  ASSIGN_OR_RETURN(ParallelLayout layout, ParseLayout(o.layout));
  ASSIGN_OR_RETURN(auto host_port, ParseHostPort(o.store));
  ASSIGN_OR_RETURN(std::shared_ptr<const net::ClusterSecret> secret,
                   net::ClusterSecret::LoadWithTls(o.secret_file, o.tls));
  const Deadline boot = Deadline::After(kBootstrapTimeout);
  const double started = MonoSeconds();
  double phase = started;  // each slow step of the start below is logged
  comm::TcpStoreClientOptions store_options;
  store_options.secret = secret;
  ASSIGN_OR_RETURN(std::shared_ptr<comm::Store> store,
                   comm::ConnectTcpStore(host_port.first, host_port.second, boot, store_options));
  comm::CommOptions co;
  co.store = store;
  co.secret = secret;
  co.listen_address = o.listen_address;
  co.job = o.job;
  co.rank = o.rank;
  co.size = o.ranks;
  // The engine's buffers live on train.device: the world is NCCL on this rank's GPU for cuda.
  ASSIGN_OR_RETURN(const Device device, TrainDevice(config.train));
  std::unique_ptr<comm::Communicator> world;
  if (device == Device::kCuda) {
    RETURN_IF_ERROR(SelectWorkerGpu(o));
    ASSIGN_OR_RETURN(world, comm::NewNcclCommunicator(EngineCommOptions(co), o.rank));
  } else {
    ASSIGN_OR_RETURN(world, comm::NewCpuCommunicator(EngineCommOptions(co)));
  }
  RETURN_IF_ERROR(world->WaitReady(boot).WithContext("world communicator"));
  WarnIfSlow(phase, "rank " + std::to_string(o.rank) + ": the job's store and rank links");
  const double links_s = MonoSeconds() - phase;
  phase = MonoSeconds();
  ASSIGN_OR_RETURN(auto tokens, LoadTrainTokens(config.data.dir,
                                                static_cast<uint32_t>(config.model.vocab_size)));
  std::shared_ptr<const std::vector<uint16_t>> val_tokens;
  if (config.eval.every > 0) {
    ASSIGN_OR_RETURN(val_tokens, LoadShardTokens(config.data.dir + "/val.bin",
                                                 static_cast<uint32_t>(config.model.vocab_size)));
  }
  const double data_s = MonoSeconds() - phase;
  phase = MonoSeconds();
  ASSIGN_OR_RETURN(std::unique_ptr<DistTrainer> engine,
                   DistTrainer::Create(config, layout, *world, tokens, std::chrono::seconds(120),
                                       o.resume ? WeightInit::kForLoad : WeightInit::kFromSeed));
  WarnIfSlow(phase, "rank " + std::to_string(o.rank) + ": setting up the engine");
  const double engine_s = MonoSeconds() - phase;
  double storage_s = 0;
  std::unique_ptr<RunCheckpoints> checkpoints;
  if (o.stop_at && config.ckpt.every <= 0)
    return InvalidArgument(
        "a worker that stops for planned changes needs ckpt.dir and "
        "ckpt.every > 0 (it saves a checkpoint where it stops)");
  if (o.resume || config.ckpt.every > 0 || o.memory != nullptr) {
    ckpt::StorageOptions storage;
    storage.secret = secret;  // the cluster secret of a ringfs:// ckpt.dir
    // With a memory tier, a chunk store out of reach fails the saves to it, not the run.
    storage.connect_lazily = o.memory != nullptr;
    phase = MonoSeconds();
    ASSIGN_OR_RETURN(checkpoints, RunCheckpoints::Create(config, DescribeLayout(layout),
                                                         world.get(), device, o.memory, storage));
    WarnIfSlow(phase, "rank " + std::to_string(o.rank) + ": opening the checkpoint storage");
    storage_s = MonoSeconds() - phase;
  }
  LOG_INFO(
      "rank {} set up in {:.3f} s (store and rank links {:.3f} s, data {:.3f} s, engine {:.3f} s, "
      "checkpoint storage and run id {:.3f} s)",
      o.rank, MonoSeconds() - started, links_s, data_s, engine_s, storage_s);
  const bool lead = o.rank == 0;
  TrainLoopOptions loop;
  loop.stop_after = o.stop_after;
  loop.print = lead;
  loop.prefix = "ringtrain_dist: ";
  loop.stop_at = o.stop_at;
  // What the rank did since the last call, to the on_activity hook.
  auto note_activity = [&o, &engine, &checkpoints] {
    if (!o.on_activity) return;
    RankActivity activity;
    if (checkpoints) activity.checkpoints = checkpoints->TakeTransfers();
    activity.comm = GroupTraffic(engine->groups());
    o.on_activity(activity);
  };
  if (o.on_stopped)
    loop.on_stopped = [&o, &note_activity](int64_t step, const std::string& snapshot_in) {
      note_activity();
      o.on_stopped(step, snapshot_in);
    };
  if (o.resume) RETURN_IF_ERROR(ResumeTraining(*engine, *checkpoints, loop));
  WorkerReporter reporter(config, o, lead, note_activity);
  if (lead) {
    std::printf("ringtrain_dist: %s on %d ranks, %lld steps\n", DescribeLayout(layout).c_str(),
                o.ranks, static_cast<long long>(config.train.steps));
    RETURN_IF_ERROR(reporter.OpenMetrics(o.resume));
  }
  const Status trained =
      RunTrainLoop(config, *engine, checkpoints.get(), val_tokens, loop, reporter);
  note_activity();
  return trained;
}

// Starts the N workers (writing to this process's stdout and stderr; each in its own process
// group and killed when this launcher dies, so none trains on as an orphan) and waits for all of
// them. When one fails the others get SIGTERM and, 5 s later, SIGKILL. Returns the first failure,
// naming its rank.
Status RunWorkers(const DistTrainOptions& o, const std::string& executable,
                  const std::string& store) {
  asio::io_context io;
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int r = 0; r < o.ranks; ++r) {
    SpawnOptions spawn;
    spawn.argv = WorkerArguments(o, r, store);
    spawn.argv.insert(spawn.argv.begin(), executable);
    spawn.env = EnvironmentWithout({});
    spawn.inherit_output = true;
    Result<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Spawn(io.get_executor(), std::move(spawn));
    // Returning destroys the workers started so far, which kills and reaps them.
    if (!child.ok()) return child.status().WithContext("start worker rank " + std::to_string(r));
    workers.push_back(std::move(*child));
  }
  Status first;
  size_t running = workers.size();
  asio::steady_timer kill_timer(io);
  auto watch = [&](size_t rank) -> asio::awaitable<void> {
    // A run may last longer than any one deadline; the workers bound their own waits.
    Result<ChildExit> exit = co_await workers[rank]->Wait(Deadline::After(std::chrono::hours(1)));
    while (!exit.ok() && exit.status().code() == StatusCode::kDeadlineExceeded)
      exit = co_await workers[rank]->Wait(Deadline::After(std::chrono::hours(1)));
    if (--running == 0) kill_timer.cancel();
    Status failed = !exit.ok()   ? exit.status()
                    : exit->ok() ? Status()
                                 : Internal("worker rank " + std::to_string(rank) + " failed (" +
                                            exit->Describe() + ")");
    if (failed.ok() || !first.ok()) co_return;
    first = std::move(failed);
    for (const auto& w : workers)
      if (!w->exit()) (void)w->Signal(SIGTERM);
    kill_timer.expires_after(std::chrono::seconds(5));
    kill_timer.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      for (const auto& w : workers)
        if (!w->exit()) (void)w->Signal(SIGKILL);
    });
  };
  for (size_t r = 0; r < workers.size(); ++r) asio::co_spawn(io, watch(r), asio::detached);
  io.run();
  return first;
}

}  // namespace

std::vector<std::string> WorkerArguments(const DistTrainOptions& o, int rank,
                                         const std::string& store) {
  std::vector<std::string> a = o.command;
  if (!o.config.empty()) a.insert(a.end(), {"--config", o.config});
  for (const std::string& s : o.sets) a.insert(a.end(), {"--set", s});
  if (o.steps >= 0) a.insert(a.end(), {"--steps", std::to_string(o.steps)});
  if (o.stop_after >= 0) a.insert(a.end(), {"--stop-after", std::to_string(o.stop_after)});
  if (o.resume) a.push_back("--resume");
  a.insert(a.end(), {"--layout", o.layout, "--ranks", std::to_string(o.ranks), "--rank",
                     std::to_string(rank), "--store", store, "--job", o.job});
  if (!o.secret_file.empty()) a.insert(a.end(), {"--secret-file", o.secret_file});
  for (std::string& arg : net::TlsArguments(o.tls)) a.push_back(std::move(arg));
  return a;
}

RunSecret::~RunSecret() {
  if (dir_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

namespace {

// Removes `parent`/ringtrain-run-PID-* folders whose launcher PID no longer runs. A folder of a
// live process (or one this user may not signal) stays; errors are ignored: it is tidying.
void RemoveFoldersOfGoneLaunchers(const std::string& parent) {
  const std::string prefix = "ringtrain-run-";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    std::filesystem::remove_all(entry.path(), ignored);
  }
}

}  // namespace

Result<std::unique_ptr<RunSecret>> RunSecret::Create() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string parent = tmp && *tmp ? tmp : "/tmp";
  RemoveFoldersOfGoneLaunchers(parent);
  std::string templ = parent + "/ringtrain-run-" + std::to_string(::getpid()) + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr)
    return ErrnoStatus(errno, "create a folder for the run's secret under '" + templ + "'");
  std::unique_ptr<RunSecret> run(new RunSecret());
  run->dir_ = templ;  // mode 0700 (mkdtemp); removed by the destructor from here on
  run->path_ = templ + "/secret";
  RETURN_IF_ERROR(net::ClusterSecret::Create(run->path_));
  ASSIGN_OR_RETURN(run->secret_, net::ClusterSecret::Load(run->path_));
  return run;
}

Status RunDistributedTrain(const DistTrainOptions& o, const std::string& executable) {
  ASSIGN_OR_RETURN(ParallelLayout layout, ParseLayout(o.layout));
  if (o.ranks != layout.world())
    return InvalidArgument("--ranks " + std::to_string(o.ranks) + " does not match the layout " +
                           DescribeLayout(layout) + " (" + std::to_string(layout.world()) +
                           " ranks)");
  if (o.rank >= 0) {
    if (o.rank >= o.ranks)
      return InvalidArgument("--rank " + std::to_string(o.rank) + " ≥ --ranks");
    return RunWorker(o).WithContext("rank " + std::to_string(o.rank));
  }
  // The config is validated here so that a bad one (or too few GPUs) fails once, before any
  // worker starts.
  ASSIGN_OR_RETURN(RunConfig config, LoadConfig(o));
  ASSIGN_OR_RETURN(const Device device, TrainDevice(config.train));
  if (device == Device::kCuda) RETURN_IF_ERROR(CheckLocalGpus(o.ranks));
  if (o.resume && config.ckpt.dir.empty())
    return InvalidArgument("--resume needs ckpt.dir: the folder or URI of the checkpoints");
  // The store and the rank links accept only this run's processes: those holding the secret
  // file given (the cluster's, which a ringfs:// ckpt.dir needs too), else a fresh one.
  std::unique_ptr<RunSecret> run_secret;
  std::shared_ptr<const net::ClusterSecret> secret;
  DistTrainOptions workers = o;
  if (!o.secret_file.empty()) {
    ASSIGN_OR_RETURN(secret, net::ClusterSecret::LoadWithTls(o.secret_file, o.tls));
  } else {
    if (!o.tls.empty())
      return FailedPrecondition("TLS (--tls-*) needs the cluster secret too (--secret-file)");
    ASSIGN_OR_RETURN(run_secret, RunSecret::Create());
    secret = run_secret->secret();
    workers.secret_file = run_secret->path();
  }
  comm::TcpStoreServerOptions store_options;
  store_options.secret = secret;
  ASSIGN_OR_RETURN(std::unique_ptr<comm::TcpStoreServer> server,
                   comm::TcpStoreServer::Start(store_options));
  const std::string store = "127.0.0.1:" + std::to_string(server->port());
  Status s = RunWorkers(workers, executable, store);
  server->Stop();
  return s;
}

}  // namespace rt::parallel
