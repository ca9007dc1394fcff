// The automatic choice of OpenBLAS's kernel set end to end: the probe in this process, then
// gemm_kernels_child started as a real process with an environment each test builds itself
// (OPENBLAS_CORETYPE removed or set, a fresh cache directory, fault points armed), while this
// test process keeps whatever OPENBLAS_CORETYPE the machine presets.
#include <cblas.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "base/fault.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "kernels/cpu/gemm_candidates.h"
#include "kernels/cpu/gemm_choice.h"
#include "kernels/cpu/gemm_probe.h"

namespace rt {
namespace {

using cpu::GemmProbeResult;
using Outcome = GemmProbeResult::Outcome;

TEST(GemmProbeTest, TheLoadedKernelsPassAndAreTimed) {
  const GemmProbeResult r = cpu::RunGemmProbe({});
  EXPECT_EQ(r.kernels, openblas_get_corename());
  // (A machine may preset OPENBLAS_CORETYPE to a set that is correct but whose bits change
  // with the thread count; the automatic choice rejects it, a preset is the user's.)
  if (r.outcome == Outcome::kWrong && r.detail.starts_with(cpu::kThreadDependent))
    GTEST_SKIP() << "the loaded kernels, " << r.kernels << ": " << r.detail;
  EXPECT_EQ(r.outcome, Outcome::kPassed) << r.detail;
  EXPECT_GT(r.gflops, 0.5);
  const GemmProbeResult timed = cpu::RunGemmProbe({.check = false, .time = true});
  EXPECT_EQ(timed.outcome, Outcome::kTimed);
  EXPECT_GT(timed.gflops, 0.5);
}

// The probe of the loaded kernels with the fault point "kernels.gemm_probe.<kind>.<kernels>"
// armed.
GemmProbeResult ProbeWithFault(const std::string& kind) {
  fault::Arm("kernels.gemm_probe." + kind + "." + openblas_get_corename(),
             {fault::Action::kError, 0, 0});
  const GemmProbeResult r = cpu::RunGemmProbe({});
  fault::DisarmAll();
  return r;
}

TEST(GemmProbeTest, AnArmedFaultPointMakesTheCheckFail) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points compiled out";
  const GemmProbeResult r = ProbeWithFault("wrong");
  EXPECT_EQ(r.outcome, Outcome::kWrong);
  EXPECT_NE(r.detail.find("C[0,0]"), std::string::npos) << r.detail;
  EXPECT_EQ(r.gflops, 0.0) << "a wrong set is not timed";
}

TEST(GemmProbeTest, ASetWhoseBitsDependOnTheThreadCountIsRejected) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points compiled out";
  const GemmProbeResult r = ProbeWithFault("threads");
  EXPECT_EQ(r.outcome, Outcome::kWrong);
  EXPECT_TRUE(r.detail.starts_with(cpu::kThreadDependent)) << r.detail;
  EXPECT_NE(r.detail.find("m=1024"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("C[0,0]"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("with 1 thread"), std::string::npos) << r.detail;
}

// One run of the child: its output split into lines.
struct ChildRun {
  ProcessOutcome outcome;
  std::vector<std::string> lines;
  // The lines that contain `text`.
  std::vector<std::string> With(const std::string& text) const {
    std::vector<std::string> out;
    for (const std::string& l : lines)
      if (l.find(text) != std::string::npos) out.push_back(l);
    return out;
  }
  // The word after "running " in the child's own report (not the worker's).
  std::string Running() const {
    for (const std::string& l : lines)
      if (l.starts_with("running ")) return l.substr(8, l.find(' ', 8) - 8);
    return "";
  }
  // The one "BLAS: " line; "" when there is not exactly one.
  std::string BlasLine() const {
    const std::vector<std::string> blas = With("] BLAS: OpenBLAS");
    return blas.size() == 1 ? blas[0] : "";
  }
};

class GemmSelectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/gemm_select_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ChildRun choice = Child({"library-choice"}, {});
    ASSERT_TRUE(choice.outcome.exited && choice.outcome.exit_code == 0) << choice.outcome.output;
    library_choice_ = choice.lines.at(0);
    candidates_ = cpu::GemmKernelCandidates(cpu::DetectCpuFeatures(), library_choice_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs the child with OPENBLAS_CORETYPE and the choice's variables removed, the cache under
  // dir_, and `env` added.
  ChildRun Child(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    std::vector<std::string> full = EnvironmentWithout(
        {"OPENBLAS_CORETYPE", "RINGTRAIN_GEMM_KERNELS", "RINGTRAIN_GEMM_PROBE", "RINGTRAIN_FAULTS",
         "XDG_CACHE_HOME", "GEMM_KERNELS_CHILD_PROBE_TIMEOUT_MS"});
    full.push_back("XDG_CACHE_HOME=" + dir_);
    full.insert(full.end(), env.begin(), env.end());
    std::vector<std::string> argv = {GEMM_KERNELS_CHILD};
    argv.insert(argv.end(), args.begin(), args.end());
    Result<ProcessOutcome> r = RunProcess(argv, full, Deadline::AfterMs(120000));
    RT_CHECK(r.ok());
    ChildRun run{std::move(*r), {}};
    std::istringstream in(run.outcome.output);
    for (std::string line; std::getline(in, line);) run.lines.push_back(line);
    return run;
  }

  // Fault points for every candidate: "kernels.gemm_probe.<what>.<name>=<action>,...".
  std::string ArmAll(const std::string& what, const std::string& action) const {
    std::string spec;
    for (const std::string& c : candidates_)
      spec += (spec.empty() ? "" : ",") + std::string("kernels.gemm_probe.") + what + "." + c +
              "=" + action;
    return "RINGTRAIN_FAULTS=" + spec;
  }

  std::vector<std::string> CacheFiles() const {
    std::vector<std::string> files;
    if (!std::filesystem::exists(dir_ + "/ringtrain")) return files;
    for (const auto& e : std::filesystem::directory_iterator(dir_ + "/ringtrain"))
      files.push_back(e.path().string());
    return files;
  }

  Result<cpu::GemmChoice> ReadCache(const std::string& path) const {
    ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFileBytes(path));
    return cpu::ParseGemmChoice(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }

  void SkipWithoutAChoice() {
    if (candidates_.size() < 2) GTEST_SKIP() << "one candidate on this CPU: nothing to choose";
  }

  std::string dir_;
  std::string library_choice_;
  std::vector<std::string> candidates_;
};

TEST_F(GemmSelectTest, AnExplicitCoreTypeIsRespected) {
  for (const char* forced : {"Haswell", "Prescott"}) {
    const ChildRun run = Child({}, {std::string("OPENBLAS_CORETYPE=") + forced});
    ASSERT_EQ(run.outcome.exit_code, 0) << run.outcome.output;
    EXPECT_EQ(run.Running(), forced) << run.outcome.output;
    EXPECT_NE(run.BlasLine().find(std::string("kernels ") + forced + " (OPENBLAS_CORETYPE)"),
              std::string::npos)
        << run.outcome.output;
  }
  EXPECT_TRUE(CacheFiles().empty()) << "nothing is probed or cached when the user chose";
}

TEST_F(GemmSelectTest, TheChoiceIsCachedLoggedOnceAndInheritedByWorkers) {
  SkipWithoutAChoice();
  const ChildRun first = Child({"spawn"}, {});
  ASSERT_EQ(first.outcome.exit_code, 0) << first.outcome.output;
  const std::string line = first.BlasLine();
  ASSERT_NE(line, "") << "expected exactly one BLAS line:\n" << first.outcome.output;
  EXPECT_NE(line.find(" (auto; "), std::string::npos) << line;
  const std::string running = first.Running();
  EXPECT_NE(line.find("kernels " + running + " ("), std::string::npos) << line;
  EXPECT_EQ(first.With("running " + running + " env " + running).size(), 2u)
      << "the child and its worker run the chosen set:\n"
      << first.outcome.output;
  // The cache holds every candidate's outcome, and the choice is the fastest correct one.
  const std::vector<std::string> files = CacheFiles();
  ASSERT_EQ(files.size(), 1u);
  Result<cpu::GemmChoice> cached = ReadCache(files[0]);
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_EQ(cached->chosen, running);
  EXPECT_EQ(cached->library_choice, library_choice_);
  ASSERT_EQ(cached->candidates.size(), candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i)
    EXPECT_EQ(cached->candidates[i].kernels, candidates_[i]);
  EXPECT_EQ(*cpu::DecideGemmKernels(library_choice_, cached->candidates), running);

  const ChildRun second = Child({"spawn"}, {});
  ASSERT_EQ(second.outcome.exit_code, 0) << second.outcome.output;
  EXPECT_NE(second.BlasLine().find("kernels " + running + " (auto, cached; "), std::string::npos)
      << second.outcome.output;
  EXPECT_EQ(second.With("running " + running + " env " + running).size(), 2u);
  Result<cpu::GemmChoice> again = ReadCache(files[0]);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(cpu::SerializeGemmChoice(*again), cpu::SerializeGemmChoice(*cached))
      << "a cached choice is not probed again";
}

TEST_F(GemmSelectTest, ACachedChoiceIsUsedAsItIs) {
  SkipWithoutAChoice();
  const ChildRun first = Child({}, {});
  ASSERT_EQ(first.outcome.exit_code, 0) << first.outcome.output;
  const std::vector<std::string> files = CacheFiles();
  ASSERT_EQ(files.size(), 1u);
  Result<cpu::GemmChoice> cached = ReadCache(files[0]);
  ASSERT_TRUE(cached.ok());
  // Rewrite the cache to choose the last candidate, as if it had been the fastest.
  cpu::GemmChoice edited = *cached;
  edited.chosen = candidates_.back();
  for (GemmProbeResult& c : edited.candidates)
    if (c.kernels == edited.chosen) c.outcome = Outcome::kPassed, c.gflops = 1e6;
  const std::string text = cpu::SerializeGemmChoice(edited);
  ASSERT_TRUE(WriteFileBytes(files[0], std::as_bytes(std::span(text.data(), text.size()))).ok());
  const ChildRun run = Child({}, {});
  ASSERT_EQ(run.outcome.exit_code, 0) << run.outcome.output;
  EXPECT_EQ(run.Running(), candidates_.back()) << run.outcome.output;
  EXPECT_NE(run.BlasLine().find("(auto, cached; "), std::string::npos) << run.outcome.output;
}

TEST_F(GemmSelectTest, ACacheForAnotherLibraryIsProbedAgain) {
  SkipWithoutAChoice();
  ASSERT_EQ(Child({}, {}).outcome.exit_code, 0);
  const std::vector<std::string> files = CacheFiles();
  ASSERT_EQ(files.size(), 1u);
  Result<cpu::GemmChoice> cached = ReadCache(files[0]);
  ASSERT_TRUE(cached.ok());
  const std::string library = cached->library;
  // A valid file under this key's name whose key is another library version: stale, not corrupt.
  cached->library = "OpenBLAS 0.0.1 DYNAMIC_ARCH";
  const std::string text = cpu::SerializeGemmChoice(*cached);
  ASSERT_TRUE(WriteFileBytes(files[0], std::as_bytes(std::span(text.data(), text.size()))).ok());
  const ChildRun run = Child({}, {});
  ASSERT_EQ(run.outcome.exit_code, 0) << run.outcome.output;
  EXPECT_NE(run.BlasLine().find(" (auto; "), std::string::npos) << run.outcome.output;
  EXPECT_TRUE(run.With("warn").empty()) << run.outcome.output;
  Result<cpu::GemmChoice> rewritten = ReadCache(files[0]);
  ASSERT_TRUE(rewritten.ok());
  EXPECT_EQ(rewritten->library, library);
}

TEST_F(GemmSelectTest, ACorruptCacheIsIgnoredAndRewritten) {
  SkipWithoutAChoice();
  ASSERT_EQ(Child({}, {}).outcome.exit_code, 0);
  const std::vector<std::string> files = CacheFiles();
  ASSERT_EQ(files.size(), 1u);
  std::ofstream(files[0], std::ios::trunc) << "ringtrain-gemm-kernels 2\ncpu garbage\n";
  const ChildRun run = Child({}, {});
  ASSERT_EQ(run.outcome.exit_code, 0) << run.outcome.output;
  EXPECT_NE(run.BlasLine().find(" (auto; "), std::string::npos) << run.outcome.output;
  EXPECT_EQ(run.With("ignored the cache file").size(), 1u) << run.outcome.output;
  EXPECT_TRUE(ReadCache(files[0]).ok()) << "rewritten";
}

TEST_F(GemmSelectTest, AWrongLibraryChoiceIsRejected) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points compiled out";
  SkipWithoutAChoice();
  // OpenBLAS's own choice computes wrong numbers (made so by the fault point in its probe).
  const ChildRun run =
      Child({}, {"RINGTRAIN_FAULTS=kernels.gemm_probe.wrong." + library_choice_ + "=error"});
  ASSERT_EQ(run.outcome.exit_code, 0) << run.outcome.output;
  EXPECT_NE(run.Running(), library_choice_) << run.outcome.output;
  EXPECT_NE(run.BlasLine().find(library_choice_ + " rejected: wrong results"), std::string::npos)
      << run.outcome.output;
  const std::vector<std::string> files = CacheFiles();
  ASSERT_EQ(files.size(), 1u);
  Result<cpu::GemmChoice> cached = ReadCache(files[0]);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(cached->candidates[0].kernels, library_choice_);
  EXPECT_EQ(cached->candidates[0].outcome, Outcome::kWrong);
  EXPECT_NE(cached->candidates[0].detail.find("C[0,0]"), std::string::npos);
}

TEST_F(GemmSelectTest, NoCorrectSetStopsTheBinary) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points compiled out";
  SkipWithoutAChoice();
  const ChildRun run = Child({}, {ArmAll("wrong", "error")});
  EXPECT_EQ(run.outcome.exit_code, 1) << run.outcome.output;
  EXPECT_EQ(run.Running(), "") << run.outcome.output;
  EXPECT_EQ(run.With("no OpenBLAS kernel set computes correct sgemm results").size(), 1u)
      << run.outcome.output;
  for (const std::string& c : candidates_)
    EXPECT_EQ(run.With(c + " wrong: sgemm").size(), 1u) << run.outcome.output;
  EXPECT_TRUE(CacheFiles().empty());
}

