// ringtrain_bench_kernels: the kernel benchmarks as a standalone program.
#include <cstdio>

#include "bench/kernels/kernels_bench.h"
#include "kernels/gemm_kernels.h"

int main(int argc, char** argv) {
  // First: may re-execute this binary with the chosen kernel set (kernels/gemm_kernels.h).
  if (rt::Status s = rt::SelectGemmKernelsAndLog(argv, "info", "ringtrain_bench_kernels");
      !s.ok()) {
    std::fprintf(stderr, "ringtrain_bench_kernels: %s\n", s.ToString().c_str());
    return 1;
  }
  return rt::RunKernelsBench(argc, argv);
}
