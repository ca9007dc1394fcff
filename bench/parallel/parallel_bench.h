// `ringtrain bench parallel`: step time, tokens/s, pipeline bubble and DDP overlap per layout.
#pragma once

// Runs the parallel-engine benchmark with command-line arguments argv[1..] (see
// bench_parallel.cc for them); prints a markdown table. Returns the exit status.
int RunParallelBench(int argc, char** argv);
