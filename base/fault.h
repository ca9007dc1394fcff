// Named fault-injection points (after RocksDB's sync points and 3FS's FAULT_INJECTION_POINT).
//
// Code on a protocol or commit path marks a place with
//     RETURN_IF_ERROR(RT_FAULT_POINT("iofs.chunk.after_data_write"));
// In builds without RINGTRAIN_FAULT_INJECTION the macro is an OK Status and costs nothing.
// In test builds a point can be armed, in-process with fault::Arm() or for a whole process
// through the environment variable RINGTRAIN_FAULTS, read at the first hit:
//     RINGTRAIN_FAULTS="iofs.chunk.after_data_write=crash@3,comm.send=error"
// Actions: `error` (the point returns an injected error), `crash` (the process kills itself
// with SIGKILL, like kill -9), `delay:<ms>` (sleeps, then continues). `@N` fires on the N-th hit
// only (1-based); without it every hit fires. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace rt::fault {

// What an armed point does when hit.
enum class Action { kError, kCrash, kDelay };

// How an armed point behaves.
struct Spec {
  Action action = Action::kError;
  int64_t delay_ms = 0;  // for kDelay
  int64_t on_hit = 0;    // fire only on this hit (1-based); 0 = every hit
};

// True when this build compiles fault points in.
constexpr bool Enabled() {
#ifdef RINGTRAIN_FAULT_INJECTION
  return true;
#else
  return false;
#endif
}

// Arms `name` with `spec`, replacing an earlier arming and resetting its hit count.
void Arm(std::string_view name, Spec spec);
// Disarms `name` (no-op if unarmed).
void Disarm(std::string_view name);
// Disarms every point and forgets hit counts.
void DisarmAll();
// How often `name` has been hit since it was armed (0 if never armed).
int64_t HitCount(std::string_view name);
// Parses a RINGTRAIN_FAULTS-style list and arms each entry; errors name the bad entry.
Status ArmFromString(std::string_view list);

// Called by RT_FAULT_POINT; returns the injected error or OK.
Status Hit(std::string_view name);

}  // namespace rt::fault

#ifdef RINGTRAIN_FAULT_INJECTION
#define RT_FAULT_POINT(name) ::rt::fault::Hit(name)
#else
#define RT_FAULT_POINT(name) ::rt::Status()
#endif