TEST_F(GemmSelectTest, FailedProbesLeaveTheLibrarysChoice) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points compiled out";
  SkipWithoutAChoice();
  const ChildRun run = Child({}, {ArmAll("start", "crash")});
  ASSERT_EQ(run.outcome.exit_code, 0) << run.outcome.output;
  EXPECT_EQ(run.Running(), library_choice_);
  EXPECT_NE(run.BlasLine().find("OpenBLAS's own choice; probes failed"), std::string::npos)
      << run.outcome.output;
  EXPECT_EQ(run.With("every probe failed").size(), 1u) << run.outcome.output;
  EXPECT_TRUE(CacheFiles().empty()) << "a failed probe is not cached";
}

TEST_F(GemmSelectTest, AHangingProbeIsKilledAtItsDeadline) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points compiled out";
  SkipWithoutAChoice();
  const auto start = std::chrono::steady_clock::now();
  const ChildRun run =
      Child({}, {"RINGTRAIN_FAULTS=kernels.gemm_probe.start." + library_choice_ + "=delay:60000",
                 "GEMM_KERNELS_CHILD_PROBE_TIMEOUT_MS=8000"});
  // (8 s: the other probes must finish in time under ASan on a loaded 2-core machine; with 2 s
  // every probe of a CI run beside a chaos replay was killed.)
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(50));
  ASSERT_EQ(run.outcome.exit_code, 0) << run.outcome.output;
  EXPECT_NE(run.Running(), library_choice_);
  EXPECT_NE(run.BlasLine().find(library_choice_ + " failed to probe"), std::string::npos)
      << run.outcome.output;
  EXPECT_EQ(run.With(library_choice_ + " failed: probe killed after its deadline").size(), 1u)
      << run.outcome.output;
  EXPECT_TRUE(CacheFiles().empty()) << "a choice with a failed probe is not cached";
}

}  // namespace
}  // namespace rt
