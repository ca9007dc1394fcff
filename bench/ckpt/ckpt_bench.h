// `ringtrain bench ckpt`: checkpoint save stall, save and load throughput (POSIX and ringfs),
// load into another layout, and bytes per codec, on the distributed engine.
#pragma once

// Runs the checkpoint benchmark with command-line arguments argv[1..] (see bench_ckpt.cc for
// them); prints markdown tables and one "JSON {...}" line. Returns the exit status.
int RunCkptBench(int argc, char** argv);
