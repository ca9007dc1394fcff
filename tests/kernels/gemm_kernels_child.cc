// gemm_kernels_child: a minimal binary that chooses its GEMM kernels the way ringtrain's binaries
// do (SelectGemmKernels first in main, then the log line), for gemm_select_test. It prints
// "running <kernels OpenBLAS runs> env <OPENBLAS_CORETYPE>"; with the argument "spawn" it then
// starts itself once more, as the parallel engine starts its workers, and relays that worker's
// output prefixed with "worker: ". With the argument "library-choice" it only prints the set
// OpenBLAS loaded by itself, before any choice. GEMM_KERNELS_CHILD_PROBE_TIMEOUT_MS sets
// GemmKernelOptions::probe_timeout_ms.
#include <cblas.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/subprocess.h"
#include "kernels/gemm_kernels.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "library-choice") {
    std::printf("%s\n", openblas_get_corename());
    return 0;
  }
  rt::GemmKernelOptions options;
  if (const char* ms = std::getenv("GEMM_KERNELS_CHILD_PROBE_TIMEOUT_MS"))
    options.probe_timeout_ms = std::atoll(ms);
  if (rt::Status s = rt::SelectGemmKernelsAndLog(argv, "info", "gemm_kernels_child", options);
      !s.ok()) {
    std::fprintf(stderr, "gemm_kernels_child: error: %s\n", s.ToString().c_str());
    return 1;
  }
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  std::printf("running %s env %s\n", openblas_get_corename(), env ? env : "(unset)");
  std::fflush(stdout);
  if (argc > 1 && std::string_view(argv[1]) == "spawn") {
    rt::Result<rt::ProcessOutcome> worker = rt::RunProcess(
        {"/proc/self/exe"}, rt::EnvironmentWithout({}), rt::Deadline::AfterMs(60000));
    if (!worker.ok() || !worker->exited || worker->exit_code != 0) {
      std::fprintf(stderr, "gemm_kernels_child: worker failed: %s\n",
                   worker.ok() ? worker->Describe().c_str() : worker.status().ToString().c_str());
      return 1;
    }
    std::printf("worker: %s", worker->output.c_str());
  }
  return 0;
}
