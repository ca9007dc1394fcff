#include "daemon/cluster_state.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace rt::daemon {
namespace {

using Json = nlohmann::json;
constexpr std::string_view kFormat = "ringtrain.cluster_state";
constexpr int kVersion = 3;  // versions 1 (no stop_at, committed) and 2 (no joined_epoch) decode
constexpr size_t kMaxNodes = 4096;

Status Bad(std::string_view what) { return Corruption("cluster state: " + std::string(what)); }

Result<const Json*> Field(const Json& object, const char* key, std::string_view where) {
  auto it = object.find(key);
  if (it == object.end()) return Bad(std::string(where) + " has no '" + key + "'");
  return &*it;
}

Result<uint64_t> Unsigned(const Json& object, const char* key, std::string_view where,
                          uint64_t max) {
  ASSIGN_OR_RETURN(const Json* v, Field(object, key, where));
  if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
    return Bad(std::string(where) + "." + key + " is not a non-negative integer");
  const uint64_t value = v->get<uint64_t>();
  if (value > max) return Bad(std::string(where) + "." + key + " is out of range");
  return value;
}

Result<std::string> Text(const Json& object, const char* key, std::string_view where) {
  ASSIGN_OR_RETURN(const Json* v, Field(object, key, where));
  if (!v->is_string()) return Bad(std::string(where) + "." + key + " is not a string");
  return v->get<std::string>();
}

Result<NodeEntry> DecodeNode(const Json& j, uint64_t version) {
  if (!j.is_object()) return Bad("a nodes entry is not an object");
  NodeEntry n;
  ASSIGN_OR_RETURN(n.id, Unsigned(j, "id", "node", UINT64_MAX));
  if (n.id == 0) return Bad("node id 0");
  ASSIGN_OR_RETURN(const uint64_t slots, Unsigned(j, "slots", "node", 1024));
  n.slots = static_cast<int>(slots);
  ASSIGN_OR_RETURN(n.rendezvous, Text(j, "rendezvous", "node"));
  if (version >= 3) {
    ASSIGN_OR_RETURN(n.joined_epoch, Unsigned(j, "joined_epoch", "node", UINT64_MAX));
  }
  return n;
}

Result<JobEntry> DecodeJob(const Json& j) {
  if (!j.is_object()) return Bad("job is not an object");
  JobEntry job;
  ASSIGN_OR_RETURN(job.id, Unsigned(j, "id", "job", UINT64_MAX));
  ASSIGN_OR_RETURN(job.name, Text(j, "name", "job"));
  ASSIGN_OR_RETURN(job.text, Text(j, "text", "job"));
  ASSIGN_OR_RETURN(const std::string desire, Text(j, "desire", "job"));
  if (desire == "run") {
    job.desire = JobDesire::kRun;
  } else if (desire == "stop") {
    job.desire = JobDesire::kStop;
  } else if (desire == "finished") {
    job.desire = JobDesire::kFinished;
  } else {
    return Bad("job.desire '" + desire + "' is not run, stop or finished");
  }
  ASSIGN_OR_RETURN(const uint64_t step, Unsigned(j, "finished_step", "job", INT64_MAX));
  job.finished_step = static_cast<int64_t>(step);
  return job;
}

// A generation string "job.view.epoch" of at most 64 characters.
Result<std::string> Generation(const Json& object, std::string_view where) {
  ASSIGN_OR_RETURN(std::string g, Text(object, "generation", where));
  if (g.empty() || g.size() > 64)
    return Bad(std::string(where) + ".generation is not a generation");
  return g;
}

// `key` of the state: null, or an object that `decode` reads.
template <typename T, typename Decode>
Status Optional(const Json& j, const char* key, std::optional<T>* out, Decode decode) {
  ASSIGN_OR_RETURN(const Json* v, Field(j, key, "state"));
  if (v->is_null()) return Status();
  if (!v->is_object()) return Bad(std::string(key) + " is not an object or null");
  ASSIGN_OR_RETURN(T value, decode(*v));
  *out = std::move(value);
  return Status();
}

Result<StopAt> DecodeStopAt(const Json& j) {
  StopAt s;
  ASSIGN_OR_RETURN(s.generation, Generation(j, "stop_at"));
  ASSIGN_OR_RETURN(const uint64_t step, Unsigned(j, "step", "stop_at", INT64_MAX));
  if (step == 0) return Bad("stop_at.step is 0");
  s.step = static_cast<int64_t>(step);
  ASSIGN_OR_RETURN(s.why, Text(j, "why", "stop_at"));
  // Absent before the field existed (a state of version 3 all the same).
  if (const auto it = j.find("snapshot"); it != j.end()) {
    if (!it->is_boolean()) return Bad("stop_at.snapshot is not true or false");
    s.snapshot = it->get<bool>();
  }
  return s;
}

Result<Committed> DecodeCommitted(const Json& j) {
  Committed c;
  ASSIGN_OR_RETURN(c.generation, Generation(j, "committed"));
  ASSIGN_OR_RETURN(const uint64_t step, Unsigned(j, "step", "committed", INT64_MAX));
  if (step == 0) return Bad("committed.step is 0");
  c.step = static_cast<int64_t>(step);
  ASSIGN_OR_RETURN(c.uri, Text(j, "uri", "committed"));
  return c;
}

}  // namespace

std::string_view JobDesireName(JobDesire desire) {
  switch (desire) {
    case JobDesire::kRun:
      return "run";
    case JobDesire::kStop:
      return "stop";
    case JobDesire::kFinished:
      return "finished";
  }
  return "?";
}

const NodeEntry* ClusterState::FindNode(uint64_t node) const {
  for (const NodeEntry& n : nodes)
    if (n.id == node) return &n;
  return nullptr;
}

