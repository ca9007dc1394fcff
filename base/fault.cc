#include "base/fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace rt::fault {
namespace {

struct Point {
  Spec spec;
  int64_t hits = 0;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Point, std::less<>> points;  // GUARDED_BY(mu)
  bool env_loaded = false;                           // GUARDED_BY(mu)
  // True once the environment was read and while no point is armed: Hit returns at once,
  // without the lock (points sit on hot paths such as every block of a collective).
  std::atomic<bool> idle{false};
};

// Updates Registry::idle after a change of the points. REQUIRES r.mu.
void UpdateIdleLocked(Registry& r) {
  r.idle.store(r.env_loaded && r.points.empty(), std::memory_order_release);
}

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: hit from any thread at exit
  return *registry;
}

Result<int64_t> ParseInt(std::string_view text, std::string_view entry) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0)
    return InvalidArgument("fault spec '" + std::string(entry) + "': '" + std::string(text) +
                           "' is not a non-negative integer");
  return value;
}

Result<Spec> ParseSpec(std::string_view text, std::string_view entry) {
  Spec spec;
  size_t at = text.find('@');
  if (at != std::string_view::npos) {
    ASSIGN_OR_RETURN(spec.on_hit, ParseInt(text.substr(at + 1), entry));
    text = text.substr(0, at);
  }
  if (text == "error") {
    spec.action = Action::kError;
  } else if (text == "crash") {
    spec.action = Action::kCrash;
  } else if (text.starts_with("delay:")) {
    spec.action = Action::kDelay;
    ASSIGN_OR_RETURN(spec.delay_ms, ParseInt(text.substr(6), entry));
  } else {
    return InvalidArgument("fault spec '" + std::string(entry) + "': unknown action '" +
                           std::string(text) + "' (expected error, crash or delay:<ms>)");
  }
  return spec;
}

Status ArmLocked(Registry& r, std::string_view list) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (entry.empty()) continue;
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return InvalidArgument("fault spec '" + std::string(entry) + "': expected name=action");
    ASSIGN_OR_RETURN(Spec spec, ParseSpec(entry.substr(eq + 1), entry));
    r.points[std::string(entry.substr(0, eq))] = Point{spec, 0};
  }
  return Status();
}

void LoadEnvLocked(Registry& r) {
  if (r.env_loaded) return;
  r.env_loaded = true;
  if (const char* env = std::getenv("RINGTRAIN_FAULTS"); env != nullptr) {
    Status s = ArmLocked(r, env);
    if (!s.ok()) internal::AbortWithMessage("RINGTRAIN_FAULTS: " + s.ToString());
  }
  UpdateIdleLocked(r);
}

}  // namespace

void Arm(std::string_view name, Spec spec) {
  Registry& r = GetRegistry();
  std::lock_guard lock(r.mu);
  LoadEnvLocked(r);
  r.points[std::string(name)] = Point{spec, 0};
  UpdateIdleLocked(r);
}

void Disarm(std::string_view name) {
  Registry& r = GetRegistry();
  std::lock_guard lock(r.mu);
  LoadEnvLocked(r);
  auto it = r.points.find(name);
  if (it != r.points.end()) r.points.erase(it);
  UpdateIdleLocked(r);
}

void DisarmAll() {
  Registry& r = GetRegistry();
  std::lock_guard lock(r.mu);
  r.env_loaded = true;
  r.points.clear();
  UpdateIdleLocked(r);
}

int64_t HitCount(std::string_view name) {
  Registry& r = GetRegistry();
  std::lock_guard lock(r.mu);
  auto it = r.points.find(name);
  return it == r.points.end() ? 0 : it->second.hits;
}

Status ArmFromString(std::string_view list) {
  Registry& r = GetRegistry();
  std::lock_guard lock(r.mu);
  LoadEnvLocked(r);
  Status s = ArmLocked(r, list);
  UpdateIdleLocked(r);
  return s;
}

Status Hit(std::string_view name) {
  Registry& r = GetRegistry();
  if (r.idle.load(std::memory_order_acquire)) return Status();
  Spec spec;
  {
    std::lock_guard lock(r.mu);
    LoadEnvLocked(r);
    auto it = r.points.find(name);
    if (it == r.points.end()) return Status();
    int64_t hit = ++it->second.hits;
    spec = it->second.spec;
    if (spec.on_hit != 0 && hit != spec.on_hit) return Status();
  }
  switch (spec.action) {
    case Action::kCrash:
      ::kill(::getpid(), SIGKILL);
      ::_exit(137);  // not reached
    case Action::kDelay:
      std::this_thread::sleep_for(std::chrono::milliseconds(spec.delay_ms));
      return Status();
    case Action::kError:
      break;
  }
  return Status(StatusCode::kIoError, "injected fault at '" + std::string(name) + "'");
}

}  // namespace rt::fault
