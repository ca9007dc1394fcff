// `ringtrain demo`: the product's story on a local cluster (what `tools/run demo` runs through
// tools/demo.sh): 4 daemons, a job with pipeline (or tensor) and data parallelism and
// checkpoints, live progress, kill -9 of a daemon and the recovery, the node back and the job
// growing, the end, `ringckpt verify` and an offline `ringckpt reshard`, then the validation loss
// and a sample of the trained weights. Every phase prints one line starting "== ". Every process
// it started is stopped on the way out, also on Ctrl-C or SIGTERM.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <toml++/toml.h>

#include "base/subprocess.h"
#include "base/wall_clock.h"
#include "tools/ringtrain/commands.h"
#include "tools/ringtrain/demo_watch.h"
#include "tools/ringtrain/local_cluster.h"

namespace rt::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct DemoOptions {
  std::string config;  // run config the job is made of (model, train, optim)
  std::string data;    // prepared data folder (train_*.bin, val.bin)
  std::string dir;     // state folder: daemons, checkpoints, exported weights
  int steps = 1000;
  int nodes = 4;
  int slots = 1;
  int tp = 1;
  int pp = 2;
  int ckpt_every = 10;
  int kill_node = 3;
  int timeout_s = 600;  // the whole story's deadline
};

// Prints one phase line and flushes (the output is often a pipe).
void Phase(const char* format, auto... args) {
  std::printf("== ");
  std::printf(format, args...);
  std::printf("\n");
  std::fflush(stdout);
}

// The job file: `config` with [job], [elastic], and the demo's steps, data, checkpoints.
Result<std::string> WriteJobFile(const DemoOptions& o) {
  toml::table job;
  try {
    job = toml::parse_file(o.config);
  } catch (const toml::parse_error& e) {
    return InvalidArgument(o.config + ": " + std::string(e.description()));
  }
  auto section = [&job](const char* name) -> toml::table& {
    if (!job.contains(name)) job.insert(name, toml::table{});
    return *job[name].as_table();
  };
  section("job").insert_or_assign("name", "demo");
  section("elastic").insert_or_assign("tp", o.tp);
  section("elastic").insert_or_assign("pp", o.pp);
  section("elastic").insert_or_assign("min_nodes", 1);
  section("train").insert_or_assign("steps", o.steps);
  section("train").insert_or_assign("log_every", 10);
  section("data").insert_or_assign("dir", fs::absolute(o.data).string());
  section("eval").insert_or_assign("every", 0);
  section("metrics").insert_or_assign("path", "");
  section("ckpt").insert_or_assign("dir", "ringfs:///ckpt");  // the daemons' chunk stores
  section("ckpt").insert_or_assign("every", o.ckpt_every);
  section("ckpt").insert_or_assign("keep", 3);
  section("ckpt").insert_or_assign("async", true);
  const std::string path = (fs::absolute(o.dir) / "job.toml").string();
  std::ofstream out(path, std::ios::trunc);
  out << "# Written by `ringtrain demo` from " << o.config << ".\n" << job << "\n";
  out.close();
  if (!out) return Status(StatusCode::kIoError, "writing " + path);
  return path;
}

// True when the status says the job has finished (rank 0 completed its last step).
bool Finished(const Json& s) {
  return s.contains("job") && s["job"].value("desire", "") == "finished";
}

// Runs a tool to completion and prints its output indented. Errors: the tool's failure, named.
Status RunTool(const std::vector<std::string>& argv, int timeout_s) {
  ASSIGN_OR_RETURN(ProcessOutcome r,
                   RunProcess(argv, EnvironmentWithout({}), Deadline::AfterMs(timeout_s * 1000LL)));
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) std::printf("   | %s\n", line.c_str());
  std::fflush(stdout);
  if (r.exited && r.exit_code == 0) return Status();
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  return Internal(command + " failed: " + r.Describe());
}

