// `ringtrain`: the local front door (DESIGN.md "Binaries").
#include <cstdio>

#include "base/log.h"
#include "base/version.h"
#include "kernels/gemm_kernels.h"
#include "tools/ringtrain/commands.h"

int main(int argc, char** argv) {
  // First, before OpenBLAS is used and any thread starts: may re-execute this binary with the
  // chosen kernel set (kernels/gemm_kernels.h).
  if (rt::Status s = rt::SelectGemmKernels(argv); !s.ok()) {
    std::fprintf(stderr, "ringtrain: error: %s\n", s.ToString().c_str());
    return 1;
  }
  CLI::App app{
      "ringtrain: train GPT-2 models (data prepare, train, export, eval, sample, bench), "
      "run a local cluster (launch) and the demo"};
  app.set_version_flag("--version", std::string(rt::kRingtrainVersion));
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  rt::cli::Action action;
  rt::cli::AddDataCommand(app, &action);
  rt::cli::AddTrainCommand(app, &action);
  rt::cli::AddModelCommands(app, &action);
  rt::cli::AddBenchCommand(app, &action);
  rt::cli::AddLaunchCommand(app, &action);
  rt::cli::AddDemoCommand(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (rt::Status s = rt::InitLogging(log_level); !s.ok()) {
    std::fprintf(stderr, "ringtrain: %s\n", s.ToString().c_str());
    return 2;
  }
  rt::LogGemmKernels();
  if (!action) return 0;  // `bench kernels` and similar run inside their callback
  const rt::Status status = action();
  if (!status.ok()) {
    std::fprintf(stderr, "ringtrain: error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
