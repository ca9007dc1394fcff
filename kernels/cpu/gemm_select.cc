// SelectGemmKernels (kernels/gemm_kernels.h): probe children, the cache, the re-execution and
// the environment that carries the choice to every process started afterwards.
#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include "base/fault.h"
#include "base/file.h"
#include "base/log.h"
#include "base/subprocess.h"
#include "kernels/cpu/gemm_candidates.h"
#include "kernels/cpu/gemm_choice.h"
#include "kernels/cpu/gemm_probe.h"
#include "kernels/gemm_kernels.h"

namespace rt {
namespace {

using cpu::GemmProbeResult;
using Outcome = GemmProbeResult::Outcome;

constexpr char kCoreTypeEnv[] = "OPENBLAS_CORETYPE";
// Set in a probe child: "check" (check and time) or "time" (time only).
constexpr char kProbeEnv[] = "RINGTRAIN_GEMM_PROBE";
// Set by the process that chose, for itself after re-executing and for every process it starts:
// "<pid>\t<kernels>\t<how>[\t<warning>]...", where pid is the chooser's.
constexpr char kChoiceEnv[] = "RINGTRAIN_GEMM_KERNELS";
// Marks the report line among a probe child's output (OpenBLAS may print messages of its own).
constexpr std::string_view kReportTag = "gemm-probe 1 ";

// What this process runs, set once by SelectGemmKernels.
struct State {
  GemmKernelsInUse in_use;
  bool chooser = false;  // this process chose (or first saw the user's value): it logs at info
  std::vector<std::string> warnings;
};

State& TheState() {
  static State* state = new State{{"", "", "not selected"}, false, {}};
  return *state;
}

bool SameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// "OpenBLAS 0.3.21": the first two words of openblas_get_config().
std::string LibraryVersion() {
  const std::string config = openblas_get_config();
  const size_t space = config.find(' ');
  return config.substr(0, space == std::string::npos ? space : config.find(' ', space + 1));
}

// openblas_get_config() without the word that names the loaded kernel set: the same for every
// OPENBLAS_CORETYPE, different for another build or version of the library.
std::string LibraryKey() {
  const std::string running = openblas_get_corename();
  std::string key;
  std::string_view config = openblas_get_config();
  while (!config.empty()) {
    const size_t space = config.find(' ');
    const std::string_view word = config.substr(0, space);
    config = space == std::string_view::npos ? std::string_view() : config.substr(space + 1);
    if (word.empty() || SameName(word, running)) continue;
    key += (key.empty() ? "" : " ") + std::string(word);
  }
  return key;
}

struct Marker {
  pid_t pid = 0;
  std::string kernels;
  std::string how;
  std::vector<std::string> warnings;
};

std::optional<Marker> ReadMarker() {
  const char* env = std::getenv(kChoiceEnv);
  if (env == nullptr) return std::nullopt;
  std::vector<std::string> fields;
  for (std::string_view rest = env;;) {
    const size_t tab = rest.find('\t');
    fields.emplace_back(rest.substr(0, tab));
    if (tab == std::string_view::npos) break;
    rest = rest.substr(tab + 1);
  }
  if (fields.size() < 3) return std::nullopt;
  Marker m;
  m.pid = static_cast<pid_t>(std::atol(fields[0].c_str()));
  m.kernels = fields[1];
  m.how = fields[2];
  m.warnings.assign(fields.begin() + 3, fields.end());
  return m;
}

// Records `kernels` as this process's set, chosen by it, in the state and in the environment
// that every process started from now on inherits.
void Adopt(const std::string& kernels, const std::string& how) {
  State& s = TheState();
  s.in_use = {LibraryVersion(), openblas_get_corename(), how};
  s.chooser = true;
  std::string marker = std::to_string(::getpid()) + "\t" + kernels + "\t" + how;
  for (const std::string& w : s.warnings) marker += "\t" + w;
  ::setenv(kCoreTypeEnv, kernels.c_str(), 1);
  ::setenv(kChoiceEnv, marker.c_str(), 1);
}

// Writes `text` to stdout, then exits with `code` without running atexit handlers.
[[noreturn]] void WriteAndExit(const std::string& text, int code) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(1, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(3);
    done += static_cast<size_t>(n);
  }
  ::_exit(code);
}

// The body of a probe child: the report on stdout. The fault point
// "kernels.gemm_probe.start.<kernels>" makes it fail (error), die (crash) or hang (delay) first.
[[noreturn]] void RunProbeChild(std::string_view mode) {
  const std::string running = openblas_get_corename();
  if (Status f = RT_FAULT_POINT("kernels.gemm_probe.start." + running); !f.ok())
    WriteAndExit("probe of " + running + " failed: " + f.ToString() + "\n", 4);
  cpu::GemmProbeWork work;
  work.check = mode == "check";
  WriteAndExit(std::string(kReportTag) + cpu::FormatGemmProbeResult(cpu::RunGemmProbe(work)) + "\n",
               0);
}

// The text after kReportTag on the report line of a probe child's output.
std::optional<std::string_view> ReportLine(std::string_view output) {
  while (!output.empty()) {
    const size_t nl = output.find('\n');
    const std::string_view line = output.substr(0, nl);
    if (line.starts_with(kReportTag)) return line.substr(kReportTag.size());
    output = nl == std::string_view::npos ? std::string_view() : output.substr(nl + 1);
  }
  return std::nullopt;
}

// Starts one probe child for `kernels` and reads its report.
GemmProbeResult ProbeOnce(const std::string& kernels, std::string_view mode,
                          const GemmKernelOptions& options) {
  GemmProbeResult r;
  r.kernels = kernels;
  std::vector<std::string> env = EnvironmentWithout({kCoreTypeEnv, kChoiceEnv, kProbeEnv});
  env.push_back(std::string(kCoreTypeEnv) + "=" + kernels);
  env.push_back(std::string(kProbeEnv) + "=" + std::string(mode));
  Result<ProcessOutcome> run =
      RunProcess({options.executable}, env, Deadline::AfterMs(options.probe_timeout_ms), 64 << 10);
  if (!run.ok()) {
    r.detail = run.status().ToString();
    return r;
  }
  const std::optional<std::string_view> line = ReportLine(run->output);
  Result<GemmProbeResult> report =
      line ? cpu::ParseGemmProbeResult(*line) : Result<GemmProbeResult>(Corruption("no report"));
  if (!run->exited || run->exit_code != 0 || !report.ok()) {
    std::string output = run->output.substr(0, 200);
    for (char& ch : output)
      if (ch == '\n') ch = ' ';
    r.detail = "probe " + run->Describe() + (output.empty() ? "" : ", output: " + output);
    return r;
  }
  if (!SameName(report->kernels, kernels)) {
    r.detail = "OpenBLAS ran " + report->kernels + " instead";
    return r;
  }
  report->kernels = kernels;
  return *report;
}

// Every candidate checked and timed, then timed once more in the reverse order (a busy moment of
// the machine should not decide); each keeps its better figure.
std::vector<GemmProbeResult> ProbeCandidates(const std::vector<std::string>& candidates,
                                             const GemmKernelOptions& options) {
  std::vector<GemmProbeResult> results;
  for (const std::string& kernels : candidates)
    results.push_back(ProbeOnce(kernels, "check", options));
  for (auto it = results.rbegin(); it != results.rend(); ++it) {
    if (it->outcome != Outcome::kPassed) continue;
    const GemmProbeResult again = ProbeOnce(it->kernels, "time", options);
    if (again.outcome == Outcome::kTimed) it->gflops = std::max(it->gflops, again.gflops);
  }
  return results;
}

// $XDG_CACHE_HOME/ringtrain or $HOME/.cache/ringtrain ("" when neither is set).
std::string CacheDir(const GemmKernelOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/ringtrain";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return std::string(home) + "/.cache/ringtrain";
  return "";
}

// The cached choice for (cpu, library): NotFound when there is none (or it is for another key),
// Corruption when the file does not parse.
Result<cpu::GemmChoice> ReadCachedChoice(const std::string& path, const std::string& cpu,
                                         const std::string& library) {
  ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFileBytes(path));
  ASSIGN_OR_RETURN(cpu::GemmChoice choice,
                   cpu::ParseGemmChoice(std::string_view(
                       reinterpret_cast<const char*>(bytes.data()), bytes.size())));
  if (choice.cpu != cpu || choice.library != library)
    return NotFound("cache file '" + path + "' is for another CPU or library");
  return choice;
}