// The story on a started cluster. Returns at the first failure.
Status RunStory(const DemoOptions& o, LocalCluster& cluster, DemoWatch& watch) {
  const Deadline deadline = Deadline::AfterMs(o.timeout_s * 1000LL);
  RETURN_IF_ERROR(cluster.WaitForMembers(static_cast<size_t>(o.nodes), deadline, StopRequested));
  Phase("%d daemons formed one view; ringctl --daemon %s --secret-file %s status", o.nodes,
        cluster.Address(1).c_str(), cluster.SecretFile().c_str());

  ASSIGN_OR_RETURN(const std::string job_file, WriteJobFile(o));
  ASSIGN_OR_RETURN(const std::string ringctl, FindTool("ringctl"));
  Phase(
      "submitting %s: %d steps, tp=%d pp=%d and data parallelism over the rest, a checkpoint "
      "every %d steps into the daemons' chunk store (ckpt.dir = \"ringfs:///ckpt\")",
      fs::path(o.config).filename().c_str(), o.steps, o.tp, o.pp, o.ckpt_every);
  RETURN_IF_ERROR(RunTool({ringctl, "--daemon", cluster.Address(1), "--secret-file",
                           cluster.SecretFile(), "submit", job_file},
                          60));

  // Between two checkpoints, so the recovery has steps to lose.
  const int kill_at = std::max(o.ckpt_every + 2, o.steps / 4 + o.ckpt_every / 2);
  Phase("training; live progress (step, loss, tokens/s, layout, generation) until step %d",
        kill_at);
  ASSIGN_OR_RETURN(Json s, watch.Until(
                               "step " + std::to_string(kill_at),
                               [&](const Json& s) { return Step(s) >= kill_at; }, deadline));
  const std::string generation_before = Generation(s);

  const pid_t victim = cluster.DaemonPid(o.kill_node);
  const std::vector<pid_t> orphans = WorkerPids(s, o.kill_node);
  Phase("kill -9 of daemon %d (pid %d; its %zu worker(s) die with it)", o.kill_node,
        static_cast<int>(victim), orphans.size());
  const auto killed_at = std::chrono::steady_clock::now();
  const int64_t killed_unix_ms = UnixMs();
  watch.MarkLogs();
  RETURN_IF_ERROR(cluster.KillNode(o.kill_node));
  ASSIGN_OR_RETURN(s, cluster.WaitFor(
                          "the view without the killed node",
                          [&](const Json& s) {
                            return s["view"]["members"].size() == static_cast<size_t>(o.nodes - 1);
                          },
                          deadline, StopRequested));
  // When the answering daemon installed the view, not when this poll saw it (a poll begun
  // before the kill waits for the dying daemon's answer).
  const double detected =
      s["view"].contains("installed_unix_ms")
          ? (s["view"]["installed_unix_ms"].get<int64_t>() - killed_unix_ms) / 1000.0
          : std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  ASSIGN_OR_RETURN(s, watch.Until(
                          "the first step of a new generation",
                          [&](const Json& s) {
                            return !Generation(s).empty() && Generation(s) != generation_before &&
                                   Step(s) >= 1;
                          },
                          deadline));
  const double resumed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  Phase(
      "recovered: detected after %.1f s (view generation %s, %zu members), training again "
      "%.1f s after the kill; new layout %s",
      detected, s["view"]["generation"].dump().c_str(), s["view"]["members"].size(), resumed,
      Plan(s).c_str());
  RETURN_IF_ERROR(watch.PrintRecovery(deadline));

  Phase("bringing daemon %d back (same node.toml and port)", o.kill_node);
  watch.MarkLogs();
  RETURN_IF_ERROR(cluster.StartNode(o.kill_node));
  const std::string generation_shrunk = Generation(s);
  ASSIGN_OR_RETURN(s, watch.Until(
                          "the job on all nodes again",
                          [&](const Json& s) {
                            return Finished(s) ||
                                   (s["view"]["members"].size() == static_cast<size_t>(o.nodes) &&
                                    Generation(s) != generation_shrunk &&
                                    !WorkerPids(s, o.kill_node).empty() && Step(s) >= 1);
                          },
                          deadline));
  if (Finished(s))
    return FailedPrecondition("the job finished before daemon " + std::to_string(o.kill_node) +
                              " was back in it: give it more steps (--steps)");
  Phase("the job grew back to %zu nodes: layout %s", s["view"]["members"].size(), Plan(s).c_str());
  RETURN_IF_ERROR(watch.PrintRecovery(deadline));

  Phase("waiting for the end (step %d)", o.steps);
  ASSIGN_OR_RETURN(s, watch.Until("the job to finish", Finished, deadline));
  Phase("the job finished at step %d", o.steps);

  // The checkpoints live in the daemons' chunk stores: read them while the daemons serve.
  ASSIGN_OR_RETURN(const std::string ringckpt, FindTool("ringckpt"));
  const std::string ckpt = "ringfs://" + cluster.StoreAddress(1) + "/ckpt";
  const std::string resharded = (fs::absolute(o.dir) / "ckpt_tp2").string();
  Phase("ringckpt verify of the newest checkpoint in the chunk store, %s", ckpt.c_str());
  RETURN_IF_ERROR(RunTool({ringckpt, "--secret-file", cluster.SecretFile(), "verify", ckpt}, 120));
  std::error_code ec;
  fs::remove_all(resharded, ec);
  Phase("ringckpt reshard of it offline to tp=2,pp=1,dp=1 into the folder %s", resharded.c_str());
  return RunTool({ringckpt, "--secret-file", cluster.SecretFile(), "reshard", ckpt, "--to",
                  "tp=2,pp=1,dp=1", "--out", resharded},
                 120);
}

