// ringtrain_bench_kernels: the kernel benchmarks as a standalone program.
#include "bench/kernels/kernels_bench.h"

int main(int argc, char** argv) { return rt::RunKernelsBench(argc, argv); }