Status WriteCachedChoice(const std::string& dir, const std::string& path,
                         const cpu::GemmChoice& choice) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kIoError, "create '" + dir + "': " + ec.message());
  const std::string text = cpu::SerializeGemmChoice(choice);
  return WriteFileBytes(path, std::as_bytes(std::span(text.data(), text.size())));
}

// The automatic choice: OPENBLAS_CORETYPE is unset and OpenBLAS loaded its own choice.
Status SelectAutomatically(char** argv, const GemmKernelOptions& options) {
  State& s = TheState();
  const std::string running = openblas_get_corename();
  if (std::string_view(openblas_get_config()).find("DYNAMIC_ARCH") == std::string_view::npos) {
    Adopt(running, "OpenBLAS's own choice; this OpenBLAS has one kernel set (no DYNAMIC_ARCH)");
    return Status();
  }
  const cpu::CpuFeatures features = cpu::DetectCpuFeatures();
  const std::vector<std::string> candidates = cpu::GemmKernelCandidates(features, running);
  if (candidates.size() < 2) {
    Adopt(running, "OpenBLAS's own choice; no other candidate on this CPU");
    return Status();
  }
  cpu::GemmChoice choice;
  choice.cpu = (features.model.empty() ? "unknown CPU" : features.model) + " | " +
               cpu::DescribeCpuFeatures(features);
  choice.library = LibraryKey();
  choice.library_choice = running;
  const std::string dir = CacheDir(options);
  const std::string path =
      dir.empty() ? "" : dir + "/" + cpu::GemmChoiceCacheName(choice.cpu, choice.library);
  bool cached = false;
  if (path.empty()) {
    s.warnings.push_back(
        "no cache directory (neither XDG_CACHE_HOME nor HOME is set): the "
        "kernels are probed at every start");
  } else if (Result<cpu::GemmChoice> c = ReadCachedChoice(path, choice.cpu, choice.library);
             c.ok()) {
    choice = std::move(*c);
    cached = true;
  } else if (c.status().code() != StatusCode::kNotFound) {
    s.warnings.push_back("ignored the cache file '" + path + "' (" + c.status().ToString() +
                         "): probed again and rewrote it");
  }
  if (!cached) {
    choice.candidates = ProbeCandidates(candidates, options);
    Result<std::string> chosen = DecideGemmKernels(running, choice.candidates);
    if (!chosen.ok()) {
      const bool any_wrong =
          std::any_of(choice.candidates.begin(), choice.candidates.end(),
                      [](const GemmProbeResult& c) { return c.outcome == Outcome::kWrong; });
      if (any_wrong) return chosen.status();
      // Only the probes failed (could not start, crashed, timed out): nothing says the library's
      // own choice is wrong, so it stays, and nothing is cached.
      s.warnings.push_back("every probe failed (" + chosen.status().ToString() +
                           "): running OpenBLAS's own choice");
      Adopt(running, "OpenBLAS's own choice; probes failed");
      return Status();
    }
    choice.chosen = *chosen;
    // A probe that did not report may have met a busy moment: such a choice is not kept.
    std::string failed;
    for (const GemmProbeResult& c : choice.candidates)
      if (c.outcome == Outcome::kFailed)
        failed += (failed.empty() ? "" : "; ") + c.kernels + " failed: " + c.detail;
    if (!failed.empty()) {
      s.warnings.push_back("not cached, as a probe failed (" + failed + ")");
    } else if (!path.empty()) {
      if (Status w = WriteCachedChoice(dir, path, choice); !w.ok())
        s.warnings.push_back("could not write the cache: " + w.ToString());
    }
  }
  const std::string how = cpu::DescribeGemmChoice(choice, cached);
  Adopt(choice.chosen, how);
  if (SameName(choice.chosen, running)) return Status();
  // OpenBLAS has loaded `running` for good: load the chosen set in a fresh image of this binary.
  ::execv(options.executable.c_str(), argv);
  const int err = errno;
  s.warnings.push_back("re-executing '" + options.executable + "' with " + kCoreTypeEnv + "=" +
                       choice.chosen + " failed: " + std::strerror(err));
  for (const GemmProbeResult& c : choice.candidates)
    if (SameName(c.kernels, running) && c.outcome == Outcome::kWrong)
      return FailedPrecondition("OpenBLAS's own choice " + running + " computes wrong results (" +
                                c.detail + ") and " + choice.chosen +
                                " could not be loaded: " + s.warnings.back());
  Adopt(running, "OpenBLAS's own choice; " + choice.chosen + " could not be loaded");
  return Status();
}

}  // namespace

