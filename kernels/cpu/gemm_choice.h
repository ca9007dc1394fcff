// Internal to kernels/: the choice among OpenBLAS kernel sets once each was probed — the rule,
// the words that describe it, and the cache file that keeps it per CPU and library
// (docs/blas.md, docs/formats/gemm_kernels_cache.md). Pure functions: no processes, no files.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kernels/cpu/gemm_probe.h"

namespace rt::cpu {

// A choice and what it was based on: the content of one cache file.
struct GemmChoice {
  std::string cpu;             // key: CPU model and features ("AMD EPYC | avx2 avx512")
  std::string library;         // key: openblas_get_config() without the kernel set's name
  std::string library_choice;  // the set OpenBLAS picks by itself on this CPU
  std::string chosen;          // the set ringtrain runs
  std::vector<GemmProbeResult> candidates;  // in the order they were probed; never kTimed
};

// A candidate that is not OpenBLAS's own choice must be faster than it by more than this share
// to replace it: a closer race is measurement noise, and the library's default then stays.
inline constexpr double kGemmSwitchMargin = 0.03;

// The kernel set to run: the fastest candidate that passed, except that `library_choice` stays
// when it passed and is within kGemmSwitchMargin of the fastest. FailedPrecondition naming every
// candidate's outcome when none passed.
Result<std::string> DecideGemmKernels(std::string_view library_choice,
                                      const std::vector<GemmProbeResult>& candidates);

// The words in parentheses after the kernel set's name in the log line, e.g.
// "auto; Prescott measured 4.70x slower" or "auto, cached; OpenBLAS's own choice, Haswell
// measured 1.87x slower; Zen rejected: wrong results". `choice.chosen` must be set.
std::string DescribeGemmChoice(const GemmChoice& choice, bool cached);

// The cache file's name for a (cpu, library) key: "gemm-kernels-<CRC32C of the key, 8 hex
// digits>.txt", so machines of different kinds can share one home directory.
std::string GemmChoiceCacheName(std::string_view cpu, std::string_view library);

// The cache file's text (magic, version, fields, CRC32C).
std::string SerializeGemmChoice(const GemmChoice& choice);

// Parses a cache file. Corruption naming the line for a wrong magic or version, a missing or
// malformed field, a failed CRC or a truncated file.
Result<GemmChoice> ParseGemmChoice(std::string_view text);

}  // namespace rt::cpu
