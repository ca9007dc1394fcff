// The cluster state the daemons replicate through the membership service (docs/daemon.md,
// "Replicated cluster state"; format: docs/formats/cluster_state.md): the registered nodes, the
// job, the epoch and ringctl's overrides, as a JSON blob that the membership service versions
// and changes only by compare-and-set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace rt::daemon {

// A daemon as it registered itself: what the planner and the workers need to know of it.
struct NodeEntry {
  uint64_t id = 0;
  int slots = 0;           // worker slots
  std::string rendezvous;  // "host:port" of its rendezvous store (used when it runs rank 0)
  // The state's epoch when it registered: plans of that epoch leave it out (ClusterState::
  // Plannable), it joins at the next one.
  uint64_t joined_epoch = 0;
  bool operator==(const NodeEntry&) const = default;
  // Same slots and rendezvous address (whenever it registered).
  bool SameRegistration(const NodeEntry& o) const {
    return id == o.id && slots == o.slots && rendezvous == o.rendezvous;
  }
};

// What the cluster should do with the job.
enum class JobDesire { kRun, kStop, kFinished };

// The submitted job.
struct JobEntry {
  uint64_t id = 0;   // grows with every submit; scopes worker rendezvous keys
  std::string name;  // [job] name
  std::string text;  // the job file's TOML text (parsed by every daemon alike)
  JobDesire desire = JobDesire::kRun;
  int64_t finished_step = 0;  // kFinished: the last step
  bool operator==(const JobEntry&) const = default;
};

// Why the newest generation was started (for the recovery log line).
struct ChangeCause {
  std::string what;        // "worker rank 3 on node 2 exited: signal 9 (Killed)"
  int64_t at_unix_ms = 0;  // when the daemon that saw it noticed
  bool operator==(const ChangeCause&) const = default;
};

// A planned stop (docs/daemon.md "Planned changes lose nothing"): every rank of `generation`
// stops after step `step` (or the first step after it at which the ranks all know it), saves a
// checkpoint synchronously (or, with `snapshot`, makes sure of the memory snapshot of the step)
// and exits; then the daemon that asked applies its change.
struct StopAt {
  std::string generation;  // the training generation "job.view.epoch" it applies to
  int64_t step = 0;        // ≥ 1: a step no rank had finished when it was proposed
  std::string why;         // "ringctl scale --nodes 2"
  // The memory snapshot of the step is enough: every member stays, so the snapshots stay (a
  // node joining). The ranks save a checkpoint only when the snapshot fails.
  bool snapshot = false;
  bool operator==(const StopAt&) const = default;
};

// The newest checkpoint committed by a planned stop, as rank 0's daemon recorded it.
struct Committed {
  std::string generation;  // the training generation that saved it
  int64_t step = 0;        // its step (≥ 1)
  std::string uri;         // the job's ckpt.dir
  bool operator==(const Committed&) const = default;
};

// The replicated state. A default-constructed one is the state before anything happened.
struct ClusterState {
  std::vector<NodeEntry> nodes;  // sorted by id, unique
  std::optional<JobEntry> job;
  // Bumped for every restart of the job's workers that is not a view change (a worker died,
  // scale, drain, a resubmit); with the view generation it names a training generation.
  uint64_t epoch = 0;
  int max_nodes = 0;              // ringctl scale --nodes N; 0 = the job's own elastic.max_nodes
  std::vector<uint64_t> drained;  // ringctl drain NODE: sorted, unique
  ChangeCause cause;
  std::optional<StopAt> stop_at;       // the pending planned stop, if any (version 2)
  std::optional<Committed> committed;  // the newest planned-stop checkpoint (version 2)
  bool operator==(const ClusterState&) const = default;

  // The registered entry of `node`, or null.
  const NodeEntry* FindNode(uint64_t node) const;
  // Whether the plans of this epoch may use `node`: it registered before the epoch began. Every
  // daemon plans a training generation alike this way, whether or not the state it reads already
  // holds a registration made during the generation's epoch.
  bool Plannable(const NodeEntry& node) const { return node.joined_epoch < epoch; }
  // Adds or replaces `entry`, keeping `nodes` sorted.
  void PutNode(NodeEntry entry);
  // Records daemon `me`'s registration (slots, rendezvous address) at `unix_ms`; false when
  // it is registered so already. A new daemon, or one registered during this epoch, waits for
  // the next epoch (joined_epoch = epoch). A daemon that plans of this epoch already use and
  // that registers anew (it restarted: a new rendezvous address) starts a new epoch instead,
  // keeping its place: plans made from its old entry name an address that is gone, and every
  // daemon must plan the same generation from the same entries.
  bool Register(NodeEntry me, int64_t unix_ms);
};

// Largest encoded state accepted by DecodeClusterState.
inline constexpr size_t kMaxClusterStateBytes = 1 << 20;

// Encodes `state` as the JSON of docs/formats/cluster_state.md (version 3).
std::string EncodeClusterState(const ClusterState& state);

// Decodes a blob of version 1 (no stop_at, committed), 2 (no joined_epoch) or 3; "" is the
// empty state (nothing replicated yet). Errors: Corruption naming what is wrong (not JSON,
// wrong format name or version, a missing or mistyped field, a value out of range, unsorted or
// duplicate node ids, more than kMaxClusterStateBytes).
Result<ClusterState> DecodeClusterState(std::string_view blob);

// "run", "stop" or "finished".
std::string_view JobDesireName(JobDesire desire);

}  // namespace rt::daemon
