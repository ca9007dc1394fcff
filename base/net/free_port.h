// A loopback TCP port that is free now, for whoever starts servers on ports it must know before
// they start (local clusters, an etcd for them, tests). Another process may take it before it is
// bound again: use it at once.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace rt::net {

// The kernel's pick for 127.0.0.1:0, released again. Errors: IoError with the errno of the
// socket, bind or getsockname call.
Result<uint16_t> FreeLoopbackPort();

}  // namespace rt::net
