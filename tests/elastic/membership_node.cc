// One membership node as a process, for the process tests (membership_process_test.cc):
//   membership_node ID LISTEN STATE_DIR [SEED,SEED,...]
// Prints one line per event on stdout — "view GENERATION ID,ID,...", "suspect NODE MS",
// "removed", "left ok" / "left ERROR" — and its log on stderr. SIGTERM leaves the cluster
// gracefully (Leave, then exit 0); SIGINT stops without leaving.
#include <csignal>
#include <cstdio>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/log.h"
#include "elastic/membership.h"

namespace asio = boost::asio;
using namespace rt::elastic;

namespace {

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) parts.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

void Print(const MembershipNotification& n) {
  using Kind = MembershipNotification::Kind;
  switch (n.kind) {
    case Kind::kViewInstalled: {
      std::string ids;
      for (const Member& m : n.view.members) ids += (ids.empty() ? "" : ",") + std::to_string(m.id);
      std::printf("view %llu %s\n", static_cast<unsigned long long>(n.view.generation),
                  ids.c_str());
      break;
    }
    case Kind::kSuspected:
      std::printf("suspect %llu %lld\n", static_cast<unsigned long long>(n.node),
                  static_cast<long long>(n.detected_after.count()));
      break;
    case Kind::kRemoved:
      std::printf("removed\n");
      break;
    case Kind::kStateChanged:
      std::printf("state %llu\n", static_cast<unsigned long long>(n.state.version));
      break;
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s ID LISTEN STATE_DIR [SEED,SEED,...]\n", argv[0]);
    return 2;
  }
  if (rt::Status s = rt::InitLogging("info", "membership_node"); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  MembershipServiceOptions options;
  options.node_id = std::strtoull(argv[1], nullptr, 10);
  options.listen = argv[2];
  options.state_dir = argv[3];
  if (argc > 4) options.seeds = SplitCommas(argv[4]);
  options.on_notification = Print;
  auto service = StartMembershipService(options);
  if (!service.ok()) {
    std::fprintf(stderr, "membership_node: %s\n", service.status().ToString().c_str());
    return 1;
  }
  asio::io_context io;
  asio::signal_set signals(io, SIGTERM, SIGINT);
  int exit_code = 0;
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    if (signal != SIGTERM) {
      io.stop();
      return;
    }
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          rt::Status left = co_await (*service)->Leave(rt::Deadline::AfterMs(10'000));
          std::printf("left %s\n", left.ok() ? "ok" : left.ToString().c_str());
          std::fflush(stdout);
          exit_code = left.ok() ? 0 : 1;
          io.stop();
        },
        asio::detached);
  });
  io.run();
  rt::Status stopped = (*service)->Shutdown(rt::Deadline::AfterMs(5'000));
  if (!stopped.ok()) std::fprintf(stderr, "membership_node: %s\n", stopped.ToString().c_str());
  return exit_code;
}
