#include "tools/ringctl/top.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <thread>

#include <fmt/format.h>

namespace rt::ctl {
namespace {

using daemon::Json;

std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted = true; }

std::string Field(const Json& j, const char* key, const std::string& absent = "-") {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absent;
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// "tp=2,pp=1,dp=3,... on nodes 1,2,3 (...)": the layout before " on nodes".
std::string LayoutOf(const std::string& plan) {
  const size_t on = plan.find(" on nodes");
  return on == std::string::npos ? plan : plan.substr(0, on);
}

}  // namespace

std::string RenderTop(const Json& s) {
  std::string out;
  const Json& view = s.value("view", Json::object());
  const Json members = view.value("members", Json::array());
  out += fmt::format("generation {}.{}   members {}   answered by node {}\n",
                     Field(view, "generation"), Field(s, "epoch"), members.size(),
                     Field(s, "answered_by"));
  std::string layout = "-";
  const Json progress = s.value("progress", Json::object());
  for (const Json& n : s.value("nodes", Json::array())) {
    if (n.contains("error") || n.value("generation", "").empty()) continue;
    if (progress.contains("generation") && n["generation"] != progress["generation"]) continue;
    layout = LayoutOf(n.value("plan", "-"));
    break;
  }
  if (s.contains("job")) {
    const Json& job = s["job"];
    out += fmt::format("job {} (id {}): {}   layout {}\n", Field(job, "name"), Field(job, "id"),
                       Field(job, "desire"), layout);
  } else {
    out += "job none\n";
  }
  if (!progress.empty()) {
    out += fmt::format("step {}   loss {:.4f}   tokens/s {:.0f}   training generation {}\n",
                       Field(progress, "step"), progress.value("loss", 0.0),
                       progress.value("tokens_per_s", 0.0), Field(progress, "generation"));
  } else {
    out += "step -   loss -   tokens/s -\n";
  }
  const Json checkpoint = s.value("checkpoint", Json::object());
  out += fmt::format("last checkpoint {}\n",
                     checkpoint.empty()
                         ? std::string("-")
                         : "step " + Field(checkpoint, "step") + " at " + Field(checkpoint, "uri"));
  out += fmt::format("\n{:<6} {:<22} {:<8} {:<10} {:<12} {}\n", "NODE", "ADDRESS", "STATE", "RANKS",
                     "GENERATION", "HTTP");
  std::map<int64_t, std::string> addresses;
  for (const Json& m : members) addresses[m.value("id", int64_t{0})] = Field(m, "address");
  for (const Json& n : s.value("nodes", Json::array())) {
    const int64_t id = n.value("node", int64_t{0});
    if (n.contains("error")) {
      out += fmt::format("{:<6} {:<22} {:<8} {}\n", id, addresses[id], "error", Field(n, "error"));
      continue;
    }
    std::string ranks;
    for (const Json& w : n.value("workers", Json::array()))
      ranks += (ranks.empty() ? "" : ",") + Field(w, "rank");
    out += fmt::format("{:<6} {:<22} {:<8} {:<10} {:<12} {}\n", id, addresses[id], "up",
                       ranks.empty() ? "-" : ranks, Field(n, "generation", "-"), Field(n, "http"));
  }
  return out;
}

int RunTop(const TopOptions& options) {
  if (!options.once) {
    struct sigaction action {};
    action.sa_handler = OnSignal;
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
  }
  const bool terminal = !options.once && ::isatty(STDOUT_FILENO);
  while (true) {
    Result<Json> status =
        daemon::CallJsonBlocking(options.daemon, options.secret, daemon::kCtlStatus, Json::object(),
                                 Deadline::AfterMs(options.timeout_ms));
    if (options.once) {
      if (!status.ok()) {
        std::fprintf(stderr, "ringctl: %s\n", status.status().ToString().c_str());
        return 1;
      }
      std::fputs(RenderTop(*status).c_str(), stdout);
      return 0;
    }
    std::string screen = terminal ? "\x1b[H\x1b[2J" : "";
    char clock[32] = "";
    const time_t now = ::time(nullptr);
    tm local{};
    ::localtime_r(&now, &local);
    std::strftime(clock, sizeof(clock), "%H:%M:%S", &local);
    screen += fmt::format("ringctl top: {} every {} ms, {} (Ctrl-C quits)\n\n", options.daemon,
                          options.interval_ms, clock);
    screen +=
        status.ok() ? RenderTop(*status) : "unreachable: " + status.status().ToString() + "\n";
    if (!terminal) screen += "\n";
    std::fputs(screen.c_str(), stdout);
    std::fflush(stdout);
    // Sleeps in short slices so that Ctrl-C quits at once.
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options.interval_ms);
    while (!g_interrupted && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_interrupted) return 0;
  }
}

}  // namespace rt::ctl
