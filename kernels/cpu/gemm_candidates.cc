#include "kernels/cpu/gemm_candidates.h"

#include <strings.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace rt::cpu {
namespace {

#if defined(__x86_64__)
struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

// CPUID leaf/subleaf; all zero where the leaf is beyond the CPU's maximum.
Regs Cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return Regs{};
  return r;
}

bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

// XCR0: the register state the OS saves on context switches (0 without OSXSAVE).
uint64_t Xcr0(const Regs& leaf1) {
  if (!Bit(leaf1.c, 27)) return 0;  // OSXSAVE
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

std::string BrandString() {
  if (Cpuid(0x80000000).a < 0x80000004) return "";
  char brand[49] = {};
  for (uint32_t i = 0; i < 3; ++i) {
    const Regs r = Cpuid(0x80000002 + i);
    std::memcpy(brand + 16 * i, &r, 16);
  }
  std::string s(brand);
  const size_t first = s.find_first_not_of(' ');
  const size_t last = s.find_last_not_of(' ');
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}
#endif

}  // namespace

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
#if defined(__x86_64__)
  f.model = BrandString();
  const Regs leaf1 = Cpuid(1);
  const uint64_t xcr0 = Xcr0(leaf1);
  const bool ymm_saved = (xcr0 & 0x6) == 0x6;    // SSE and AVX state
  const bool zmm_saved = (xcr0 & 0xe6) == 0xe6;  // plus opmask and both ZMM halves
  const Regs leaf7 = Cpuid(7, 0), leaf7_1 = Cpuid(7, 1);
  const bool fma = Bit(leaf1.c, 12), avx = Bit(leaf1.c, 28);
  f.avx2 = ymm_saved && avx && fma && Bit(leaf7.b, 5);
  // AVX512 F (16), DQ (17), CD (28), BW (30), VL (31).
  f.avx512 = f.avx2 && zmm_saved && Bit(leaf7.b, 16) && Bit(leaf7.b, 17) && Bit(leaf7.b, 28) &&
             Bit(leaf7.b, 30) && Bit(leaf7.b, 31);
  f.avx512_bf16 = f.avx512 && Bit(leaf7_1.a, 5);
#endif
  return f;
}

std::string DescribeCpuFeatures(const CpuFeatures& features) {
  std::string s;
  auto add = [&](bool has, const char* word) {
    if (!has) return;
    if (!s.empty()) s += ' ';
    s += word;
  };
  add(features.avx2, "avx2");
  add(features.avx512, "avx512");
  add(features.avx512_bf16, "avx512_bf16");
  return s.empty() ? "none" : s;
}

std::vector<std::string> GemmKernelCandidates(const CpuFeatures& features,
                                              std::string_view library_choice) {
  std::vector<std::string> out;
  auto add = [&](std::string_view name) {
    if (name.empty()) return;
    const bool seen = std::any_of(out.begin(), out.end(), [&](const std::string& s) {
      return s.size() == name.size() && ::strncasecmp(s.data(), name.data(), s.size()) == 0;
    });
    if (!seen) out.emplace_back(name);
  };
  add(library_choice);
  if (features.avx512_bf16) add("Cooperlake");
  if (features.avx512) add("SkylakeX");
  if (features.avx2) add("Haswell");
  return out;
}

}  // namespace rt::cpu
