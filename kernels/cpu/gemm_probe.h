// Internal to kernels/: the probe of one OpenBLAS kernel set. It runs in a child process whose
// OpenBLAS was loaded with OPENBLAS_CORETYPE set to the candidate (the kernels cannot be switched
// once the library has initialised): it checks sgemm against a double-precision reference on
// the shapes and argument patterns ringtrain uses, checks that the results do not depend on the
// number of OpenBLAS threads, times sgemm on the GEMM shapes of config S,
// and reports one line for the parent to parse (docs/blas.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace rt::cpu {

// What the probe of one kernel set found: a probe child's report, and one line of the cache.
struct GemmProbeResult {
  enum class Outcome {
    kPassed,  // computed correct results; `gflops` is its speed
    kWrong,   // computed wrong results (`detail` names the GEMM and the element), or results
              // that depend on the thread count (`detail` starts with kThreadDependent): never
              // chosen
    kFailed,  // its probe did not report: crashed, timed out, or OpenBLAS ran another set
    kTimed,   // timed without the check (a second timing round)
  };
  std::string kernels;  // the set (OPENBLAS_CORETYPE value, or what OpenBLAS runs)
  Outcome outcome = Outcome::kFailed;
  double gflops = 0;   // sgemm GFLOP/s on config S's shapes, one thread; 0: none
  std::string detail;  // kWrong / kFailed: what went wrong, one line
};

// How the detail of a kWrong result starts when the set computed correct results whose bits
// depend on how many OpenBLAS threads ran: runs of different layouts would not agree.
inline constexpr std::string_view kThreadDependent = "results depend on the thread count";

// The work of one probe.
struct GemmProbeWork {
  // Run the correctness check (with OpenBLAS's default threads), then check that the larger
  // GEMMs give the same bits with 1 thread as with 2 and with the default.
  bool check = true;
  bool time = true;             // time sgemm on config S's shapes (one thread)
  int64_t time_budget_ms = 60;  // timing passes until this much time has gone (at least 3)
};

// Runs the probe in this process. A candidate's check can be made to fail on purpose in test
// builds: when the fault point "kernels.gemm_probe.wrong.<kernels>" is armed (e.g. through
// RINGTRAIN_FAULTS="kernels.gemm_probe.wrong.Haswell=error"), one element of every checked
// result is corrupted before it is compared; with "kernels.gemm_probe.threads.<kernels>" one
// element of every multi-threaded result of the thread check moves by one ulp. Not thread-safe
// (sets OpenBLAS's thread count). The result's `kernels` is what OpenBLAS runs in this process.
GemmProbeResult RunGemmProbe(const GemmProbeWork& work);

// The result as text: "<kernels> <passed|wrong|failed|timed> <gflops, 3 decimals>[ <detail>]",
// line breaks in the detail turned into spaces.
std::string FormatGemmProbeResult(const GemmProbeResult& result);

// Parses FormatGemmProbeResult's text (one line). Corruption naming the problem.
Result<GemmProbeResult> ParseGemmProbeResult(std::string_view text);

}  // namespace rt::cpu
