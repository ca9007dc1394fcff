// A one-member etcd on loopback (Debian's etcd-server, /usr/bin/etcd) for local clusters that keep
// their membership in etcd: `ringtrain launch --etcd`, `ringchaos --etcd` and the tests. Not for
// production: a fleet runs its own etcd cluster and names it in node.toml ([cluster] etcd).
//
// Thread safety: one owner; the object is not shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace rt {
class SyncChild;
}

namespace rt::elastic {

class LocalEtcd {
 public:
  // The etcd binary (/usr/bin/etcd or /usr/local/bin/etcd), or "" when etcd is not installed.
  static std::string Binary();

  // Starts etcd with its data and log (etcd.log) under `dir` (created; emptied first), on two
  // free loopback ports, and waits until it answers a request. Errors: NotFound when etcd is not
  // installed ("apt-get install etcd-server"); the spawn's; DeadlineExceeded naming the log when
  // it does not answer within 30 s.
  static Result<std::unique_ptr<LocalEtcd>> Start(const std::string& dir);
  // Kills etcd (SIGKILL) and removes its folder.
  ~LocalEtcd();
  LocalEtcd(const LocalEtcd&) = delete;
  LocalEtcd& operator=(const LocalEtcd&) = delete;

  // "http://127.0.0.1:PORT", its client URL.
  std::string endpoint() const;
  // Sends `signal` to etcd (SIGSTOP and SIGCONT make an etcd that does not answer for a while).
  Status Signal(int signal);

 private:
  LocalEtcd(std::string dir, uint16_t port, std::unique_ptr<SyncChild> process);
  std::string dir_;
  uint16_t port_;
  std::unique_ptr<SyncChild> process_;
};

}  // namespace rt::elastic