std::string GemmKernelsInUse::Line() const {
  return "BLAS: " + library + ", kernels " + kernels + " (" + how + ")";
}

Status SelectGemmKernels(char** argv, const GemmKernelOptions& options) {
  if (const char* probe = std::getenv(kProbeEnv); probe != nullptr) RunProbeChild(probe);
  State& s = TheState();
  const char* forced = std::getenv(kCoreTypeEnv);
  if (forced == nullptr || forced[0] == '\0') return SelectAutomatically(argv, options);
  const std::optional<Marker> marker = ReadMarker();
  if (marker && marker->kernels == forced) {
    // Chosen by this process before it re-executed itself, or inherited from the chooser.
    s.in_use = {LibraryVersion(), openblas_get_corename(), marker->how};
    s.chooser = marker->pid == ::getpid();
    s.warnings = marker->warnings;
    return Status();
  }
  std::string how = kCoreTypeEnv;
  if (!SameName(forced, openblas_get_corename()))
    how += std::string("=") + forced + ", which OpenBLAS does not run here";
  Adopt(forced, how);
  return Status();
}

Status SelectGemmKernelsAndLog(char** argv, std::string_view log_level, std::string_view name,
                               const GemmKernelOptions& options) {
  RETURN_IF_ERROR(SelectGemmKernels(argv, options));
  RETURN_IF_ERROR(InitLogging(log_level, name));
  LogGemmKernels();
  return Status();
}

GemmKernelsInUse CurrentGemmKernels() {
  GemmKernelsInUse in_use = TheState().in_use;
  if (in_use.library.empty()) {
    in_use.library = LibraryVersion();
    in_use.kernels = openblas_get_corename();
  }
  return in_use;
}

void LogGemmKernels() {
  const State& s = TheState();
  const std::string line = CurrentGemmKernels().Line();
  if (!s.chooser) {
    LOG_DEBUG("{} (inherited)", line);
    return;
  }
  LOG_INFO("{}", line);
  for (const std::string& w : s.warnings) LOG_WARN("BLAS: {}", w);
}

}  // namespace rt
