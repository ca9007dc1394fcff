#include "bench/chaos/faults.h"

#include <algorithm>

namespace rt::chaos {
namespace {

struct Named {
  FaultKind kind;
  std::string_view name;
};

constexpr Named kNames[] = {
    {FaultKind::kKillWorker, "kill-worker"},
    {FaultKind::kKillDaemon, "kill-daemon"},
    {FaultKind::kKillLeader, "kill-leader"},
    {FaultKind::kKillTwoDaemons, "kill-two-daemons"},
    {FaultKind::kStopDaemon, "stop-daemon"},
    {FaultKind::kStopWorker, "stop-worker"},
    {FaultKind::kKillDuringShardWrite, "kill-in-shard-write"},
    {FaultKind::kKillDuringManifest, "kill-in-manifest-write"},
    {FaultKind::kDiskFull, "disk-full"},
    {FaultKind::kFlipByte, "flip-byte"},
    {FaultKind::kPartitionHalves, "partition-halves"},
    {FaultKind::kPartitionOne, "partition-one"},
    {FaultKind::kPartitionFlap, "partition-flap"},
};

}  // namespace

const std::vector<FaultKind>& AllFaultKinds() {
  static const std::vector<FaultKind> all = [] {
    std::vector<FaultKind> v;
    for (const Named& n : kNames) v.push_back(n.kind);
    return v;
  }();
  return all;
}

std::string_view FaultName(FaultKind kind) {
  for (const Named& n : kNames)
    if (n.kind == kind) return n.name;
  return "unknown";
}

bool IsPartition(FaultKind kind) {
  return kind == FaultKind::kPartitionHalves || kind == FaultKind::kPartitionOne ||
         kind == FaultKind::kPartitionFlap;
}

Result<std::vector<FaultKind>> ParseFaultKinds(std::string_view list) {
  if (list == "all") return AllFaultKinds();
  std::vector<FaultKind> kinds;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    const auto it = std::find_if(std::begin(kNames), std::end(kNames),
                                 [&](const Named& n) { return n.name == name; });
    if (it == std::end(kNames))
      return InvalidArgument("--faults: unknown fault '" + std::string(name) +
                             "' (kill-worker, kill-daemon, kill-leader, kill-two-daemons, "
                             "stop-daemon, stop-worker, kill-in-shard-write, "
                             "kill-in-manifest-write, disk-full, flip-byte, partition-halves, "
                             "partition-one, partition-flap or all)");
    if (std::find(kinds.begin(), kinds.end(), it->kind) == kinds.end()) kinds.push_back(it->kind);
  }
  if (kinds.empty()) return InvalidArgument("--faults: the list is empty");
  return kinds;
}

FaultSchedule::FaultSchedule(uint64_t seed, std::vector<FaultKind> kinds)
    : rng_(seed), kinds_(std::move(kinds)) {}

FaultKind FaultSchedule::Next() {
  if (round_.empty()) {
    round_ = kinds_;
    std::shuffle(round_.begin(), round_.end(), rng_);
    std::reverse(round_.begin(), round_.end());  // popped from the back: the shuffle's order
  }
  const FaultKind kind = round_.back();
  round_.pop_back();
  return kind;
}

size_t FaultSchedule::Pick(size_t n) {
  return std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
}

int64_t FaultSchedule::Between(int64_t low, int64_t high) {
  return std::uniform_int_distribution<int64_t>(low, high)(rng_);
}

}  // namespace rt::chaos
