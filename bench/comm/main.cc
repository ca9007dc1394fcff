// ringtrain_bench_comm: the collective benchmark as a standalone executable.
#include "bench/comm/comm_bench.h"

int main(int argc, char** argv) { return RunCommBench(argc, argv, {argv[0]}); }
