// ringtrain_bench_parallel: the parallel-engine benchmark as a standalone executable.
#include "bench/parallel/parallel_bench.h"

int main(int argc, char** argv) { return RunParallelBench(argc, argv); }
