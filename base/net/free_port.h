// A loopback TCP port that is free now, for whoever starts servers on ports it must know before
// they start (local clusters, an etcd for them, tests). Another process may take it before it is
// bound again: use it at once.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace rt::net {

// A random port of 20000-32767 that 127.0.0.1 can bind now (below Linux's ephemeral range, so
// no outgoing connection is given it meanwhile), released again; the kernel's pick for port 0
// when 64 tries find none. Never the same port twice in one process. Errors: IoError with the errno
// of the socket, bind or getsockname call; Unavailable when every port the kernel gave was
// handed out before.
Result<uint16_t> FreeLoopbackPort();

}  // namespace rt::net
