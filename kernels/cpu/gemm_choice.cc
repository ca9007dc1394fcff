#include "kernels/cpu/gemm_choice.h"

#include <strings.h>

#include <charconv>
#include <cstdio>

#include "base/crc32c.h"

namespace rt::cpu {
namespace {

using Outcome = GemmProbeResult::Outcome;

// Version 2: a candidate that passed also gave the same bits at every thread count.
constexpr std::string_view kMagic = "ringtrain-gemm-kernels 2";

bool SameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

const GemmProbeResult* Find(const std::vector<GemmProbeResult>& candidates,
                            std::string_view kernels) {
  for (const GemmProbeResult& c : candidates)
    if (SameName(c.kernels, kernels)) return &c;
  return nullptr;
}

std::string Ratio(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", x);
  return buf;
}

// How `c` compares with the chosen set, e.g. "Prescott measured 4.70x slower".
std::string Compare(const GemmProbeResult& c, double chosen_gflops) {
  switch (c.outcome) {
    case Outcome::kPassed:
      if (c.gflops <= 0 || chosen_gflops <= 0) return c.kernels + " not timed";
      // Faster only within kGemmSwitchMargin: OpenBLAS's own choice stayed.
      if (c.gflops > chosen_gflops)
        return c.kernels + " measured " + Ratio(c.gflops / chosen_gflops) +
               " faster, within the margin";
      return c.kernels + " measured " + Ratio(chosen_gflops / c.gflops) + " slower";
    case Outcome::kWrong:
      return c.kernels + (c.detail.starts_with(kThreadDependent)
                              ? " rejected: results depend on the thread count"
                              : " rejected: wrong results");
    case Outcome::kTimed:
      return c.kernels + " not checked";
    case Outcome::kFailed:
      break;
  }
  return c.kernels + " failed to probe";
}

std::string OneLine(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

}  // namespace

Result<std::string> DecideGemmKernels(std::string_view library_choice,
                                      const std::vector<GemmProbeResult>& candidates) {
  const GemmProbeResult* best = nullptr;
  for (const GemmProbeResult& c : candidates)
    if (c.outcome == Outcome::kPassed && (best == nullptr || c.gflops > best->gflops)) best = &c;
  if (best == nullptr) {
    std::string why;
    for (const GemmProbeResult& c : candidates)
      why += (why.empty() ? "" : "; ") + c.kernels +
             (c.outcome == Outcome::kWrong ? " wrong: " : " failed: ") + c.detail;
    return FailedPrecondition("no OpenBLAS kernel set computes correct sgemm results here (" +
                              (why.empty() ? std::string("no candidates") : why) +
                              "); set OPENBLAS_CORETYPE to choose one yourself");
  }
  const GemmProbeResult* own = Find(candidates, library_choice);
  if (own != nullptr && own->outcome == Outcome::kPassed &&
      own->gflops >= best->gflops * (1.0 - kGemmSwitchMargin))
    return own->kernels;
  return best->kernels;
}

std::string DescribeGemmChoice(const GemmChoice& choice, bool cached) {
  std::string s = cached ? "auto, cached; " : "auto; ";
  const GemmProbeResult* chosen = Find(choice.candidates, choice.chosen);
  const double chosen_gflops = chosen ? chosen->gflops : 0;
  const GemmProbeResult* own = Find(choice.candidates, choice.library_choice);
  if (SameName(choice.chosen, choice.library_choice)) {
    // The library's own choice stays: name the fastest of the others that passed.
    s += "OpenBLAS's own choice";
    const GemmProbeResult* runner_up = nullptr;
    for (const GemmProbeResult& c : choice.candidates)
      if (c.outcome == Outcome::kPassed && &c != chosen &&
          (runner_up == nullptr || c.gflops > runner_up->gflops))
        runner_up = &c;
    if (runner_up != nullptr) s += ", " + Compare(*runner_up, chosen_gflops);
  } else if (own != nullptr) {
    s += Compare(*own, chosen_gflops);
  } else {
    s += "OpenBLAS's own choice " + choice.library_choice + " not probed";
  }
  for (const GemmProbeResult& c : choice.candidates)
    if (c.outcome != Outcome::kPassed && &c != own) s += "; " + Compare(c, chosen_gflops);
  return s;
}

std::string GemmChoiceCacheName(std::string_view cpu, std::string_view library) {
  const std::string key = std::string(cpu) + "\n" + std::string(library);
  char name[40];
  std::snprintf(name, sizeof(name), "gemm-kernels-%08x.txt", Crc32c(key.data(), key.size()));
  return name;
}

std::string SerializeGemmChoice(const GemmChoice& choice) {
  std::string text = std::string(kMagic) + "\n";
  text += "cpu " + OneLine(choice.cpu) + "\n";
  text += "library " + OneLine(choice.library) + "\n";
  text += "library_choice " + OneLine(choice.library_choice) + "\n";
  text += "chosen " + OneLine(choice.chosen) + "\n";
  for (const GemmProbeResult& c : choice.candidates)
    text += "candidate " + FormatGemmProbeResult(c) + "\n";
  char crc[32];
  std::snprintf(crc, sizeof(crc), "crc32c %08x\n", Crc32c(text.data(), text.size()));
  return text + crc;
}

Result<GemmChoice> ParseGemmChoice(std::string_view text) {
  // The CRC line comes last and covers every byte before it.
  const size_t crc_at = text.rfind("\ncrc32c ");
  if (crc_at == std::string_view::npos) return Corruption("no crc32c line (truncated?)");
  const std::string_view body = text.substr(0, crc_at + 1);
  std::string_view crc_text = text.substr(crc_at + 8);
  if (!crc_text.ends_with('\n')) return Corruption("truncated crc32c line");
  crc_text.remove_suffix(1);
  uint32_t crc = 0;
  const auto [end, ec] =
      std::from_chars(crc_text.data(), crc_text.data() + crc_text.size(), crc, 16);
  const bool lower_hex = crc_text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  if (ec != std::errc() || end != crc_text.data() + crc_text.size() || crc_text.size() != 8 ||
      !lower_hex)
    return Corruption("malformed crc32c line");
  if (crc != Crc32c(body.data(), body.size())) return Corruption("crc32c mismatch");
  GemmChoice choice;
  int line_no = 0;
  bool magic = false;
  for (std::string_view lines = body; !lines.empty();) {
    const size_t nl = lines.find('\n');  // body ends with '\n'
    const std::string_view line = lines.substr(0, nl);
    lines = lines.substr(nl + 1);
    ++line_no;
    if (line_no == 1) {
      if (line != kMagic)
        return Corruption("line 1: expected '" + std::string(kMagic) + "', found '" +
                          std::string(line.substr(0, 40)) + "'");
      magic = true;
      continue;
    }
    const size_t space = line.find(' ');
    const std::string_view field = line.substr(0, space);
    const std::string_view rest =
        space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    if (field == "cpu") {
      choice.cpu = std::string(rest);
    } else if (field == "library") {
      choice.library = std::string(rest);
    } else if (field == "library_choice") {
      choice.library_choice = std::string(rest);
    } else if (field == "chosen") {
      choice.chosen = std::string(rest);
    } else if (field == "candidate") {
      Result<GemmProbeResult> c = ParseGemmProbeResult(rest);
      if (!c.ok()) return c.status().WithContext("line " + std::to_string(line_no));
      choice.candidates.push_back(std::move(*c));
    } else {
      return Corruption("line " + std::to_string(line_no) + ": unknown field '" +
                        std::string(field) + "'");
    }
  }
  if (!magic || choice.cpu.empty() || choice.library.empty() || choice.library_choice.empty() ||
      choice.chosen.empty())
    return Corruption("a field is missing (cpu, library, library_choice, chosen)");
  if (Find(choice.candidates, choice.chosen) == nullptr ||
      Find(choice.candidates, choice.chosen)->outcome != Outcome::kPassed)
    return Corruption("the chosen set '" + choice.chosen + "' is not a candidate that passed");
  return choice;
}

}  // namespace rt::cpu