void ClusterState::PutNode(NodeEntry entry) {
  auto it = std::lower_bound(nodes.begin(), nodes.end(), entry.id,
                             [](const NodeEntry& n, uint64_t id) { return n.id < id; });
  if (it != nodes.end() && it->id == entry.id) {
    *it = std::move(entry);
  } else {
    nodes.insert(it, std::move(entry));
  }
}

bool ClusterState::Register(NodeEntry me, int64_t unix_ms) {
  const NodeEntry* r = FindNode(me.id);
  if (r != nullptr && r->SameRegistration(me)) return false;
  const std::string who = "node " + std::to_string(me.id);
  if (r != nullptr && Plannable(*r)) {
    me.joined_epoch = r->joined_epoch;
    ++epoch;
    cause = {who + " registered anew (restarted); every daemon plans again", unix_ms};
  } else {
    me.joined_epoch = epoch;
    cause = {who + " registered", unix_ms};
  }
  PutNode(std::move(me));
  return true;
}

std::string EncodeClusterState(const ClusterState& s) {
  Json j = {{"format", kFormat}, {"version", kVersion}};
  Json nodes = Json::array();
  for (const NodeEntry& n : s.nodes)
    nodes.push_back({{"id", n.id},
                     {"slots", n.slots},
                     {"rendezvous", n.rendezvous},
                     {"joined_epoch", n.joined_epoch}});
  j["nodes"] = std::move(nodes);
  if (s.job) {
    j["job"] = {{"id", s.job->id},
                {"name", s.job->name},
                {"text", s.job->text},
                {"desire", JobDesireName(s.job->desire)},
                {"finished_step", s.job->finished_step}};
  } else {
    j["job"] = nullptr;
  }
  j["epoch"] = s.epoch;
  j["max_nodes"] = s.max_nodes;
  j["drained"] = s.drained;
  j["cause"] = {{"what", s.cause.what}, {"at_unix_ms", s.cause.at_unix_ms}};
  j["stop_at"] = nullptr;
  if (s.stop_at)
    j["stop_at"] = {
        {"generation", s.stop_at->generation}, {"step", s.stop_at->step}, {"why", s.stop_at->why}};
  if (s.stop_at && s.stop_at->snapshot) j["stop_at"]["snapshot"] = true;
  j["committed"] = nullptr;
  if (s.committed)
    j["committed"] = {{"generation", s.committed->generation},
                      {"step", s.committed->step},
                      {"uri", s.committed->uri}};
  return j.dump();
}

Result<ClusterState> DecodeClusterState(std::string_view blob) {
  ClusterState s;
  if (blob.empty()) return s;
  if (blob.size() > kMaxClusterStateBytes)
    return Bad(std::to_string(blob.size()) + " bytes, more than the limit");
  const Json j = Json::parse(blob, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("not valid JSON");
  if (!j.is_object()) return Bad("not a JSON object");
  ASSIGN_OR_RETURN(const std::string format, Text(j, "format", "state"));
  if (format != kFormat) return Bad("format '" + format + "' is not " + std::string(kFormat));
  ASSIGN_OR_RETURN(const uint64_t version, Unsigned(j, "version", "state", UINT32_MAX));
  if (version < 1 || version > kVersion)
    return Bad("version " + std::to_string(version) + " is not 1, 2 or 3");
  ASSIGN_OR_RETURN(const Json* nodes, Field(j, "nodes", "state"));
  if (!nodes->is_array() || nodes->size() > kMaxNodes) return Bad("nodes is not a short array");
  for (const Json& n : *nodes) {
    ASSIGN_OR_RETURN(NodeEntry entry, DecodeNode(n, version));
    if (!s.nodes.empty() && s.nodes.back().id >= entry.id)
      return Bad("node ids are not sorted and unique");
    s.nodes.push_back(std::move(entry));
  }
  ASSIGN_OR_RETURN(const Json* job, Field(j, "job", "state"));
  if (!job->is_null()) {
    ASSIGN_OR_RETURN(JobEntry entry, DecodeJob(*job));
    s.job = std::move(entry);
  }
  ASSIGN_OR_RETURN(s.epoch, Unsigned(j, "epoch", "state", UINT64_MAX));
  ASSIGN_OR_RETURN(const uint64_t max_nodes, Unsigned(j, "max_nodes", "state", kMaxNodes));
  s.max_nodes = static_cast<int>(max_nodes);
  ASSIGN_OR_RETURN(const Json* drained, Field(j, "drained", "state"));
  if (!drained->is_array() || drained->size() > kMaxNodes)
    return Bad("drained is not a short array");
  for (const Json& d : *drained) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() == 0) return Bad("a drained id is not ≥ 1");
    const uint64_t id = d.get<uint64_t>();
    if (!s.drained.empty() && s.drained.back() >= id)
      return Bad("drained ids are not sorted and unique");
    s.drained.push_back(id);
  }
  ASSIGN_OR_RETURN(const Json* cause, Field(j, "cause", "state"));
  if (!cause->is_object()) return Bad("cause is not an object");
  ASSIGN_OR_RETURN(s.cause.what, Text(*cause, "what", "cause"));
  ASSIGN_OR_RETURN(const uint64_t at, Unsigned(*cause, "at_unix_ms", "cause", INT64_MAX));
  s.cause.at_unix_ms = static_cast<int64_t>(at);
  if (version == 1) return s;
  RETURN_IF_ERROR(Optional(j, "stop_at", &s.stop_at, DecodeStopAt));
  RETURN_IF_ERROR(Optional(j, "committed", &s.committed, DecodeCommitted));
  return s;
}

}  // namespace rt::daemon
