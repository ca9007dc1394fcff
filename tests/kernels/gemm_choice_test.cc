// The pure parts of the automatic GEMM kernel choice (kernels/cpu/gemm_*.h): the candidate table
// from CPU features, CPUID against /proc/cpuinfo, the decision rule, the words of the log line,
// the cache file format and the probe's report line.
#include "kernels/cpu/gemm_choice.h"

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "base/crc32c.h"
#include "kernels/cpu/gemm_candidates.h"
#include "kernels/cpu/gemm_probe.h"

namespace rt::cpu {
namespace {

using Outcome = GemmProbeResult::Outcome;
using Names = std::vector<std::string>;

CpuFeatures Features(bool avx2, bool avx512, bool bf16) {
  return CpuFeatures{"Test CPU", avx2, avx512, bf16};
}

TEST(GemmCandidatesTest, TableFromCpuFeatures) {
  struct Row {
    CpuFeatures features;
    std::string library_choice;
    Names expected;
  };
  const Row rows[] = {
      {Features(false, false, false), "Prescott", {"Prescott"}},
      {Features(true, false, false), "Prescott", {"Prescott", "Haswell"}},
      {Features(true, false, false), "Zen", {"Zen", "Haswell"}},
      {Features(true, false, false), "Haswell", {"Haswell"}},
      // The issue's Xeon: AVX-512 that OpenBLAS 0.3.21 does not recognise.
      {Features(true, true, false), "Prescott", {"Prescott", "SkylakeX", "Haswell"}},
      {Features(true, true, true), "Prescott", {"Prescott", "Cooperlake", "SkylakeX", "Haswell"}},
      // This VM (Zen with AVX-512 and BF16): OpenBLAS picks Cooperlake itself.
      {Features(true, true, true), "Cooperlake", {"Cooperlake", "SkylakeX", "Haswell"}},
      {Features(true, true, false), "SkylakeX", {"SkylakeX", "Haswell"}},
      // Names compare without case, as OPENBLAS_CORETYPE does.
      {Features(true, true, false), "skylakex", {"skylakex", "Haswell"}},
  };
  for (const Row& row : rows)
    EXPECT_EQ(GemmKernelCandidates(row.features, row.library_choice), row.expected)
        << row.library_choice << " / " << DescribeCpuFeatures(row.features);
}

TEST(GemmCandidatesTest, DescribesFeatures) {
  EXPECT_EQ(DescribeCpuFeatures(Features(false, false, false)), "none");
  EXPECT_EQ(DescribeCpuFeatures(Features(true, false, false)), "avx2");
  EXPECT_EQ(DescribeCpuFeatures(Features(true, true, true)), "avx2 avx512 avx512_bf16");
}

// CPUID as this process reads it against the kernel's view in /proc/cpuinfo.
TEST(GemmCandidatesTest, CpuidAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  std::set<std::string> flags;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_first_of(" \t"));
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model" && line.starts_with("model name") && model.empty()) model = value;
    if (key == "flags" && flags.empty()) {
      std::istringstream words(value);
      for (std::string w; words >> w;) flags.insert(w);
    }
  }
  if (flags.empty()) GTEST_SKIP() << "no flags in /proc/cpuinfo (not x86-64 Linux?)";
  auto has = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (!flags.count(n)) return false;
    return true;
  };
  const CpuFeatures f = DetectCpuFeatures();
  EXPECT_EQ(f.model, model);
  EXPECT_EQ(f.avx2, has({"avx", "avx2", "fma"}));
  EXPECT_EQ(f.avx512,
            has({"avx2", "fma", "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"}));
  EXPECT_EQ(f.avx512_bf16, f.avx512 && has({"avx512_bf16"}));
}

GemmProbeResult Passed(const std::string& name, double gflops) {
  return {name, Outcome::kPassed, gflops, ""};
}
GemmProbeResult Wrong(const std::string& name, double gflops) {
  return {name, Outcome::kWrong, gflops, "sgemm NT m=1 n=1 k=1: C[0,0] = 2, expected 1"};
}
GemmProbeResult Failed(const std::string& name) {
  return {name, Outcome::kFailed, 0, "probe signal 4 (Illegal instruction)"};
}

TEST(GemmChoiceTest, TheFastestCorrectSetWins) {
  const std::vector<GemmProbeResult> issue = {Passed("Prescott", 31.6), Passed("Cooperlake", 140.0),
                                              Passed("SkylakeX", 148.6), Passed("Haswell", 90.0)};
  EXPECT_EQ(*DecideGemmKernels("Prescott", issue), "SkylakeX");
  // A wrong set is never chosen, however fast.
  const std::vector<GemmProbeResult> wrong = {Passed("Prescott", 31.6), Wrong("SkylakeX", 300.0),
                                              Passed("Haswell", 90)};
  EXPECT_EQ(*DecideGemmKernels("Prescott", wrong), "Haswell");
  // Nor one whose probe failed.
  const std::vector<GemmProbeResult> failed = {Passed("Prescott", 31.6), Failed("SkylakeX")};
  EXPECT_EQ(*DecideGemmKernels("Prescott", failed), "Prescott");
  // OpenBLAS's own choice wrong: another one replaces it even when slower.
  const std::vector<GemmProbeResult> own_wrong = {Wrong("Cooperlake", 230), Passed("Haswell", 120)};
  EXPECT_EQ(*DecideGemmKernels("Cooperlake", own_wrong), "Haswell");
}

