// Fuzz target: the short texts that come from users and files outside the config schema — a
// parallel layout spec (--layout), a RINGTRAIN_FAULTS list, the GEMM kernel choice cache file and
// a GEMM probe's report line from a child process — must be accepted or refused with an error,
// never crash; what is accepted prints to a text that parses to the same thing.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/fault.h"
#include "kernels/cpu/gemm_choice.h"
#include "kernels/cpu/gemm_probe.h"
#include "parallel/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto layout = rt::parallel::ParseLayout(text); layout.ok()) {
    std::string spec = rt::parallel::DescribeLayout(*layout);
    auto again = rt::parallel::ParseLayout(spec);
    if (!again.ok() || rt::parallel::DescribeLayout(*again) != spec) __builtin_trap();
  }
  if (auto choice = rt::cpu::ParseGemmChoice(text); choice.ok()) {
    std::string file = rt::cpu::SerializeGemmChoice(*choice);
    auto again = rt::cpu::ParseGemmChoice(file);
    if (!again.ok() || rt::cpu::SerializeGemmChoice(*again) != file) __builtin_trap();
  }
  if (auto probe = rt::cpu::ParseGemmProbeResult(text); probe.ok()) {
    std::string line = rt::cpu::FormatGemmProbeResult(*probe);
    auto again = rt::cpu::ParseGemmProbeResult(line);
    if (!again.ok() || rt::cpu::FormatGemmProbeResult(*again) != line) __builtin_trap();
  }
  (void)rt::fault::ArmFromString(text);
  rt::fault::DisarmAll();
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  rt::cpu::GemmChoice choice;
  choice.cpu = "AMD EPYC 7B13 | avx2 fma";
  choice.library = "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY";
  choice.library_choice = "Zen";
  choice.chosen = "Haswell";
  choice.candidates = {{"Zen", rt::cpu::GemmProbeResult::Outcome::kPassed, 61.25, ""},
                       {"Haswell", rt::cpu::GemmProbeResult::Outcome::kPassed, 70.5, ""},
                       {"SkylakeX", rt::cpu::GemmProbeResult::Outcome::kWrong, 0,
                        "sgemm 64x64x64: element 3 is 1.5, expected 2"}};
  std::vector<std::string> texts = {
      "",
      "tp=2,pp=2,dp=4,zero=1,hsdp_shard=2,sp=1,schedule=1f1b",
      "pp=4,schedule=interleaved,vpp=2",
      "comm.send=error,ckpt.write=delay:50@3,daemon.step=crash@2",
      rt::cpu::SerializeGemmChoice(choice),
      rt::cpu::FormatGemmProbeResult(choice.candidates[2]),
      "Haswell passed 70.125",
  };
  std::vector<std::vector<uint8_t>> seeds;
  for (const std::string& t : texts) seeds.emplace_back(t.begin(), t.end());
  return seeds;
}