// After the cluster: the resharded checkpoint, the validation loss and a sample.
Status RunOffline(const DemoOptions& o) {
  ASSIGN_OR_RETURN(const std::string ringckpt, FindTool("ringckpt"));
  const std::string resharded = (fs::absolute(o.dir) / "ckpt_tp2").string();
  const std::string weights = (fs::absolute(o.dir) / "model.safetensors").string();
  const std::string val = (fs::absolute(o.data) / "val.bin").string();
  Phase("ringckpt verify of the resharded checkpoint in %s", resharded.c_str());
  RETURN_IF_ERROR(RunTool({ringckpt, "verify", resharded}, 120));
  Phase("ringckpt export of the resharded checkpoint to %s", weights.c_str());
  RETURN_IF_ERROR(RunTool({ringckpt, "export", resharded, "--out", weights}, 120));
  Phase("validation loss of the trained weights on %s", val.c_str());
  RETURN_IF_ERROR(RunTool({"/proc/self/exe", "--log-level", "warn", "eval", "--weights", weights,
                           "--data", val, "--batches", "20"},
                          120));
  Phase("a sample (temperature 0.8, top-k 40)");
  return RunTool({"/proc/self/exe", "--log-level", "warn", "sample", "--weights", weights,
                  "--prompt", "The secret of life is", "--tokens", "200", "--temperature", "0.8",
                  "--top-k", "40", "--seed", "7"},
                 120);
}

Status RunDemo(const DemoOptions& o) {
  InstallStopSignalHandlers();
  const auto started = std::chrono::steady_clock::now();
  if (o.kill_node < 2 || o.kill_node > o.nodes)
    return InvalidArgument("--kill-node must be 2.." + std::to_string(o.nodes) +
                           " (node 1 is the seed the others join through)");
  std::error_code ec;
  fs::remove_all(fs::path(o.dir) / "ckpt", ec);  // the demo's own folders, from a run before
  fs::remove_all(fs::path(o.dir) / "ckpt_tp2", ec);
  fs::remove_all(fs::path(o.dir) / "cluster", ec);
  LocalClusterOptions options;
  options.nodes = o.nodes;
  options.slots = o.slots;
  options.dir = (fs::path(o.dir) / "cluster").string();
  options.store = true;  // every daemon runs a chunk server; the job checkpoints there
  ASSIGN_OR_RETURN(options.daemon_binary, FindTool("ringtraind"));
  Phase(
      "starting %d ringtraind daemons on loopback (%d CPU slot(s) each, and a chunk server each: "
      "one store, replication %d), state in %s",
      o.nodes, o.slots, std::min(3, o.nodes), options.dir.c_str());
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  DemoWatch watch(*cluster, o.steps);
  Status story = RunStory(o, *cluster, watch);
  if (StopRequested()) Phase("interrupted: stopping every process the demo started");
  Phase("stopping the %zu daemons", cluster->RunningNodes().size());
  Status stopped = cluster->Stop(Deadline::AfterMs(30'000));
  cluster.reset();
  RETURN_IF_ERROR(story);
  if (!stopped.ok()) std::printf("   | %s\n", stopped.ToString().c_str());
  RETURN_IF_ERROR(RunOffline(o));
  Phase("demo done in %.0f s; every process it started has exited",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return Status();
}

}  // namespace

void AddDemoCommand(CLI::App& app, Action* action) {
  CLI::App* demo = app.add_subcommand(
      "demo", "The story on a local cluster: train, kill -9 a daemon, recover, grow, reshard");
  auto o = std::make_shared<DemoOptions>();
  demo->add_option("--config", o->config, "run config of the job (model, train, optim)")
      ->required();
  demo->add_option("--data", o->data, "prepared data folder (ringtrain data prepare)")->required();
  demo->add_option("--dir", o->dir, "state folder (daemons, checkpoints, weights)")->required();
  demo->add_option("--steps", o->steps, "optimizer steps of the job")
      ->check(CLI::Range(20, 1'000'000))
      ->capture_default_str();
  demo->add_option("--nodes", o->nodes, "daemons")->check(CLI::Range(2, 16))->capture_default_str();
  demo->add_option("--slots", o->slots, "CPU worker slots per daemon")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  demo->add_option("--tp", o->tp, "tensor-parallel ranks (inside a node)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  demo->add_option("--pp", o->pp, "pipeline stages")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  demo->add_option("--ckpt-every", o->ckpt_every, "checkpoint every N steps")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  demo->add_option("--kill-node", o->kill_node, "the daemon killed with kill -9 (not 1)")
      ->capture_default_str();
  demo->add_option("--timeout-s", o->timeout_s, "deadline of the whole cluster part")
      ->check(CLI::Range(10, 86'400))
      ->capture_default_str();
  demo->callback([=] { *action = [=] { return RunDemo(*o); }; });
}

}  // namespace rt::cli
