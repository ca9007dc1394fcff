// `ringtraind`: the node daemon (docs/daemon.md). It joins the ring (elastic/membership.h),
// serves the control API (daemon/control_api.h) and a rendezvous store, and runs one worker
// process per slot that the job's plan gives its node, restarting them as a new training
// generation whenever the view or the replicated epoch changes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/deadline.h"
#include "base/status.h"
#include "daemon/node_config.h"
#include "elastic/membership.h"

namespace rt::daemon {

// What Daemon::Start needs besides node.toml.
struct DaemonOptions {
  NodeConfig config;
  // The ringtraind executable: workers are started as `executable worker ...`.
  std::string executable;
  // Membership failure detection and agreement timing.
  elastic::MembershipTiming timing;
};

// A running daemon. Thread-safe.
class Daemon {
 public:
  // Loads the secret, binds the control port and the rendezvous store, starts the membership
  // service (joining or bootstrapping) and the controller. Returns at once. Errors: those of
  // the secret file, of binding (naming the address), of the membership service.
  static Result<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  virtual ~Daemon() = default;

  // The bound control port.
  virtual uint16_t port() const = 0;

  // Stops: with `leave`, first leaves the view (the others re-plan at once, no suspicion
  // delay); then stops this node's workers (SIGTERM, SIGKILL after the grace), the membership
  // service, the RPC server and the store. Idempotent; blocks; not from the daemon's threads.
  // Errors: the first failure of those steps (every step is still taken).
  virtual Status Stop(bool leave, Deadline deadline) = 0;
};

}  // namespace rt::daemon
