// ringtrain_dist: train with a parallel layout on local worker processes.
//   ringtrain_dist --config configs/tiny.toml --layout tp=1,pp=2,dp=2,zero=1 --ranks 4 [--steps N]
//                  [--set key=value ...]
// (The lead folds this into `ringtrain train --layout ... --ranks N`.)
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "base/version.h"
#include "kernels/gemm_kernels.h"
#include "parallel/launch.h"
#include "tools/tls_flags.h"

int main(int argc, char** argv) {
  // First: may re-execute this binary with the chosen kernel set, which the workers inherit.
  if (rt::Status s = rt::SelectGemmKernelsAndLog(argv, "info", "ringtrain_dist"); !s.ok()) {
    std::fprintf(stderr, "ringtrain_dist: %s\n", s.ToString().c_str());
    return 1;
  }
  CLI::App app{"ringtrain_dist: distributed training on local worker processes"};
  app.set_version_flag("--version", std::string(rt::kRingtrainVersion));
  rt::parallel::DistTrainOptions o;
  app.add_option("--config", o.config, "TOML config file");
  app.add_option("--set", o.sets, "override a config key: key=value (repeatable)");
  app.add_option("--steps", o.steps, "optimizer steps (overrides train.steps)");
  app.add_option(
      "--layout", o.layout,
      "parallel layout: tp=,pp=,dp=,zero=,hsdp_shard=,sp=,schedule=gpipe|1f1b|interleaved,"
      "vpp= (model chunks per rank, interleaved)");
  app.add_option("--ranks", o.ranks, "local worker processes (the layout's world size)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--resume", o.resume,
               "continue from the newest committed checkpoint in ckpt.dir (any layout wrote it)");
  app.add_option("--rank", o.rank, "worker mode: this worker's rank")->group("");
  app.add_option("--store", o.store, "worker mode: rendezvous store host:port")->group("");
  app.add_option("--job", o.job, "worker mode: job name")->group("");
  app.add_option(
      "--secret-file", o.secret_file,
      "the cluster secret file: proven to the ringfsd of a ringfs:// ckpt.dir, and the "
      "run's secret for its store and rank links (else a fresh one is made for the run)");
  rt::tools::TlsFlags tls;
  rt::tools::AddTlsFlags(&app, &tls);
  CLI11_PARSE(app, argc, argv);
  o.tls = tls.Files();
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  const std::string exe = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
  const rt::Status s = rt::parallel::RunDistributedTrain(o, exe);
  if (!s.ok()) {
    std::fprintf(stderr, "ringtrain_dist: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
