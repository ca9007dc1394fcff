// net::FreeLoopbackPort: every port it hands out can be bound on 127.0.0.1 at once, lies in the
// range it promises, and no port comes twice in one process (a test that asks for several ports
// before it starts any server must never get one port for two servers).
#include "base/net/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

#include <gtest/gtest.h>

namespace rt::net {
namespace {

// Binds a TCP socket to 127.0.0.1:`port` and closes it; true when the bind succeeded.
bool CanBind(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return bound;
}

TEST(FreeLoopbackPort, HandsOutBindablePortsNeverTwice) {
  std::set<uint16_t> seen;
  for (int i = 0; i < 300; ++i) {
    Result<uint16_t> port = FreeLoopbackPort();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    EXPECT_TRUE(seen.insert(*port).second) << "port " << *port << " handed out twice";
    EXPECT_TRUE(CanBind(*port)) << "port " << *port;
    // The random range, or the kernel's pick when 64 random tries found nothing free.
    EXPECT_GT(*port, 1023) << *port;
  }
  EXPECT_EQ(seen.size(), 300u);
}

}  // namespace
}  // namespace rt::net
