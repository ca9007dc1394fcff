// ringtrain_bench_parallel: the parallel-engine benchmark as a standalone executable.
#include <cstdio>

#include "bench/parallel/parallel_bench.h"
#include "kernels/gemm_kernels.h"

int main(int argc, char** argv) {
  // First: may re-execute this binary with the chosen kernel set (kernels/gemm_kernels.h).
  if (rt::Status s = rt::SelectGemmKernelsAndLog(argv, "info", "ringtrain_bench_parallel");
      !s.ok()) {
    std::fprintf(stderr, "ringtrain_bench_parallel: %s\n", s.ToString().c_str());
    return 1;
  }
  return RunParallelBench(argc, argv);
}
