// `ringtrain bench step --config s|m|FILE` (training-step throughput) and `ringtrain bench
// kernels` (the kernel benchmarks of bench/kernels, when built).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/ckpt/ckpt_bench.h"
#include "bench/comm/comm_bench.h"
#include "bench/kernels/kernels_bench.h"
#include "bench/parallel/parallel_bench.h"
#include "kernels/gemm_kernels.h"
#include "kernels/ops.h"
#include "model/rng.h"
#include "parallel/trainer.h"
#include "tools/ringtrain/commands.h"

namespace rt::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchStepOptions {
  std::string config = "s";
  std::vector<std::string> sets;
  int steps = 20;
  int warmup = 3;
  int gemm_size = 1024;
};

// A config name ("s", "m", "tiny") resolves to configs/<name>.toml of the source tree.
std::string ResolveConfig(const std::string& name) {
  if (std::filesystem::exists(name)) return name;
  return std::string(RINGTRAIN_SOURCE_DIR) + "/configs/" + name + ".toml";
}

// Square f32 GEMMs on the training device (OpenBLAS sgemm on the CPU, cuBLASLt on CUDA) timed
// one at a time, so the measurements can be interleaved with the training steps and see the same
// machine load.
class SgemmProbe {
 public:
  static Result<SgemmProbe> Create(int n, Device device) {
    SgemmProbe p;
    p.n_ = n;
    p.device_ = device;
    const size_t bytes = static_cast<size_t>(n) * n * sizeof(float);
    ASSIGN_OR_RETURN(p.a_, Buffer::Allocate(device, bytes));
    ASSIGN_OR_RETURN(p.b_, Buffer::Allocate(device, bytes));
    ASSIGN_OR_RETURN(p.c_, Buffer::Allocate(device, bytes));
    Rng rng(1);
    std::vector<float> a(static_cast<size_t>(n) * n), b(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<float>(rng.Uniform() - 0.5);
      b[i] = static_cast<float>(rng.Uniform() - 0.5);
    }
    const Shape s{n, n};
    RETURN_IF_ERROR(Copy(p.a_.View(DType::kF32, s), Tensor(a.data(), DType::kF32, s)));
    RETURN_IF_ERROR(Copy(p.b_.View(DType::kF32, s), Tensor(b.data(), DType::kF32, s)));
    return p;
  }
  // GFLOP/s of one n×n×n GEMM (waiting for the device to finish it).
  Result<double> Measure() {
    const Shape s{n_, n_};
    const auto start = Clock::now();
    RETURN_IF_ERROR(Gemm(c_.View(DType::kF32, s), a_.View(DType::kF32, s), b_.View(DType::kF32, s),
                         false, true, 1.0f, 0.0f));
    RETURN_IF_ERROR(Synchronize(device_));
    const double sec = std::chrono::duration<double>(Clock::now() - start).count();
    return 2.0 * n_ * n_ * static_cast<double>(n_) / sec / 1e9;
  }

