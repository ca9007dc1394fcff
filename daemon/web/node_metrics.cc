#include "daemon/web/node_metrics.h"

#include "base/version.h"

namespace rt::web {
namespace {
// Durations from 10 ms to ~5.5 min, doubling.
std::vector<double> SecondsBuckets() { return ExponentialBuckets(0.01, 2, 16); }
}  // namespace

Result<NodeMetrics> RegisterNodeMetrics(MetricsRegistry& r) {
  NodeMetrics m;
  ASSIGN_OR_RETURN(
      m.build_info,
      r.AddGauge("ringtrain_build_info", "Always 1; the version of this ringtraind.", {"version"}));
  m.build_info->With({kRingtrainVersion}).Set(1);
  ASSIGN_OR_RETURN(m.job_step,
                   r.AddGauge("ringtrain_job_step", "Last training step the job completed."));
  ASSIGN_OR_RETURN(
      m.job_loss,
      r.AddGauge("ringtrain_job_loss", "Training loss (mean cross-entropy, nats) of that step."));
  ASSIGN_OR_RETURN(
      m.job_tokens_per_second,
      r.AddGauge("ringtrain_job_tokens_per_second", "Tokens the whole job trains on per second."));
  ASSIGN_OR_RETURN(m.membership_members,
                   r.AddGauge("ringtrain_membership_members", "Members in the current view."));
  ASSIGN_OR_RETURN(m.membership_generation, r.AddGauge("ringtrain_membership_generation",
                                                       "Generation of the current view."));
  ASSIGN_OR_RETURN(m.job_epoch, r.AddGauge("ringtrain_job_epoch",
                                           "Worker restarts of the job without a view change."));
  ASSIGN_OR_RETURN(m.workers_running, r.AddGauge("ringtrain_workers_running",
                                                 "Worker processes this daemon runs now."));
  ASSIGN_OR_RETURN(m.worker_restarts,
                   r.AddCounter("ringtrain_worker_restarts_total",
                                "Worker processes this daemon started again after one ended."));
  ASSIGN_OR_RETURN(m.recoveries, r.AddCounter("ringtrain_recoveries_total",
                                              "Recoveries of the job, by cause.", {"cause"}));
  ASSIGN_OR_RETURN(m.recovery_seconds,
                   r.AddHistogram("ringtrain_recovery_duration_seconds",
                                  "From detecting a failure to the first step completed after it.",
                                  SecondsBuckets()));
  ASSIGN_OR_RETURN(m.recovery_steps_lost,
                   r.AddCounter("ringtrain_recovery_lost_steps_total",
                                "Steps trained again because a recovery went back to them."));
  ASSIGN_OR_RETURN(m.checkpoint_save_seconds,
                   r.AddHistogram("ringtrain_checkpoint_save_duration_seconds",
                                  "From snapshot to commit of a checkpoint, by tier.",
                                  SecondsBuckets(), {"tier"}));
  ASSIGN_OR_RETURN(m.checkpoint_load_seconds,
                   r.AddHistogram("ringtrain_checkpoint_load_duration_seconds",
                                  "Loading (and re-sharding) a checkpoint, by tier.",
                                  SecondsBuckets(), {"tier"}));
  ASSIGN_OR_RETURN(
      m.checkpoint_saved_bytes,
      r.AddCounter("ringtrain_checkpoint_saved_bytes_total",
                   "Checkpoint bytes written by this node's workers, by tier.", {"tier"}));
  ASSIGN_OR_RETURN(
      m.checkpoint_loaded_bytes,
      r.AddCounter("ringtrain_checkpoint_loaded_bytes_total",
                   "Checkpoint bytes read by this node's workers, by tier.", {"tier"}));
  ASSIGN_OR_RETURN(
      m.checkpoint_failed_saves,
      r.AddCounter("ringtrain_checkpoint_failed_saves_total",
                   "Checkpoint saves dropped because a rank failed, by tier.", {"tier"}));
  ASSIGN_OR_RETURN(m.checkpoint_last_step, r.AddGauge("ringtrain_checkpoint_last_step",
                                                      "Step of the newest committed checkpoint."));
  ASSIGN_OR_RETURN(m.chunkstore_read_bytes,
                   r.AddCounter("ringtrain_chunkstore_read_bytes_total",
                                "Bytes the embedded chunk server read for clients."));
  ASSIGN_OR_RETURN(m.chunkstore_written_bytes,
                   r.AddCounter("ringtrain_chunkstore_written_bytes_total",
                                "Bytes the embedded chunk server wrote (replication included)."));
  ASSIGN_OR_RETURN(m.chunkstore_errors,
                   r.AddCounter("ringtrain_chunkstore_errors_total",
                                "Failed chunk-store operations, by operation.", {"op"}));
  ASSIGN_OR_RETURN(m.chunkstore_used_bytes,
                   r.AddGauge("ringtrain_chunkstore_used_bytes",
                              "Bytes of chunk data the embedded chunk server holds."));
  ASSIGN_OR_RETURN(m.chunkstore_chains_degraded,
                   r.AddGauge("ringtrain_chunkstore_chains_degraded",
                              "Replication chains with a replica down or syncing (reported by "
                              "the store's metadata node; 0 on the others)."));
  ASSIGN_OR_RETURN(
      m.comm_sent_bytes,
      r.AddCounter("ringtrain_comm_sent_bytes_total",
                   "Bytes this node's workers sent in collectives, by process group.", {"group"}));
  ASSIGN_OR_RETURN(
      m.comm_received_bytes,
      r.AddCounter("ringtrain_comm_received_bytes_total",
                   "Bytes this node's workers received in collectives, by process group.",
                   {"group"}));
  return m;
}

void ServeMetrics(net::HttpServer& server, const MetricsRegistry& registry) {
  server.Route("GET", "/metrics",
               [&registry](net::HttpRequest) -> boost::asio::awaitable<net::HttpResponse> {
                 co_return net::HttpResponse::Of(200, kPrometheusContentType,
                                                 registry.Exposition());
               });
}

}  // namespace rt::web
