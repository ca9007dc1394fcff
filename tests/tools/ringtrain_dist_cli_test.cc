// ringtrain_dist and `ringtrain train --layout` end to end: ranks as local processes over the TCP
// store and the CPU backend, rank 0's metrics against the single-process Trainer, and bad input
// (including more CUDA ranks than GPUs), and the run's own secret: the same losses as workers
// over a store without one, the secret file removed at the end, an outsider refused.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/net/auth.h"
#include "base/net/tls_certs.h"
#include "base/process.h"
#include "comm/store.h"
#include "data/data_loader.h"
#include "data/token_shard.h"
#include "parallel/config.h"
#include "parallel/trainer.h"
#include "tests/parallel/test_util.h"

namespace rt::parallel {
namespace {

struct Exec {
  int code = -1;
  std::string output;
};

// Runs `binary args` and collects its exit code and output.
Exec ExecuteBinary(const std::string& binary, const std::string& args) {
  Exec e;
  const std::string cmd = binary + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return e;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) e.output.append(buf, n);
  const int status = pclose(p);
  e.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return e;
}

Exec Execute(const std::string& args) { return ExecuteBinary(RINGTRAIN_DIST_BIN, args); }

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("ringtrain_dist_cli_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    auto tokens = rt::testing::PatternTokens(20000, 97, 3);
    ASSERT_TRUE(WriteTokenShard((dir_ / "train_000.bin").string(), *tokens, 256).ok());
    auto val = rt::testing::PatternTokens(4000, 97, 3);
    ASSERT_TRUE(WriteTokenShard((dir_ / "val.bin").string(), *val, 256).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Sets() const {
    return "--config " + std::string(RINGTRAIN_SOURCE_DIR) +
           "/configs/tiny.toml --set data.dir=" + dir_.string() +
           " --set eval.every=5 --set eval.batches=2 --set metrics.path=" +
           (dir_ / "m.jsonl").string();
  }

  // Checks rank 0's metrics file of a finished 5-step run (micro_batches=2, and the config keys
  // `sets`) against one process, losses within `tolerance` relative.
  void ExpectMetricsMatchOneProcess(const std::vector<std::string>& sets = {},
                                    double tolerance = 1e-5);

  std::filesystem::path dir_;
};

TEST_F(CliTest, MixedLayoutProcessesMatchOneProcess) {
  const Exec e = Execute(
      Sets() + " --set train.micro_batches=2 --layout tp=2,pp=2,dp=2,zero=1 --ranks 8 --steps 5");
  ASSERT_EQ(e.code, 0) << e.output;
  ExpectMetricsMatchOneProcess();
}

TEST_F(CliTest, RingtrainTrainWithLayoutMatchesOneProcess) {
  const Exec e = ExecuteBinary(RINGTRAIN_BIN, "--log-level warn train " + Sets() +
                                                  " --set train.micro_batches=2 --layout "
                                                  "dp=2,zero=3 --ranks 2 --steps 5");
  ASSERT_EQ(e.code, 0) << e.output;
  ExpectMetricsMatchOneProcess();
}

TEST_F(CliTest, InterleavedFp16ProcessesMatchOneProcess) {
  const Exec e = Execute(Sets() +
                         " --set train.micro_batches=2 --set train.precision=fp16 "
                         "--layout pp=2,vpp=2,schedule=interleaved --ranks 2 --steps 5");
  ASSERT_EQ(e.code, 0) << e.output;
  // fp16 differs from one process by its rounding of differently-ordered sums
  // (precision_test.cc).
  ExpectMetricsMatchOneProcess({"train.precision=fp16"}, 2e-3);
}

// The metrics lines of `path` without the wall-clock field (tokens_per_s).
std::vector<nlohmann::json> MetricsWithoutTimings(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    j.erase("tokens_per_s");
    lines.push_back(std::move(j));
  }
  return lines;
}

TEST_F(CliTest, RunWithItsOwnSecretTrainsExactlyAsWorkersWithoutOne) {
  const std::string args =
      Sets() + " --set train.micro_batches=2 --layout dp=2 --ranks 2 --steps 5";
  // The launcher: a secret of its own under TMPDIR, gone when the run ends.
  const auto tmp = dir_ / "tmp";
  std::filesystem::create_directories(tmp);
  const Exec secured = ExecuteBinary("TMPDIR=" + tmp.string() + " " + RINGTRAIN_BIN,
                                     "--log-level warn train " + args);
  ASSERT_EQ(secured.code, 0) << secured.output;
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "the run's secret folder was left behind";
  const auto with_secret = MetricsWithoutTimings(dir_ / "m.jsonl");
  std::filesystem::remove(dir_ / "m.jsonl");
  // The reference: the same two workers over a store without a secret, started by hand.
  auto server = comm::TcpStoreServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string worker = std::string(RINGTRAIN_BIN) + " --log-level warn train " + args +
                             " --store 127.0.0.1:" + std::to_string((*server)->port()) + " --rank ";
  const Exec plain = ExecuteBinary("(" + worker + "0 2>&1 & p0=$!; " + worker + "1 2>&1 & p1=$!;",
                                   "wait $p0 && wait $p1)");
  ASSERT_EQ(plain.code, 0) << plain.output;
  const auto without_secret = MetricsWithoutTimings(dir_ / "m.jsonl");
  ASSERT_EQ(with_secret.size(), 6u);       // 5 steps and the evaluation
  EXPECT_EQ(with_secret, without_secret);  // bitwise: losses, grad norms, validation loss
}

// `--secret-file` with `--tls-dir`: the run's store is reached over mutual TLS by the launcher and
// by its workers (given the TLS files by path), and the run trains as without it.
TEST_F(CliTest, RunOverTlsTrains) {
  const std::string tls = (dir_ / "tls").string(), secret = (dir_ / "secret").string();
  ASSERT_TRUE(net::CreateTlsFiles(tls, {"client"}, 30).ok());
  ASSERT_TRUE(net::ClusterSecret::Create(secret).ok());
  const Exec run = ExecuteBinary(
      RINGTRAIN_BIN, "--log-level info train " + Sets() +
                         " --set train.micro_batches=2 --layout dp=2 --ranks 2 --steps 5 "
                         "--secret-file " +
                         secret + " --tls-dir " + tls);
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(MetricsWithoutTimings(dir_ / "m.jsonl").size(), 6u);  // 5 steps and the evaluation
  // TLS files without the secret are refused before anything starts.
  const Exec alone =
      ExecuteBinary(RINGTRAIN_BIN, "--log-level warn train " + Sets() +
                                       " --layout dp=2 --ranks 2 --steps 5 --tls-dir " + tls);
  EXPECT_NE(alone.code, 0) << alone.output;
  EXPECT_NE(alone.output.find("needs the cluster secret"), std::string::npos) << alone.output;
}

TEST_F(CliTest, TheSecretFolderOfAKilledLauncherIsRemovedByTheNextRun) {
  const auto tmp = dir_ / "tmp";
  std::filesystem::create_directories(tmp);
  // A folder named after a live launcher (this test's process) and an unrelated one stay.
  const auto live = tmp / ("ringtrain-run-" + std::to_string(::getpid()) + "-live00");
  std::filesystem::create_directories(live);
  std::filesystem::create_directories(tmp / "ringtrain-other");
  const std::string env = "TMPDIR=" + tmp.string() + " ";
  // A long run whose launcher is killed with -9 once its secret folder exists.
  const Exec killed =
      ExecuteBinary("(" + env + RINGTRAIN_BIN,
                    "--log-level warn train " + Sets() +
                        " --layout dp=2 --ranks 2 --steps 100000 >/dev/null "
                        "2>&1 & p=$!; for i in $(seq 600); do ls -d " +
                        tmp.string() +
                        "/ringtrain-run-$p-* "
                        ">/dev/null 2>&1 && break; sleep 0.05; done; kill -9 $p; wait $p; ls -d " +
                        tmp.string() + "/ringtrain-run-$p-*)");
  ASSERT_EQ(killed.code, 0) << "the killed launcher's folder was not there: " << killed.output;
  const Exec next = ExecuteBinary(env + RINGTRAIN_BIN, "--log-level warn train " + Sets() +
                                                           " --layout dp=2 --ranks 2 --steps 2");
  ASSERT_EQ(next.code, 0) << next.output;
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(tmp))
    left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"ringtrain-other", live.filename().string()}));
}