 private:
  int n_ = 0;
  Device device_ = Device::kCpu;
  Buffer a_, b_, c_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Status RunBenchStep(const BenchStepOptions& opt) {
  const std::string path = ResolveConfig(opt.config);
  ASSIGN_OR_RETURN(RunConfig config, LoadRunConfig(path, opt.sets));
  config.eval.every = 0;
  config.train.steps = opt.warmup + opt.steps;
  // Synthetic tokens: throughput does not depend on the text.
  auto tokens = std::make_shared<std::vector<uint16_t>>(1 << 20);
  Rng rng(7);
  for (auto& t : *tokens) t = static_cast<uint16_t>(rng.Below(config.model.vocab_size));
  ASSIGN_OR_RETURN(auto trainer, Trainer::Create(config, tokens, ""));
  const Device device = trainer->model().device();
  ASSIGN_OR_RETURN(SgemmProbe probe, SgemmProbe::Create(opt.gemm_size, device));
  for (int i = 0; i < opt.warmup; ++i) RETURN_IF_ERROR(trainer->Step().status());
  RETURN_IF_ERROR(Synchronize(device));
  RETURN_IF_ERROR(probe.Measure().status());
  // Steps and sgemm probes alternate; medians keep a busy machine's spikes out of both figures.
  std::vector<double> step_seconds, sgemm_gflops;
  double last_loss = 0;
  for (int i = 0; i < opt.steps; ++i) {
    const auto start = Clock::now();
    ASSIGN_OR_RETURN(StepStats s, trainer->Step());
    RETURN_IF_ERROR(Synchronize(device));  // the step's last updates are only enqueued
    step_seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    last_loss = s.loss;
    ASSIGN_OR_RETURN(double g, probe.Measure());
    sgemm_gflops.push_back(g);
  }
  const double seconds = Median(step_seconds);
  const ModelConfig& m = config.model;
  const double tokens_per_s = static_cast<double>(config.train.batch_size) * m.seq_len / seconds;
  // PaLM's count: 6 FLOPs per parameter and token (wpe excluded: a lookup, no multiply) plus
  // the attention scores and weighted sum, 12·L·C·T per token.
  const double n_params = static_cast<double>(trainer->model().num_params()) -
                          static_cast<double>(m.seq_len) * m.n_embd;
  const double flops_per_token = 6.0 * n_params + 12.0 * m.n_layer * m.n_embd * m.seq_len;
  const double gflops = tokens_per_s * flops_per_token / 1e9;
  const double sgemm = Median(sgemm_gflops);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  const char* threads = std::getenv("OPENBLAS_NUM_THREADS");
  std::printf(
      "config %s: L=%d C=%d H=%d T=%d B=%d micro=%d %s on %s, %lld params, OpenBLAS threads %s\n",
      opt.config.c_str(), m.n_layer, m.n_embd, m.n_head, m.seq_len, config.train.batch_size,
      config.train.micro_batches, config.train.precision.c_str(), DeviceName(device),
      static_cast<long long>(trainer->model().num_params()), threads ? threads : "default");
  std::printf("tokens/s        %.0f  (median step %.4f s of %d, last loss %.4f)\n", tokens_per_s,
              seconds, opt.steps, last_loss);
  std::printf("achieved        %.2f GFLOP/s  (%.3g FLOP/token = 6N + 12LCT)\n", gflops,
              flops_per_token);
  std::printf("%s %.2f GFLOP/s  (f32 %d^3, median, between the steps) -> %.0f%% of peak\n",
              device == Device::kCpu ? "sgemm peak     " : "cuBLASLt peak  ", sgemm, opt.gemm_size,
              100.0 * gflops / sgemm);
  std::printf("peak RSS        %.1f MiB\n", rss_mib);
  const GemmKernelsInUse blas = CurrentGemmKernels();
  if (device == Device::kCpu) std::printf("%s\n", blas.Line().c_str());
  const nlohmann::json line = {
      {"config", opt.config},         {"device", DeviceName(device)},
      {"tokens_per_s", tokens_per_s}, {"gflops", gflops},
      {"sgemm_gflops", sgemm},        {"peak_rss_mib", rss_mib},
      {"steps", opt.steps},           {"threads", threads ? threads : "default"},
      {"blas_kernels", blas.kernels}, {"blas_chosen", blas.how}};
  std::printf("JSON %s\n", line.dump().c_str());
  return Status();
}

// Registers `bench NAME [args...]`: the remaining arguments, --help included, go to `run` as
// argv[1..]; a non-zero exit status becomes an error.
void AddPassThrough(CLI::App* bench, const std::string& name, const std::string& description,
                    Action* action, std::function<int(int, char**)> run) {
  CLI::App* sub = bench->add_subcommand(name, description);
  sub->allow_extras();
  sub->prefix_command();
  sub->set_help_flag();
  sub->callback([=] {
    std::vector<std::string> args = sub->remaining();
    *action = [args, name, run]() -> Status {
      std::vector<std::string> owned = {"ringtrain bench " + name};
      owned.insert(owned.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : owned) argv.push_back(a.data());
      const int rc = run(static_cast<int>(argv.size()), argv.data());
      if (rc != 0) return Internal(name + " benchmarks exited with status " + std::to_string(rc));
      return Status();
    };
  });
}

}  // namespace

void AddBenchCommand(CLI::App& app, Action* action) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* step = bench->add_subcommand("step", "Training-step throughput, FLOP/s and memory");
  auto opt = std::make_shared<BenchStepOptions>();
  step->add_option("--config", opt->config, "s, m, tiny or a TOML file")->capture_default_str();
  step->add_option("--set", opt->sets, "override a config key");
  step->add_option("--steps", opt->steps, "timed steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  step->add_option("--warmup", opt->warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  step->add_option("--gemm-size", opt->gemm_size, "n of the n^3 f32 GEMM peak measurement")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  step->callback([=] { *action = [=] { return RunBenchStep(*opt); }; });

  AddPassThrough(bench, "kernels",
                 "Kernel benchmarks (bench/kernels); arguments pass through, e.g. --config=S",
                 action, [](int argc, char** argv) { return RunKernelsBench(argc, argv); });
  AddPassThrough(bench, "comm",
                 "Collective benchmarks, ranks as processes: --op OP --ranks N --sizes LIST",
                 action, [](int argc, char** argv) {
                   return RunCommBench(argc, argv, {"/proc/self/exe", "bench", "comm"});
                 });
  AddPassThrough(bench, "parallel",
                 "Parallel-engine benchmark per layout: --layouts \"dp=2;pp=2,schedule=1f1b\"",
                 action, [](int argc, char** argv) { return RunParallelBench(argc, argv); });
  AddPassThrough(bench, "ckpt",
                 "Checkpoint save stall, throughput, load and codecs: --config m --layout dp=2 "
                 "--dir DIR [--ringfs URI]",
                 action, [](int argc, char** argv) { return RunCkptBench(argc, argv); });
}

}  // namespace rt::cli
