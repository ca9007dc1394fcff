// The subcommands of `ringtrain`. Each Add*Command registers its CLI11 subcommand on `app`;
// when the user picks it, its callback stores the work to do in *action, which main() runs and
// turns into the exit status (0 on success; the error printed and 1 otherwise).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "base/status.h"

namespace rt::cli {

// The work of the chosen subcommand.
using Action = std::function<Status()>;

// `data prepare`.
void AddDataCommand(CLI::App& app, Action* action);
// `train`.
void AddTrainCommand(CLI::App& app, Action* action);
// `export`, `eval` and `sample`.
void AddModelCommands(CLI::App& app, Action* action);
// `bench step`, `bench kernels`, `bench comm` and `bench parallel`.
void AddBenchCommand(CLI::App& app, Action* action);
// `launch`: a local cluster of daemons (local_cluster.h).
void AddLaunchCommand(CLI::App& app, Action* action);
// `demo`: the story on a local cluster (demo_command.cc).
void AddDemoCommand(CLI::App& app, Action* action);

}  // namespace rt::cli
