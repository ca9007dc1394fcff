// The faults of the chaos campaign (docs/chaos.md) and the seeded schedule that picks them.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rt::chaos {

// One kind of fault the campaign injects.
enum class FaultKind {
  kKillWorker,            // kill -9 of one worker process
  kKillDaemon,            // kill -9 of one daemon (its workers die with it); restarted later
  kKillLeader,            // kill -9 of the daemon that led the newest view change (status
                          // `led_view`); restarted later
  kKillTwoDaemons,        // kill -9 of two daemons at once; both restarted later
  kStopDaemon,            // SIGSTOP of a daemon for a while (a hang), then SIGCONT
  kStopWorker,            // SIGSTOP of a worker for a while, then SIGCONT
  kKillDuringShardWrite,  // kill -9 of a worker between its shard data file and its fragment
  kKillDuringManifest,    // kill -9 of rank 0 after every fragment, before the MANIFEST
  kDiskFull,              // the checkpoint file system (a small tmpfs) filled for a while
  kFlipByte,              // one byte flipped in a committed shard, then kill -9 of a worker
  // Network partitions (daemons in network namespaces, bench/chaos/netns.h), held for a while
  // and then healed:
  kPartitionHalves,  // the nodes split in two halves (2|2 of 4, 2|3 of 5)
  kPartitionOne,     // one node cut off from the others (3|1 of 4)
  kPartitionFlap,    // a split (halves or one) made and healed a few times within seconds
};

// True for the three partition kinds.
bool IsPartition(FaultKind kind);

// Every kind, in declaration order.
const std::vector<FaultKind>& AllFaultKinds();
// The kind's name on the command line and in the summary ("kill-worker", ...).
std::string_view FaultName(FaultKind kind);
// Parses a comma-separated list of names ("all" = every kind). Errors: InvalidArgument naming
// the unknown name.
Result<std::vector<FaultKind>> ParseFaultKinds(std::string_view list);

// The seeded order of faults and the random choices made while injecting them. The order goes
// in rounds: each round is a shuffle of every enabled kind, so a run of K·n faults injects each
// of the n kinds K times. The same seed gives the same sequence of choices.
class FaultSchedule {
 public:
  // `kinds` must not be empty.
  FaultSchedule(uint64_t seed, std::vector<FaultKind> kinds);
  // The next fault to inject.
  FaultKind Next();
  // A uniform integer in [0, n) for choosing a victim (n > 0).
  size_t Pick(size_t n);
  // A uniform integer in [low, high] (milliseconds of a pause or a hang).
  int64_t Between(int64_t low, int64_t high);

 private:
  std::mt19937_64 rng_;
  std::vector<FaultKind> kinds_;
  std::vector<FaultKind> round_;
};

}  // namespace rt::chaos