TEST_F(CliTest, AWorkerWithoutTheRunSecretIsRefusedByTheStore) {
  comm::TcpStoreServerOptions o;
  o.secret = net::ClusterSecret::FromKey("0123456789abcdef0123456789abcdef");
  auto server = comm::TcpStoreServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const Exec e = ExecuteBinary(RINGTRAIN_BIN, "--log-level warn train " + Sets() +
                                                  " --layout dp=2 --ranks 2 --rank 1 --steps 5"
                                                  " --store 127.0.0.1:" +
                                                  std::to_string((*server)->port()));
  EXPECT_NE(e.code, 0) << e.output;
  EXPECT_NE(e.output.find("Unauthenticated"), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("requires the cluster secret"), std::string::npos) << e.output;
  EXPECT_EQ((*server)->size(), 0u);  // it wrote nothing
}

void CliTest::ExpectMetricsMatchOneProcess(const std::vector<std::string>& sets, double tolerance) {
  // The single-process run of the same config.
  std::vector<std::string> all = {"data.dir=" + dir_.string(), "train.micro_batches=2",
                                  "train.steps=5"};
  all.insert(all.end(), sets.begin(), sets.end());
  Result<RunConfig> config =
      LoadRunConfig(std::string(RINGTRAIN_SOURCE_DIR) + "/configs/tiny.toml", all);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto tokens = LoadTrainTokens(dir_.string(), 256);
  ASSERT_TRUE(tokens.ok());
  auto trainer = Trainer::Create(*config, *tokens, "");
  ASSERT_TRUE(trainer.ok());
  std::ifstream metrics(dir_ / "m.jsonl");
  std::string line;
  int steps = 0;
  bool evaluated = false;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) {
      // After the last step: the same validation loss as one process.
      auto val = LoadShardTokens((dir_ / "val.bin").string(), 256);
      ASSERT_TRUE(val.ok());
      Result<double> expected = (*trainer)->Evaluate(*val, 2);
      ASSERT_TRUE(expected.ok());
      EXPECT_EQ(j["step"].get<int64_t>(), 5);
      EXPECT_NEAR(j["val_loss"].get<double>(), *expected, tolerance * *expected);
      evaluated = true;
      continue;
    }
    Result<StepStats> s = (*trainer)->Step();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(j["step"].get<int64_t>(), s->step);
    EXPECT_NEAR(j["loss"].get<double>(), s->loss, tolerance * s->loss);
    EXPECT_EQ(j.contains("loss_scale"), config->train.precision == "fp16");
    if (j.contains("loss_scale")) {
      EXPECT_EQ(j["loss_scale"].get<double>(), s->loss_scale);
    }
    EXPECT_DOUBLE_EQ(j["lr"].get<double>(), s->lr);
    EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
    ++steps;
  }
  EXPECT_EQ(steps, 5);
  EXPECT_TRUE(evaluated);
}

