// Which of OpenBLAS's CPU GEMM kernel sets a ringtrain process runs, chosen automatically
// (docs/blas.md). Debian's OpenBLAS is built with DYNAMIC_ARCH and picks its kernels once, when
// the library loads, from the CPU it recognises or from OPENBLAS_CORETYPE; on a CPU it does not
// know it falls back to slow generic kernels, and on some CPUs some sets compute wrong results.
//
// Every binary that trains calls SelectGemmKernels() first thing in main(). When the user has
// set OPENBLAS_CORETYPE, that is respected and nothing else happens. Otherwise the candidates
// from CPUID (OpenBLAS's own choice; Cooperlake, SkylakeX where AVX-512 is present; Haswell where
// AVX2 is) are each probed in a child process — the same binary, started with the candidate's
// OPENBLAS_CORETYPE — that checks sgemm against a reference and times it; the fastest correct
// set is kept, cached per CPU model and library version (docs/formats/gemm_kernels_cache.md),
// and the process re-executes itself with OPENBLAS_CORETYPE set to it, so the library loads the
// chosen kernels and every process it starts (parallel-engine and daemon workers) inherits them
// through the environment.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace rt {

// Settings of the choice; binaries use the defaults, tests point them elsewhere.
struct GemmKernelOptions {
  // The binary started in probe mode for each candidate, and re-executed with the choice. It
  // must call SelectGemmKernels() at the top of its main().
  std::string executable = "/proc/self/exe";
  // Where cached choices live; "" means $XDG_CACHE_HOME/ringtrain, else $HOME/.cache/ringtrain
  // (no cache, and a probe on every start, when neither is set).
  std::string cache_dir;
  // How long one candidate's probe may take before it is killed and counted as failed.
  int64_t probe_timeout_ms = 30000;
};

// Makes sure this process runs the chosen kernel set. Call at the top of main(), before any
// thread is started, with main's argv (null-terminated, as main receives it). It:
//  - in a probe child (started by this function in another process): probes, writes its report
//    on stdout and exits; never returns;
//  - with OPENBLAS_CORETYPE set (non-empty): returns OK at once — the user's value, or one
//    inherited from the process that chose it;
//  - otherwise takes the cached choice or probes the candidates (about a second) and, when the
//    chosen set is not the one loaded, re-executes `options.executable` with argv and
//    OPENBLAS_CORETYPE set (the process image is replaced; the pid stays).
// Never fatal for lack of a cache or a failed probe: it falls back to what OpenBLAS loaded and
// says so in the log line. Errors: FailedPrecondition when no candidate computes correct results
// (naming each one's failure); the binary should then stop — the user may force a set with
// OPENBLAS_CORETYPE. Not thread-safe.
Status SelectGemmKernels(char** argv, const GemmKernelOptions& options = {});

// The kernel set this process runs and how it was chosen.
struct GemmKernelsInUse {
  std::string library;  // "OpenBLAS 0.3.21"
  std::string kernels;  // what OpenBLAS runs, e.g. "SkylakeX" (openblas_get_corename())
  std::string how;      // e.g. "auto; Prescott measured 4.70x slower", "OPENBLAS_CORETYPE"
  // "BLAS: OpenBLAS 0.3.21, kernels SkylakeX (auto; Prescott measured 4.70x slower)".
  std::string Line() const;
};

// What this process runs; `how` is "not selected" before SelectGemmKernels(). Thread-safe after
// SelectGemmKernels() returned.
GemmKernelsInUse CurrentGemmKernels();

// For a main() whose log level is fixed: SelectGemmKernels(argv, options), then
// InitLogging(log_level, name), then LogGemmKernels(). Returns the first error.
Status SelectGemmKernelsAndLog(char** argv, std::string_view log_level, std::string_view name,
                               const GemmKernelOptions& options = {});

// Logs CurrentGemmKernels().Line() — at info in the process that made the choice (or saw the
// user's OPENBLAS_CORETYPE first), at debug in the processes that inherited it, so a run logs it
// once — and, at warn, what went wrong on the way (a corrupt or unwritable cache, a failed
// probe or re-execution). Call once, after InitLogging().
void LogGemmKernels();

}  // namespace rt
