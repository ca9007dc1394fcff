// `ringtrain bench comm`: collective timings of the CPU backend with ranks as processes.
#pragma once

#include <string>
#include <vector>

// Runs the benchmark with arguments argv[1..] (see bench_comm.cc). The launcher starts each rank
// as /proc/self/exe with `relaunch` (argv[0] and any subcommand words, e.g. {"ringtrain",
// "bench", "comm"}) followed by the same arguments and the worker's own. Returns the exit status.
int RunCommBench(int argc, char** argv, const std::vector<std::string>& relaunch);
