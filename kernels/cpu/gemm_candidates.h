// Internal to kernels/: which of OpenBLAS's kernel sets (OPENBLAS_CORETYPE values) are worth
// trying on this CPU, from what CPUID says about it (docs/blas.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rt::cpu {

// The CPU facts that decide which of OpenBLAS's x86-64 kernel sets can run here.
struct CpuFeatures {
  std::string model;         // CPUID's brand string ("AMD EPYC 9B14"); "" where there is none
  bool avx2 = false;         // AVX2 and FMA3, with the OS saving YMM state (Haswell's kernels)
  bool avx512 = false;       // AVX-512 F, CD, DQ, BW and VL, with the OS saving ZMM state
                             // (SkylakeX's kernels)
  bool avx512_bf16 = false;  // AVX512_BF16 as well (Cooperlake's kernels)
};

// This CPU's features (all false, model "", off x86-64). Thread-safe.
CpuFeatures DetectCpuFeatures();

// The features as words, e.g. "avx2 avx512 avx512_bf16" ("none" when there are none): part of
// the cache key, so a VM that hides AVX-512 behind the same model name is probed again.
std::string DescribeCpuFeatures(const CpuFeatures& features);

// The kernel sets to check, in order and without repeats: `library_choice` (the set OpenBLAS
// picked by itself, openblas_get_corename()) first, then Cooperlake where the CPU has AVX-512
// with BF16, SkylakeX where it has AVX-512, Haswell where it has AVX2. Names are compared without
// regard to case (as OpenBLAS does) and spelled as OpenBLAS reports them.
std::vector<std::string> GemmKernelCandidates(const CpuFeatures& features,
                                              std::string_view library_choice);

}  // namespace rt::cpu
