// bench/chaos/netns.h on real network namespaces, a bridge and veth pairs (root only; skipped
// with the reason elsewhere): real TCP connections between the nodes' namespaces and from the
// root namespace, cut by Split and back after Heal; Remove and RemoveLeftoverNetworks leave no
// namespace or bridge behind.
#include "bench/chaos/netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <string>

#include <gtest/gtest.h>

#include "base/deadline.h"
#include "base/subprocess.h"

namespace rt::chaos {
namespace {

constexpr uint16_t kPort = 7799;

// Runs `fn` on a thread that entered namespace `ns` (setns changes only that thread's network
// namespace); "" = the root namespace.
template <typename Fn>
auto InNamespace(const std::string& ns, Fn fn) {
  return std::async(std::launch::async,
                    [ns, fn] {
                      if (!ns.empty()) {
                        const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
                        EXPECT_GE(fd, 0) << ns;
                        EXPECT_EQ(::setns(fd, CLONE_NEWNET), 0) << ns;
                        ::close(fd);
                      }
                      return fn();
                    })
      .get();
}

// A socket listening on `address`:kPort (made inside the caller's namespace).
int Listen(const std::string& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(kPort);
  ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << address;
  EXPECT_EQ(::listen(fd, 16), 0);
  return fd;
}

// True when a TCP connection to `address`:kPort is established within 1 s.
bool Connects(const std::string& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(kPort);
  ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    ok = ::poll(&p, 1, 1000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
         err == 0;
  }
  ::close(fd);
  return ok;
}

// The output of `ip ARGS` (the test fails when it cannot run).
std::string IpOutput(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/sbin/ip"};
  if (::access(argv[0].c_str(), X_OK) != 0) argv[0] = "/sbin/ip";
  argv.insert(argv.end(), args.begin(), args.end());
  Result<ProcessOutcome> run = RunProcess(argv, EnvironmentWithout({}), Deadline::AfterMs(15'000));
  EXPECT_TRUE(run.ok() && run->exited && run->exit_code == 0);
  return run.ok() ? run->output : "";
}

class NodeNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = NetnsUnavailable(); !why.empty())
      GTEST_SKIP() << "no network namespaces here: " << why;
  }
};

TEST_F(NodeNetworkTest, SplitCutsTheNodesApartButNotFromTheRootAndHealJoinsThem) {
  Result<std::unique_ptr<NodeNetwork>> made = NodeNetwork::Create(3);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  NodeNetwork& net = **made;
  std::vector<int> listeners;
  for (int id = 1; id <= 3; ++id)
    listeners.push_back(InNamespace(net.Namespace(id), [&] { return Listen(net.Address(id)); }));
  auto from = [&](int id, int to) {
    return InNamespace(id == 0 ? "" : net.Namespace(id), [&] { return Connects(net.Address(to)); });
  };
  EXPECT_TRUE(from(1, 2));
  EXPECT_TRUE(from(3, 1));
  EXPECT_TRUE(from(0, 3));

  ASSERT_TRUE(net.Split({1}, {2, 3}).ok());
  EXPECT_FALSE(from(1, 2));
  EXPECT_FALSE(from(2, 1));
  EXPECT_FALSE(from(3, 1));
  EXPECT_TRUE(from(2, 3));  // the same side
  EXPECT_TRUE(from(0, 1));  // ringchaos reaches every daemon
  EXPECT_TRUE(from(0, 2));

  ASSERT_TRUE(net.Heal().ok());
  EXPECT_TRUE(from(1, 2));
  EXPECT_TRUE(from(3, 1));
  for (int fd : listeners) ::close(fd);

  const std::string ns = net.Namespace(1);
  net.Remove();
  EXPECT_EQ(IpOutput({"netns", "list"}).find(ns), std::string::npos);
  EXPECT_EQ(IpOutput({"-o", "link", "show"}).find("rtcb" + std::to_string(::getpid())),
            std::string::npos);
}

TEST_F(NodeNetworkTest, LeftoversOfAGoneCampaignAreRemovedAndThoseOfARunningOneKept) {
  // A pid that ran and is gone: the "killed campaign".
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  const std::string dead = std::to_string(gone), alive = std::to_string(::getpid());
  IpOutput({"netns", "add", "rtc-" + dead + "-1"});
  IpOutput({"link", "add", "rtcb" + dead, "type", "bridge"});
  IpOutput({"netns", "add", "rtc-" + alive + "-9"});

  RemoveLeftoverNetworks();
  const std::string namespaces = IpOutput({"netns", "list"});
  EXPECT_EQ(namespaces.find("rtc-" + dead + "-1"), std::string::npos) << namespaces;
  EXPECT_NE(namespaces.find("rtc-" + alive + "-9"), std::string::npos) << namespaces;
  EXPECT_EQ(IpOutput({"-o", "link", "show"}).find("rtcb" + dead), std::string::npos);
  IpOutput({"netns", "del", "rtc-" + alive + "-9"});
}

}  // namespace
}  // namespace rt::chaos