TEST(GemmChoiceTest, OwnChoiceStaysWithinTheMargin) {
  const double own = 230.0;
  const std::vector<GemmProbeResult> close = {
      Passed("Cooperlake", own), Passed("SkylakeX", own / (1.0 - kGemmSwitchMargin) - 0.1)};
  EXPECT_EQ(*DecideGemmKernels("Cooperlake", close), "Cooperlake");
  const std::vector<GemmProbeResult> beyond = {
      Passed("Cooperlake", own), Passed("SkylakeX", own / (1.0 - kGemmSwitchMargin) + 0.5)};
  EXPECT_EQ(*DecideGemmKernels("Cooperlake", beyond), "SkylakeX");
}

TEST(GemmChoiceTest, NoCorrectSetIsAnErrorNamingEach) {
  const std::vector<GemmProbeResult> none = {Wrong("Cooperlake", 230), Failed("Haswell")};
  Result<std::string> r = DecideGemmKernels("Cooperlake", none);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  const std::string m(r.status().message());
  EXPECT_NE(m.find("Cooperlake wrong: sgemm NT"), std::string::npos) << m;
  EXPECT_NE(m.find("Haswell failed: probe signal 4"), std::string::npos) << m;
  EXPECT_NE(m.find("OPENBLAS_CORETYPE"), std::string::npos) << m;
  EXPECT_FALSE(DecideGemmKernels("Prescott", {}).ok());
}

GemmChoice Choice(const std::string& own, const std::string& chosen,
                  std::vector<GemmProbeResult> candidates) {
  return GemmChoice{"Test CPU | avx2 avx512", "OpenBLAS 0.3.21 DYNAMIC_ARCH", own, chosen,
                    std::move(candidates)};
}

TEST(GemmChoiceTest, DescribesTheChoice) {
  // The issue's example.
  EXPECT_EQ(DescribeGemmChoice(Choice("Prescott", "SkylakeX",
                                      {Passed("Prescott", 31.6), Passed("SkylakeX", 148.52)}),
                               false),
            "auto; Prescott measured 4.70x slower");
  EXPECT_EQ(DescribeGemmChoice(Choice("Cooperlake", "Cooperlake",
                                      {Passed("Cooperlake", 230), Passed("SkylakeX", 220),
                                       Passed("Haswell", 115)}),
                               true),
            "auto, cached; OpenBLAS's own choice, SkylakeX measured 1.05x slower");
  EXPECT_EQ(DescribeGemmChoice(Choice("Cooperlake", "Cooperlake",
                                      {Passed("Cooperlake", 230), Passed("SkylakeX", 232.3)}),
                               false),
            "auto; OpenBLAS's own choice, SkylakeX measured 1.01x faster, within the margin");
  EXPECT_EQ(DescribeGemmChoice(
                Choice("Cooperlake", "Haswell",
                       {Wrong("Cooperlake", 230), Failed("SkylakeX"), Passed("Haswell", 120)}),
                false),
            "auto; Cooperlake rejected: wrong results; SkylakeX failed to probe");
  GemmProbeResult haswell = Wrong("Haswell", 96);
  haswell.detail = std::string(cpu::kThreadDependent) +
                   ": sgemm NT m=1024 n=384 k=128: C[3,5] = 1 with 1 thread, 1.00000012 with 2";
  EXPECT_EQ(
      DescribeGemmChoice(Choice("SkylakeX", "SkylakeX",
                                {Passed("SkylakeX", 64.5), Passed("Cooperlake", 64.4), haswell}),
                         false),
      "auto; OpenBLAS's own choice, Cooperlake measured 1.00x slower; Haswell rejected: "
      "results depend on the thread count");
}

