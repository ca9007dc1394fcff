#include "base/net/free_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <random>
#include <set>
#include <string>

namespace rt::net {
namespace {

// Ports tried first: below Linux's default ephemeral range (32768-60999), so that no outgoing
// connection of this or another process is given the port between the check and its use.
constexpr uint16_t kLowest = 20000;
constexpr uint16_t kHighest = 32767;
constexpr int kTries = 64;

// Binds 127.0.0.1:`port` (0: the kernel picks) and releases it; returns the bound port, or 0
// with errno set when the bind failed.
uint16_t BindAndRelease(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  socklen_t len = sizeof(a);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  ::close(fd);
  errno = err;
  return ok ? static_cast<uint16_t>(ntohs(a.sin_port)) : 0;
}

// The ports this process was given: a caller that asks for several ports before it starts the
// servers on them (a local cluster) must not get one port twice.
std::mutex handed_out_mutex;
std::set<uint16_t>& HandedOut() {
  static auto* ports = new std::set<uint16_t>;
  return *ports;
}

// `port` unless this process was given it before (then 0); remembers it.
uint16_t FirstHandOut(uint16_t port) {
  if (port == 0) return 0;
  std::lock_guard lock(handed_out_mutex);
  return HandedOut().insert(port).second ? port : 0;
}

}  // namespace

Result<uint16_t> FreeLoopbackPort() {
  thread_local std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(kLowest, kHighest);
  for (int i = 0; i < kTries; ++i)
    if (const uint16_t port = FirstHandOut(BindAndRelease(static_cast<uint16_t>(pick(random))));
        port != 0)
      return port;
  int bind_errno = 0;  // the last failed bind's (a port handed out before is no bind failure)
  for (int i = 0; i < kTries; ++i) {
    errno = 0;
    const uint16_t bound = BindAndRelease(0);
    if (bound == 0) bind_errno = errno;
    if (const uint16_t port = FirstHandOut(bound); port != 0) return port;
  }
  if (bind_errno != 0) return ErrnoStatus(bind_errno, "binding 127.0.0.1:0 for a free port");
  return Unavailable("no free loopback port: every port 127.0.0.1:0 gave in " +
                     std::to_string(kTries) + " tries was handed out by this process before");
}

}  // namespace rt::net
