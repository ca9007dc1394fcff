// The daemon's metric catalogue (docs/metrics.md) and the /metrics endpoint.
//
// The daemon registers the catalogue once at start, keeps the returned NodeMetrics and updates
// its members where the events happen (a worker's report, a view change, a recovery, a save).
// Every pointer in NodeMetrics is owned by the registry and lives as long as it.
#pragma once

#include "base/metrics.h"
#include "base/net/http_server.h"

namespace rt::web {

// Recovery causes, the values of the `cause` label of ringtrain_recoveries_total.
inline constexpr char kCauseNodeLost[] = "node_lost";          // a member left the view unplanned
inline constexpr char kCauseWorkerExited[] = "worker_exited";  // a worker died on a live node
inline constexpr char kCausePlanned[] = "planned";             // scale, drain, join or stop

// Checkpoint tiers, the values of the `tier` label. (The `group` label of the comm metrics takes
// the names of parallel/rank_activity.h kProcessGroupNames.)
inline constexpr char kTierStore[] = "store";    // the chunk store (or a directory)
inline constexpr char kTierMemory[] = "memory";  // the daemons' memory tier

// Handles to every metric of the catalogue.
struct NodeMetrics {
  MetricFamily<Gauge>* build_info;                   // {version} = 1
  MetricFamily<Gauge>* job_step;                     // last completed step
  MetricFamily<Gauge>* job_loss;                     // training loss of that step
  MetricFamily<Gauge>* job_tokens_per_second;        // throughput of the job
  MetricFamily<Gauge>* membership_members;           // members in the current view
  MetricFamily<Gauge>* membership_generation;        // the view's generation
  MetricFamily<Gauge>* job_epoch;                    // restarts without a view change
  MetricFamily<Gauge>* workers_running;              // worker processes of this daemon
  MetricFamily<Counter>* worker_restarts;            // worker processes started again
  MetricFamily<Counter>* recoveries;                 // {cause}
  MetricFamily<Histogram>* recovery_seconds;         // failure detected → first step done
  MetricFamily<Counter>* recovery_steps_lost;        // steps trained again after recoveries
  MetricFamily<Histogram>* checkpoint_save_seconds;  // {tier}
  MetricFamily<Histogram>* checkpoint_load_seconds;  // {tier}
  MetricFamily<Counter>* checkpoint_saved_bytes;     // {tier}
  MetricFamily<Counter>* checkpoint_loaded_bytes;    // {tier}
  MetricFamily<Counter>* checkpoint_failed_saves;    // {tier}, counted by rank 0's daemon
  MetricFamily<Gauge>* checkpoint_last_step;         // newest committed checkpoint's step
  MetricFamily<Counter>* chunkstore_read_bytes;
  MetricFamily<Counter>* chunkstore_written_bytes;
  MetricFamily<Counter>* chunkstore_errors;  // {op}: read, write, sync
  MetricFamily<Gauge>* chunkstore_used_bytes;
  MetricFamily<Gauge>* chunkstore_chains_degraded;  // the metadata node's count; 0 elsewhere
  MetricFamily<Counter>* comm_sent_bytes;           // {group}: by this node's workers
  MetricFamily<Counter>* comm_received_bytes;       // {group}
};

// Registers the catalogue in `registry` (build_info set to 1 for this version). Errors:
// AlreadyExists when a catalogue name is registered already.
Result<NodeMetrics> RegisterNodeMetrics(MetricsRegistry& registry);

// Serves `registry`'s exposition on GET /metrics of `server` (call before server.Start()). The
// registry must outlive the server.
void ServeMetrics(net::HttpServer& server, const MetricsRegistry& registry);

}  // namespace rt::web
