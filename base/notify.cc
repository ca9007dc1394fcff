#include "base/notify.h"

#include <cstdlib>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <systemd/sd-daemon.h>

#include "base/log.h"

namespace rt {
namespace asio = boost::asio;

std::shared_ptr<SystemdNotifier> SystemdNotifier::Create(asio::any_io_executor executor) {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  const bool enabled = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  // > 0: WATCHDOG_USEC is set and WATCHDOG_PID is unset or ours.
  if (sd_watchdog_enabled(0, &usec) <= 0) usec = 0;
  return std::shared_ptr<SystemdNotifier>(new SystemdNotifier(
      std::move(executor), enabled, std::chrono::microseconds(enabled ? usec : 0)));
}

SystemdNotifier::SystemdNotifier(asio::any_io_executor executor, bool enabled,
                                 std::chrono::microseconds watchdog_timeout)
    : executor_(std::move(executor)),
      enabled_(enabled),
      watchdog_timeout_(watchdog_timeout),
      timer_(executor_) {}

Status SystemdNotifier::Send(const std::string& message) {
  if (!enabled_) return Status();
  const int sent = sd_notify(0, message.c_str());
  if (sent < 0) {
    const char* socket = std::getenv("NOTIFY_SOCKET");
    return ErrnoStatus(-sent, "sd_notify to " + std::string(socket ? socket : "(unset)"));
  }
  return Status();
}

Status SystemdNotifier::Ready(std::string_view status) {
  return Send(status.empty() ? "READY=1" : "READY=1\nSTATUS=" + std::string(status));
}

Status SystemdNotifier::SetStatus(std::string_view status) {
  return Send("STATUS=" + std::string(status));
}

Status SystemdNotifier::Stopping(std::string_view status) {
  return Send(status.empty() ? "STOPPING=1" : "STOPPING=1\nSTATUS=" + std::string(status));
}

void SystemdNotifier::StartWatchdog() {
  if (watchdog_timeout_.count() == 0 || watchdog_on_.exchange(true)) return;
  asio::co_spawn(
      executor_, [self = shared_from_this()] { return self->WatchdogLoop(); }, asio::detached);
}

void SystemdNotifier::StopWatchdog() {
  {
    std::lock_guard lock(watchdog_mu_);  // waits for a keep-alive being sent now
    if (!watchdog_on_.exchange(false)) return;
  }
  asio::post(executor_, [self = shared_from_this()] { self->timer_.cancel(); });
}

asio::awaitable<void> SystemdNotifier::WatchdogLoop() {
  const auto period = watchdog_timeout_ / 2;
  for (;;) {
    {
      std::lock_guard lock(watchdog_mu_);
      if (!watchdog_on_) break;
      if (Status sent = Send("WATCHDOG=1"); !sent.ok())
        LOG_WARN("systemd watchdog keep-alive not sent: {}", sent.ToString());
      else
        ++pings_;
    }
    timer_.expires_after(period);
    co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

}  // namespace rt
