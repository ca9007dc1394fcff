// The wall clock, for times shown to people or compared between processes (reports, status,
// the replicated state). Deadlines use the monotonic clock (base/deadline.h), never this one.
#pragma once

#include <chrono>
#include <cstdint>

namespace rt {

// Milliseconds since the Unix epoch.
inline int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace rt