TEST(GemmChoiceTest, CacheFileRoundTrips) {
  const GemmChoice c = Choice("Prescott", "SkylakeX",
                              {Passed("Prescott", 31.6), Wrong("Cooperlake", 140),
                               Passed("SkylakeX", 148.6), Failed("Haswell")});
  const std::string text = SerializeGemmChoice(c);
  Result<GemmChoice> back = ParseGemmChoice(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(back->cpu, c.cpu);
  EXPECT_EQ(back->library, c.library);
  EXPECT_EQ(back->library_choice, "Prescott");
  EXPECT_EQ(back->chosen, "SkylakeX");
  ASSERT_EQ(back->candidates.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(back->candidates[i].kernels, c.candidates[i].kernels);
    EXPECT_EQ(back->candidates[i].outcome, c.candidates[i].outcome);
    EXPECT_NEAR(back->candidates[i].gflops, c.candidates[i].gflops, 1e-3);
    EXPECT_EQ(back->candidates[i].detail, c.candidates[i].detail);
  }
  EXPECT_EQ(SerializeGemmChoice(*back), text);
}

TEST(GemmChoiceTest, CorruptCacheFilesAreRejectedWithAReason) {
  const std::string text =
      SerializeGemmChoice(Choice("Prescott", "SkylakeX", {Passed("SkylakeX", 148.6)}));
  // Every truncation, and every single flipped bit, is caught (never a crash or a wrong choice).
  for (size_t n = 0; n < text.size(); ++n)
    EXPECT_EQ(ParseGemmChoice(text.substr(0, n)).status().code(), StatusCode::kCorruption) << n;
  for (size_t i = 0; i < text.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = text;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      EXPECT_FALSE(ParseGemmChoice(flipped).ok()) << i << ":" << bit;
    }
  EXPECT_NE(ParseGemmChoice(text + "x").status().message().find("crc32c"), std::string::npos);
  // A file of another version, with a valid CRC, is refused by its first line: version 1's
  // probes did not check the thread count, so its choice is probed again.
  std::string body = text.substr(0, text.rfind("crc32c "));
  body.replace(body.find(" 2\n"), 3, " 1\n");
  char crc[32];
  std::snprintf(crc, sizeof(crc), "crc32c %08x\n", Crc32c(body.data(), body.size()));
  Result<GemmChoice> v1 = ParseGemmChoice(body + crc);
  EXPECT_EQ(v1.status().code(), StatusCode::kCorruption);
  EXPECT_NE(v1.status().message().find("line 1"), std::string::npos) << v1.status().ToString();
  // A chosen set that did not pass is refused too (the file cannot have been written so).
  const std::string bad_choice =
      SerializeGemmChoice(Choice("Prescott", "SkylakeX", {Wrong("SkylakeX", 148.6)}));
  EXPECT_NE(ParseGemmChoice(bad_choice).status().message().find("not a candidate that passed"),
            std::string::npos);
}

TEST(GemmChoiceTest, CacheNameFollowsTheKey) {
  const std::string a = GemmChoiceCacheName("AMD EPYC | avx2 avx512", "OpenBLAS 0.3.21 X");
  EXPECT_EQ(a, GemmChoiceCacheName("AMD EPYC | avx2 avx512", "OpenBLAS 0.3.21 X"));
  EXPECT_NE(a, GemmChoiceCacheName("AMD EPYC | avx2", "OpenBLAS 0.3.21 X"));
  EXPECT_NE(a, GemmChoiceCacheName("AMD EPYC | avx2 avx512", "OpenBLAS 0.3.26 X"));
  EXPECT_TRUE(a.starts_with("gemm-kernels-") && a.ends_with(".txt")) << a;
}

TEST(GemmProbeResultTest, RoundTripsAndRejectsGarbage) {
  const GemmProbeResult results[] = {
      {"SkylakeX", Outcome::kWrong, 0, "sgemm NN m=7 n=5 k=3: C[0,0] = 1, expected 2"},
      {"Haswell", Outcome::kPassed, 123.25, ""},
      {"Zen", Outcome::kTimed, 80.5, ""},
      {"Bulldozer", Outcome::kFailed, 0, "probe signal 4 (Illegal instruction)"}};
  for (const GemmProbeResult& r : results) {
    Result<GemmProbeResult> back = ParseGemmProbeResult(FormatGemmProbeResult(r));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->kernels, r.kernels);
    EXPECT_EQ(back->outcome, r.outcome);
    EXPECT_EQ(back->detail, r.detail);
    EXPECT_NEAR(back->gflops, r.gflops, 1e-3);
  }
  EXPECT_EQ(FormatGemmProbeResult({"X", Outcome::kWrong, 0, "two\nlines"}),
            "X wrong 0.000 two lines");
  for (const char* bad :
       {"", "SkylakeX passed", "SkylakeX maybe 1.0", "SkylakeX passed x", "SkylakeX wrong 1.0",
        "SkylakeX failed 0", "SkylakeX passed -1", " passed 1.0",
        // Found by tests/fuzz/text_specs_fuzz.cc (corpus file crash-probe-line-break): Format
        // never writes a line break, so a text with one is not its output.
        "\nHaswell passed 34.", "Haswell passed 1.0\r", "Haswell wrong 0 a\nb"})
    EXPECT_EQ(ParseGemmProbeResult(bad).status().code(), StatusCode::kCorruption) << bad;
  // A speed of any size prints in full (it was cut at 31 characters) and reads back.
  const GemmProbeResult huge{"Haswell", Outcome::kPassed, 1e300, ""};
  Result<GemmProbeResult> back = ParseGemmProbeResult(FormatGemmProbeResult(huge));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->gflops, 1e300);
}

}  // namespace
}  // namespace rt::cpu
