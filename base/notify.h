// systemd service notifications (sd_notify(3) through libsystemd): READY=1 once the service
// serves, STATUS= lines for `systemctl status`, STOPPING=1 on a stop, and the watchdog's
// WATCHDOG=1 keep-alives — sent from an Asio timer on the daemon's event loop at half of
// WATCHDOG_USEC, so a hung loop stops them and systemd restarts the service (WatchdogSec=).
//
// Without NOTIFY_SOCKET (not started by systemd with Type=notify) every call is a successful
// no-op. The environment is read once, at Create().
//
// Thread safety: Ready/SetStatus/Stopping and StopWatchdog may be called from any thread;
// StartWatchdog once, from any thread. The watchdog timer runs on the executor given to Create.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/status.h"

namespace rt {

// Talks to the service manager for one service process. Owned by shared_ptr (the watchdog
// coroutine holds it).
class SystemdNotifier : public std::enable_shared_from_this<SystemdNotifier> {
 public:
  // A notifier for this process, its watchdog timer on `executor`. Reads NOTIFY_SOCKET,
  // WATCHDOG_USEC and WATCHDOG_PID (the watchdog applies only when
  // WATCHDOG_PID is unset or this process's pid).
  static std::shared_ptr<SystemdNotifier> Create(boost::asio::any_io_executor executor);

  // True when NOTIFY_SOCKET names a socket to notify.
  bool enabled() const { return enabled_; }
  // The service's watchdog timeout (0 when there is none); keep-alives go out at half of it.
  std::chrono::microseconds watchdog_timeout() const { return watchdog_timeout_; }

  // "READY=1" with a STATUS= line (omitted when `status` is empty). Errors: IoError naming the
  // socket when sending fails.
  Status Ready(std::string_view status);
  // A STATUS= line ("generation 3, 4 members, step 1200").
  Status SetStatus(std::string_view status);
  // "STOPPING=1" with a STATUS= line (omitted when empty).
  Status Stopping(std::string_view status);

  // Starts sending WATCHDOG=1 now and then every watchdog_timeout()/2 from a timer on the
  // executor. No-op without a watchdog. A failed send is logged, and the keep-alives continue.
  void StartWatchdog();
  // Stops the keep-alives: none is sent after this returns (one being sent when it is called is
  // waited for), so a STOPPING=1 sent next comes after the last WATCHDOG=1. Idempotent.
  void StopWatchdog();

  // WATCHDOG=1 messages sent so far.
  int64_t watchdog_pings() const { return pings_.load(); }

 private:
  SystemdNotifier(boost::asio::any_io_executor executor, bool enabled,
                  std::chrono::microseconds watchdog_timeout);
  Status Send(const std::string& message);
  boost::asio::awaitable<void> WatchdogLoop();

  boost::asio::any_io_executor executor_;
  const bool enabled_;
  const std::chrono::microseconds watchdog_timeout_;
  boost::asio::steady_timer timer_;  // on the executor only
  std::mutex watchdog_mu_;           // held while a keep-alive is sent and while stopping them
  std::atomic<bool> watchdog_on_{false};
  std::atomic<int64_t> pings_{0};
};

}  // namespace rt
