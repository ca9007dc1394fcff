// The chaos campaign's summary: faults by kind, recovery times, steps lost and repeated,
// checkpoints verified, hangs, throughput, and what was not checked — as text and as JSON.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "bench/chaos/campaign.h"
#include "daemon/control_api.h"

namespace rt::chaos {

// The figures of a campaign.
struct Summary {
  std::map<std::string, int> injected;  // by fault name
  std::map<std::string, int> skipped;   // by fault name
  // Recovery median and max by fault name (faults with a timed recovery).
  std::map<std::string, std::pair<double, double>> recovery_by_kind;
  int recoveries = 0;  // faults with a timed recovery
  double recovery_median_s = 0, recovery_p95_s = 0, recovery_max_s = 0;
  double rejoin_median_s = 0, rejoin_max_s = 0;
  int hangs = 0;                     // no progress within the hang limit
  int restarts = 0;                  // faults after which training resumed from a checkpoint
  int unmatched = 0;                 // restarts whose recovery log line was not found
  int64_t committed_steps_lost = 0;  // Σ newest intact committed step − resumed step (≥ 0)
  int64_t steps_repeated = 0;        // Σ newest step seen − resumed step (≥ 0)
  int checkpoints_verified = 0;      // committed checkpoints that ringckpt verify passed
  int checkpoints_refused = 0;       // ... refused, each one the campaign corrupted
  int checkpoints_unchecked = 0;     // ... that ringckpt could not reach (a failed campaign)
  int flips_fell_back = 0;           // flips whose next resume went past the corrupted step
  int corrupt_accepted = 0;          // corrupted ones passed, or intact ones refused, or
                                     // resumes from a corrupted step, or flips not detected
  int minority_trained = 0;          // partitions: daemons cut off from a majority that
                                     // trained on (FaultRecord::minority_trained)
  double throughput_share = 0;       // fault-free time of the job's steps / chaos wall time
  double throughput_share_net = 0;   // ... / (wall time − Σ recovery time)
};

// Computes the summary (percentiles by the nearest-rank method).
Summary Summarize(const CampaignResult& r);

// One human-readable summary, with the per-fault table.
std::string SummaryText(const CampaignResult& r, const Summary& s);

// The summary and every fault record as JSON (for the test and for scripts).
daemon::Json SummaryJson(const CampaignResult& r, const Summary& s);

}  // namespace rt::chaos
