// The chaos campaign's network (docs/chaos.md "Partitions"): one network namespace per node,
// each joined to a bridge in the root namespace by a veth pair, an address per node from a
// private /24, so that a partition can cut the links between nodes (in each namespace a blackhole
// rule for packets from the other side: dropped silently) while ringchaos, in the root namespace,
// still reaches every daemon.
//
// Every name carries the campaign's pid ("rtc-PID-N" namespaces, "rtcbPID" bridge, "rtcPIDhN"
// veths), so two runs do not collide; RemoveLeftoverNetworks() removes those of a run whose pid
// is gone. Every `ip` command runs under a deadline and a failure names the command.
//
// Threading: one thread drives a NodeNetwork; Remove() may also run from the signal cleanup
// (bench/chaos/signals.h), which exits the process right after.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace rt::chaos {

// "" when this machine can make the network (root, `ip` found, `ip netns add` works); else one
// line saying why not.
std::string NetnsUnavailable();

// Removes namespaces, bridges and checkpoint tmpfs mounts (`.../ringchaos-PID/ckpt`) that an
// earlier campaign left behind when it was killed: those whose PID no longer runs. Failures are
// logged, not returned.
void RemoveLeftoverNetworks();

class NodeNetwork {
 public:
  // Makes the bridge and one namespace, veth pair and address per node 1..`nodes`, with names
  // carrying this process's pid. Errors: FailedPrecondition when NetnsUnavailable() says why,
  // Internal naming the `ip` command that failed (what was made so far is removed again).
  static Result<std::unique_ptr<NodeNetwork>> Create(int nodes);
  // Remove().
  ~NodeNetwork();
  NodeNetwork(const NodeNetwork&) = delete;
  NodeNetwork& operator=(const NodeNetwork&) = delete;

  // Kills every process left in the namespaces, deletes them (their veths go with them) and
  // the bridge. Idempotent; failures are logged. Thread-safe.
  void Remove();

  // Node `id`'s namespace name and IPv4 address ("10.77.X.id").
  std::string Namespace(int id) const;
  std::string Address(int id) const;
  // The command prefix that runs a program in node `id`'s namespace: {ip, netns, exec, NS}.
  std::vector<std::string> ExecPrefix(int id) const;

  // Cuts every link between a node of `a` and a node of `b`: in both namespaces a routing rule
  // (pref 500, before the local table, moved to pref 1000 by Create) blackholes the packets
  // that come from the other's address, so they are dropped silently in both directions and a
  // connect times out as in a real partition; the root namespace keeps reaching all. Errors:
  // Internal naming the failed command (the links cut so far stay cut until Heal).
  Status Split(const std::vector<int>& a, const std::vector<int>& b);
  // Removes every blackhole rule that Split added. Errors: Internal naming the failed command
  // (the others are still removed).
  Status Heal();

 private:
  NodeNetwork(int nodes, int subnet) : nodes_(nodes), subnet_(subnet) {}
  Status Build();

  int nodes_;
  int subnet_;                            // X of 10.77.X.0/24
  std::string tag_;                       // this process's pid
  std::vector<std::pair<int, int>> cut_;  // (namespace of node, from address of node) dropped
  std::mutex remove_mu_;
  bool removed_ = false;
};

}  // namespace rt::chaos
