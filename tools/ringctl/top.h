// `ringctl top`: the cluster's status (the control API's `status`) as a table that refreshes in
// the terminal — members, generation, layout, step, loss, tokens/s, last checkpoint.
#pragma once

#include <memory>
#include <string>

#include "base/net/auth.h"
#include "daemon/control_api.h"

namespace rt::ctl {

// What `ringctl top` needs.
struct TopOptions {
  std::string daemon;                                // host:port of any daemon
  std::shared_ptr<const net::ClusterSecret> secret;  // null = none
  int interval_ms = 1000;                            // refresh period
  int timeout_ms = 20'000;                           // deadline of one status call
  bool once = false;                                 // print one table and exit (scripts)
};

// The table for one `status` reply (no terminal control characters).
std::string RenderTop(const daemon::Json& status);

// Prints the table every interval until SIGINT/SIGTERM (or once). Returns the exit status: 0, or
// 1 when the status call failed (with --once; otherwise the error is shown and retried).
int RunTop(const TopOptions& options);

}  // namespace rt::ctl
