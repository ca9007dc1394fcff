// Deadlines on the monotonic clock. Every wait in ringtrain takes one (DESIGN.md: no hangs).
#pragma once

#include <chrono>
#include <cstdint>

namespace rt {

// The monotonic clock used for all deadlines and timeouts.
using MonoClock = std::chrono::steady_clock;
using MonoTime = MonoClock::time_point;

// A point on the monotonic clock by which an operation must finish. Value type, thread-safe to
// copy.
class Deadline {
 public:
  // A deadline `timeout` from now.
  static Deadline After(std::chrono::nanoseconds timeout) {
    return Deadline(MonoClock::now() + timeout);
  }
  // A deadline `ms` milliseconds from now.
  static Deadline AfterMs(int64_t ms) { return After(std::chrono::milliseconds(ms)); }
  // A deadline at an absolute monotonic time.
  static Deadline At(MonoTime when) { return Deadline(when); }

  MonoTime when() const { return when_; }
  bool Expired() const { return MonoClock::now() >= when_; }
  // Time left, never negative.
  std::chrono::nanoseconds Remaining() const {
    auto left = when_ - MonoClock::now();
    return left.count() > 0 ? std::chrono::duration_cast<std::chrono::nanoseconds>(left)
                            : std::chrono::nanoseconds(0);
  }
  int64_t RemainingMs() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Remaining()).count();
  }
  // The earlier of two deadlines.
  Deadline Min(Deadline other) const { return other.when_ < when_ ? other : *this; }

 private:
  explicit Deadline(MonoTime when) : when_(when) {}
  MonoTime when_;
};

// Seconds since an arbitrary fixed point on the monotonic clock, for timings and rates.
inline double MonoSeconds() {
  return std::chrono::duration<double>(MonoClock::now().time_since_epoch()).count();
}

}  // namespace rt
