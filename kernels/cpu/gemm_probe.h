// Internal to kernels/: the probe of one OpenBLAS kernel set. It runs in a child process whose
// OpenBLAS was loaded with OPENBLAS_CORETYPE set to the candidate (the kernels cannot be switched
// once the library has initialised): it checks sgemm against a double-precision reference on
// the shapes and argument patterns ringtrain uses, times sgemm on the GEMM shapes of config S,
// and writes one report line on stdout for the parent to parse (docs/blas.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace rt::cpu {

// What a probe found about the kernel set its process runs.
struct GemmProbeReport {
  enum class Check { kPassed, kWrong, kSkipped };
  std::string kernels;            // the set OpenBLAS runs in the child (openblas_get_corename())
  Check check = Check::kSkipped;  // kWrong: some GEMM computed numbers outside the tolerance
  std::string failure;            // for kWrong: which GEMM, which element, what and what expected
  double gflops = 0;              // sgemm GFLOP/s on config S's shapes, one thread; 0: not timed
};

// The work of one probe.
struct GemmProbeWork {
  bool check = true;            // run the correctness check (with OpenBLAS's default threads)
  bool time = true;             // time sgemm on config S's shapes (one thread)
  int64_t time_budget_ms = 60;  // timing passes until this much time has gone (at least 3)
};

// Runs the probe in this process. A candidate's check can be made to fail on purpose in test
// builds: when the fault point "kernels.gemm_probe.wrong.<kernels>" is armed (e.g. through
// RINGTRAIN_FAULTS="kernels.gemm_probe.wrong.Haswell=error"), one element of every checked
// result is corrupted before it is compared. Not thread-safe (sets OpenBLAS's thread count).
GemmProbeReport RunGemmProbe(const GemmProbeWork& work);

// The report as one line: "gemm-probe 1 <kernels> <passed|wrong|skipped> <gflops>[ <failure>]".
std::string FormatGemmProbeReport(const GemmProbeReport& report);

// Finds and parses the report line in a probe child's output; other lines (OpenBLAS's own
// messages) are ignored. Corruption naming the problem when there is none or it does not parse.
Result<GemmProbeReport> ParseGemmProbeReport(std::string_view output);

}  // namespace rt::cpu
