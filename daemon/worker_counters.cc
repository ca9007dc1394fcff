#include "daemon/worker_counters.h"

#include <algorithm>
#include <utility>

#include "daemon/web/node_metrics.h"

namespace rt::daemon {
namespace {

Json TransfersJson(const std::vector<parallel::CheckpointTransfer>& transfers) {
  Json out = Json::array();
  for (const parallel::CheckpointTransfer& t : transfers) {
    Json j = {{"tier", t.memory ? web::kTierMemory : web::kTierStore},
              {"step", t.step},
              {"bytes", t.bytes}};
    if (t.seconds >= 0) j["seconds"] = t.seconds;
    out.push_back(std::move(j));
  }
  return out;
}

Result<std::vector<parallel::CheckpointTransfer>> ParseTransfers(const Json& report,
                                                                 const char* key) {
  std::vector<parallel::CheckpointTransfer> out;
  auto it = report.find(key);
  if (it == report.end()) return out;
  const std::string what = std::string("report '") + key + "'";
  if (!it->is_array()) return InvalidArgument(what + " is not an array");
  for (const Json& j : *it) {
    if (!j.is_object()) return InvalidArgument(what + ": an entry is not an object");
    parallel::CheckpointTransfer t;
    ASSIGN_OR_RETURN(const std::string tier, StringField(j, "tier", what));
    if (tier != web::kTierStore && tier != web::kTierMemory)
      return InvalidArgument(what + ": 'tier' = '" + tier + "' is neither '" + web::kTierStore +
                             "' nor '" + web::kTierMemory + "'");
    t.memory = tier == web::kTierMemory;
    ASSIGN_OR_RETURN(t.step, IntField(j, "step", 0, INT64_MAX, what));
    ASSIGN_OR_RETURN(const int64_t bytes, IntField(j, "bytes", 0, INT64_MAX, what, 0));
    t.bytes = static_cast<uint64_t>(bytes);
    t.seconds = -1;
    if (auto s = j.find("seconds"); s != j.end()) {
      if (!s->is_number() || s->get<double>() < 0)
        return InvalidArgument(what + ": 'seconds' is not a number ≥ 0");
      t.seconds = s->get<double>();
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace

void AddCounters(const WorkerCounters& c, Json* report) {
  if (!c.saves.empty()) (*report)["saves"] = TransfersJson(c.saves);
  if (!c.loads.empty()) (*report)["loads"] = TransfersJson(c.loads);
  if (!c.failed.empty()) (*report)["failed_saves"] = TransfersJson(c.failed);
  if (c.comm.empty()) return;
  Json comm = Json::object();
  for (const parallel::GroupBytes& g : c.comm)
    comm[g.group] = {{"sent", g.sent}, {"received", g.received}};
  (*report)["comm"] = std::move(comm);
}

Result<WorkerCounters> ParseCounters(const Json& report) {
  WorkerCounters c;
  ASSIGN_OR_RETURN(c.saves, ParseTransfers(report, "saves"));
  ASSIGN_OR_RETURN(c.loads, ParseTransfers(report, "loads"));
  ASSIGN_OR_RETURN(c.failed, ParseTransfers(report, "failed_saves"));
  auto it = report.find("comm");
  if (it == report.end()) return c;
  if (!it->is_object()) return InvalidArgument("report 'comm' is not an object");
  for (const auto& [group, bytes] : it->items()) {
    const std::string what = "report 'comm' group '" + group + "'";
    if (std::find(parallel::kProcessGroupNames.begin(), parallel::kProcessGroupNames.end(),
                  group) == parallel::kProcessGroupNames.end())
      return InvalidArgument("report 'comm': '" + group.substr(0, 64) +
                             "' is not a process group (world, tp, dp_shard, ...)");
    if (!bytes.is_object()) return InvalidArgument(what + " is not an object");
    ASSIGN_OR_RETURN(const int64_t sent, IntField(bytes, "sent", 0, INT64_MAX, what, 0));
    ASSIGN_OR_RETURN(const int64_t received, IntField(bytes, "received", 0, INT64_MAX, what, 0));
    c.comm.push_back({group, static_cast<uint64_t>(sent), static_cast<uint64_t>(received)});
  }
  return c;
}

void CounterDeltas::Add(const parallel::RankActivity& a) {
  auto append = [this](std::vector<parallel::CheckpointTransfer>& to,
                       const std::vector<parallel::CheckpointTransfer>& from) {
    for (parallel::CheckpointTransfer t : from) {
      if (!lead_) t.seconds = -1;
      to.push_back(t);
    }
  };
  append(pending_.saves, a.checkpoints.saves);
  append(pending_.loads, a.checkpoints.loads);
  if (lead_) append(pending_.failed, a.checkpoints.failed);
  for (const parallel::GroupBytes& total : a.comm) {
    parallel::GroupBytes& seen = seen_[total.group];
    // Totals only grow within a process; a smaller one would be a new communicator's.
    const uint64_t sent = total.sent >= seen.sent ? total.sent - seen.sent : total.sent;
    const uint64_t received =
        total.received >= seen.received ? total.received - seen.received : total.received;
    seen = total;
    if (sent == 0 && received == 0) continue;
    auto it = std::find_if(pending_.comm.begin(), pending_.comm.end(),
                           [&](const parallel::GroupBytes& g) { return g.group == total.group; });
    if (it == pending_.comm.end()) it = pending_.comm.insert(pending_.comm.end(), {total.group});
    it->sent += sent;
    it->received += received;
  }
}

WorkerCounters CounterDeltas::Take() { return std::exchange(pending_, {}); }

}  // namespace rt::daemon