// The whole file, or "" when it cannot be read.
std::string ReadFileOrEmpty(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The live (not zombie) children of `parent`, from /proc/*/stat.
std::vector<pid_t> LiveChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const size_t close = line.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %ld", &state, &ppid) != 2) continue;
    if (ppid == parent && state != 'Z' && state != 'X')
      children.push_back(static_cast<pid_t>(std::stol(entry.path().filename().string())));
  }
  return children;
}

// True while `pid` exists and is not a zombie.
bool Alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' &&
         line[close + 2] != 'X';
}

// Starts a long `ringtrain_dist --layout dp=2 --ranks 2` run (output to `log`) and waits until
// both workers run; returns the launcher and the workers' pids.
std::pair<StartedChild, std::vector<pid_t>> StartLongRun(const std::string& sets,
                                                         const std::filesystem::path& log) {
  SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c",
                "exec " + std::string(RINGTRAIN_DIST_BIN) + " " + sets +
                    " --layout dp=2 --ranks 2 --steps 1000000 >" + log.string() + " 2>&1"};
  spawn.env = {"PATH=/usr/bin:/bin"};
  Result<StartedChild> launcher = StartChild(spawn);
  EXPECT_TRUE(launcher.ok()) << launcher.status().ToString();
  if (!launcher.ok()) return {};
  std::vector<pid_t> workers;
  for (int i = 0; i < 3000 && workers.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    workers = LiveChildrenOf(launcher->pid);
  }
  EXPECT_EQ(workers.size(), 2u);
  return {*launcher, workers};
}

// Waits (at most 60 s) for the child behind `launcher` to exit and reaps it.
Result<ChildExit> AwaitExit(const StartedChild& launcher) {
  pollfd p{launcher.pidfd, POLLIN, 0};
  if (::poll(&p, 1, 60'000) != 1) return DeadlineExceeded("the launcher still runs after 60 s");
  Result<ChildExit> exit = ReapChild(launcher.pidfd);
  ::close(launcher.pidfd);
  return exit;
}

// kill -9 of the launcher takes its workers with it (they are tied to it by PR_SET_PDEATHSIG): no
// rank trains on as an orphan.
TEST_F(CliTest, KillNineOfTheLauncherLeavesNoWorkerRunning) {
  auto [launcher, workers] = StartLongRun(Sets(), dir_ / "run.log");
  ASSERT_EQ(workers.size(), 2u) << ReadFileOrEmpty(dir_ / "run.log");
  ASSERT_EQ(::kill(launcher.pid, SIGKILL), 0);
  ASSERT_TRUE(AwaitExit(launcher).ok());
  for (int i = 0; i < 500 && (Alive(workers[0]) || Alive(workers[1])); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(Alive(workers[0]));
  EXPECT_FALSE(Alive(workers[1]));
}

// kill -9 of one worker ends the run: the launcher stops the other one and exits with an error
// naming the rank that failed and how.
TEST_F(CliTest, KillNineOfAWorkerEndsTheRunNamingTheRank) {
  auto [launcher, workers] = StartLongRun(Sets(), dir_ / "run.log");
  ASSERT_EQ(workers.size(), 2u) << ReadFileOrEmpty(dir_ / "run.log");
  ASSERT_EQ(::kill(workers[1], SIGKILL), 0);
  Result<ChildExit> exit = AwaitExit(launcher);
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_TRUE(exit->exited && exit->exit_code != 0) << exit->Describe();
  const std::string log = ReadFileOrEmpty(dir_ / "run.log");
  EXPECT_NE(log.find("failed (signal 9"), std::string::npos) << log;
  EXPECT_FALSE(Alive(workers[0]));
}

TEST_F(CliTest, BadInputGivesAClearErrorAndNonZeroExit) {
  Exec e = Execute(Sets() + " --layout dp=2 --ranks 3 --steps 1");
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.output.find("--ranks 3"), std::string::npos) << e.output;
  e = Execute(Sets() + " --layout dp=2,tpp=2 --ranks 2 --steps 1");
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.output.find("tpp"), std::string::npos) << e.output;
  e = Execute(Sets() + " --set train.batch_size=6 --layout dp=4 --ranks 4 --steps 1");
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.output.find("batch_size"), std::string::npos) << e.output;
  // One GPU per rank: 16 CUDA ranks need 16 GPUs, more than a test machine has (refused by the
  // launcher before any worker starts, naming train.device, whether the build has no CUDA
  // backend, the machine no GPU or too few).
  e = Execute(Sets() + " --set 'train.device=\"cuda\"' --set train.batch_size=16 --layout dp=16 " +
              "--ranks 16 --steps 1");
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.output.find("train.device = \"cuda\""), std::string::npos) << e.output;
}

// With OPENBLAS_CORETYPE removed, `ringtrain train --layout` chooses the kernel set once (a probe,
// then one log line), its workers inherit it (they would log a line of their own, from the cache,
// had they chosen again), and the next run — `bench step`, which reports the set — takes it from
// the cache.
TEST_F(CliTest, TheGemmKernelChoiceIsMadeOnceLoggedOnceAndCached) {
  const std::string cache = (dir_ / "cache").string();
  const std::string ringtrain =
      "env -u OPENBLAS_CORETYPE -u RINGTRAIN_GEMM_KERNELS "
      "-u RINGTRAIN_FAULTS XDG_CACHE_HOME=" +
      cache + " " + RINGTRAIN_BIN;
  auto blas_lines = [](const std::string& output) {
    std::vector<std::string> lines;
    size_t at = 0;
    while ((at = output.find("BLAS: OpenBLAS", at)) != std::string::npos) {
      lines.push_back(output.substr(at, output.find('\n', at) - at));
      at += 1;
    }
    return lines;
  };
  const Exec train =
      ExecuteBinary(ringtrain, "train " + Sets() + " --layout dp=2 --ranks 2 --steps 2");
  ASSERT_EQ(train.code, 0) << train.output;
  const std::vector<std::string> first = blas_lines(train.output);
  ASSERT_EQ(first.size(), 1u) << train.output;
  EXPECT_NE(first[0].find(" (auto; "), std::string::npos) << first[0];
  const size_t name_at = first[0].find("kernels ") + 8;
  const std::string kernels = first[0].substr(name_at, first[0].find(' ', name_at) - name_at);
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(cache + "/ringtrain"),
                          std::filesystem::directory_iterator()),
            1);

  const Exec bench =
      ExecuteBinary(ringtrain, "bench step --config tiny --steps 1 --warmup 0 --gemm-size 64");
  ASSERT_EQ(bench.code, 0) << bench.output;
  const std::vector<std::string> second = blas_lines(bench.output);
  ASSERT_EQ(second.size(), 2u) << "the log line and the benchmark's own:\n" << bench.output;
  EXPECT_NE(second[0].find("kernels " + kernels + " (auto, cached; "), std::string::npos)
      << second[0];
  const size_t json_at = bench.output.find("JSON ");
  ASSERT_NE(json_at, std::string::npos) << bench.output;
  const nlohmann::json j = nlohmann::json::parse(
      bench.output.substr(json_at + 5, bench.output.find('\n', json_at) - json_at - 5));
  EXPECT_EQ(j["blas_kernels"], kernels);
  EXPECT_TRUE(j["blas_chosen"].get<std::string>().starts_with("auto, cached; ")) << j.dump();
}

}  // namespace
}  // namespace rt::parallel
