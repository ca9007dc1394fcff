// base/notify: the test owns NOTIFY_SOCKET (a real AF_UNIX datagram socket, as systemd does) and
// checks the READY/STATUS/WATCHDOG/STOPPING sequence and the keep-alives' timing, with the
// kernel's receive timestamps (SO_TIMESTAMPNS), not the test thread's clock.
#include "base/notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "tests/base/net/loop.h"

namespace rt {
namespace {

using std::chrono::milliseconds;
using Nanos = std::chrono::nanoseconds;

// A datagram socket standing in for systemd's notification socket; sets NOTIFY_SOCKET and the
// watchdog variables for the life of the object.
class NotifySocket {
 public:
  explicit NotifySocket(int64_t watchdog_usec, std::string watchdog_pid = "") {
    path_ = (std::filesystem::temp_directory_path() /
             ("rt_notify_" + std::to_string(getpid()) + ".sock"))
                .string();
    std::filesystem::remove(path_);
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    int on = 1;
    setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
    setenv("NOTIFY_SOCKET", path_.c_str(), 1);
    if (watchdog_usec > 0) setenv("WATCHDOG_USEC", std::to_string(watchdog_usec).c_str(), 1);
    if (watchdog_usec > 0)
      setenv("WATCHDOG_PID",
             (watchdog_pid.empty() ? std::to_string(getpid()) : watchdog_pid).c_str(), 1);
  }
  ~NotifySocket() {
    close(fd_);
    std::filesystem::remove(path_);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
  }
  // One message and its kernel arrival time (realtime clock), or "" after `timeout`.
  std::pair<std::string, Nanos> Receive(milliseconds timeout) {
    timeval tv{timeout.count() / 1000, static_cast<long>(timeout.count() % 1000) * 1000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char data[4096];
    alignas(cmsghdr) char control[256];
    iovec iov{data, sizeof data};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd_, &msg, 0);
    if (n < 0) return {"", Nanos(0)};
    Nanos when(0);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        timespec ts;
        std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
        when = std::chrono::seconds(ts.tv_sec) + Nanos(ts.tv_nsec);
      }
    return {std::string(data, n), when};
  }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST(SystemdNotifier, WithoutNotifySocketEverythingIsANoOp) {
  unsetenv("NOTIFY_SOCKET");
  net::Loop loop;
  auto notifier = SystemdNotifier::Create(loop.io().get_executor());
  EXPECT_FALSE(notifier->enabled());
  EXPECT_EQ(notifier->watchdog_timeout().count(), 0);
  EXPECT_TRUE(notifier->Ready("up").ok());
  notifier->StartWatchdog();
  EXPECT_EQ(notifier->watchdog_pings(), 0);
}

TEST(SystemdNotifier, SequenceAndWatchdogTiming) {
  constexpr int64_t kWatchdogUsec = 200'000;  // keep-alives every 100 ms
  constexpr Nanos kPeriod = milliseconds(100);
  NotifySocket socket(kWatchdogUsec);
  net::Loop loop;
  auto notifier = SystemdNotifier::Create(loop.io().get_executor());
  ASSERT_TRUE(notifier->enabled());
  EXPECT_EQ(notifier->watchdog_timeout(), std::chrono::microseconds(kWatchdogUsec));

  ASSERT_TRUE(notifier->Ready("generation 1, 3 members").ok());
  EXPECT_EQ(socket.Receive(milliseconds(5000)).first, "READY=1\nSTATUS=generation 1, 3 members");
  ASSERT_TRUE(notifier->SetStatus("step 40").ok());
  EXPECT_EQ(socket.Receive(milliseconds(5000)).first, "STATUS=step 40");

  notifier->StartWatchdog();
  notifier->StartWatchdog();  // a second start changes nothing
  std::vector<Nanos> pings;
  while (pings.size() < 5) {
    auto [message, when] = socket.Receive(milliseconds(5000));
    ASSERT_EQ(message, "WATCHDOG=1");
    pings.push_back(when);
  }
  // Never more often than half the timeout (a timer cannot fire early).
  for (size_t i = 1; i < pings.size(); ++i) EXPECT_GE(pings[i] - pings[i - 1], kPeriod) << i;

  // A hung event loop sends no keep-alives: that is what lets systemd restart the daemon.
  std::atomic<int64_t> block_start_ns{0};
  boost::asio::post(loop.io(), [&] {
    block_start_ns =
        std::chrono::duration_cast<Nanos>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    std::this_thread::sleep_for(milliseconds(600));
  });
  for (;;) {
    auto [message, when] = socket.Receive(milliseconds(5000));
    ASSERT_EQ(message, "WATCHDOG=1");
    const Nanos block_start(block_start_ns.load());
    if (block_start.count() != 0 && when > block_start) {
      // The first keep-alive after the block started came only after it ended.
      EXPECT_GE(when - block_start, milliseconds(600));
      break;
    }
  }

  notifier->StopWatchdog();
  ASSERT_TRUE(notifier->Stopping("checkpointing, then leaving the view").ok());
  // Keep-alives sent before StopWatchdog returned may arrive before STOPPING; none after it.
  for (;;) {
    auto [message, when] = socket.Receive(milliseconds(5000));
    if (message == "WATCHDOG=1") continue;
    EXPECT_EQ(message, "STOPPING=1\nSTATUS=checkpointing, then leaving the view");
    break;
  }
  const int64_t pings_at_stop = notifier->watchdog_pings();
  EXPECT_EQ(socket.Receive(milliseconds(400)).first, "");
  EXPECT_EQ(notifier->watchdog_pings(), pings_at_stop);
}

TEST(SystemdNotifier, WatchdogForAnotherProcessIsNotOurs) {
  NotifySocket socket(200'000, std::to_string(getpid() + 1));
  net::Loop loop;
  auto notifier = SystemdNotifier::Create(loop.io().get_executor());
  EXPECT_TRUE(notifier->enabled());
  EXPECT_EQ(notifier->watchdog_timeout().count(), 0);
  notifier->StartWatchdog();
  EXPECT_EQ(socket.Receive(milliseconds(300)).first, "");
}

TEST(SystemdNotifier, UnreachableSocketIsAnErrorNamingIt) {
  setenv("NOTIFY_SOCKET", "/nonexistent/ringtrain/notify.sock", 1);
  net::Loop loop;
  auto notifier = SystemdNotifier::Create(loop.io().get_executor());
  Status ready = notifier->Ready("");
  unsetenv("NOTIFY_SOCKET");
  ASSERT_FALSE(ready.ok());
  EXPECT_NE(ready.message().find("/nonexistent/ringtrain/notify.sock"), std::string_view::npos)
      << ready.ToString();
}

}  // namespace
}  // namespace rt
