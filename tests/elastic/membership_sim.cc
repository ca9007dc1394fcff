#include "tests/elastic/membership_sim.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace rt::elastic::membership::sim {
namespace {

constexpr size_t kWheel = 64;               // ticks of delay the wheel holds
constexpr uint64_t kSendTimeoutTicks = 20;  // MembershipTiming::send_timeout / tick

std::string Describe(const View& v) {
  std::string s = "g" + std::to_string(v.generation) + "{";
  for (const Member& m : v.members) s += std::to_string(m.id) + ",";
  return s + "}";
}

}  // namespace

Simulator::Simulator(uint64_t seed, int nodes, std::set<NodeId> start)
    : random_(seed), wheel_(kWheel), trace_(std::getenv("MEMBERSHIP_SIM_TRACE") != nullptr) {
  for (int i = 1; i <= nodes; ++i) {
    ids_.push_back(static_cast<NodeId>(i));
    nodes_[static_cast<NodeId>(i)];
  }
  for (NodeId id : start) Restart(id);
}

bool Simulator::Connected(NodeId a, NodeId b) const {
  if (groups_.empty()) return true;
  for (const auto& group : groups_) {
    if (group.count(a)) return group.count(b) > 0;
  }
  return false;
}

void Simulator::Crash(NodeId node) { nodes_.at(node).machine.reset(); }

void Simulator::Wipe(NodeId node) {
  Crash(node);
  nodes_.at(node).disk.reset();
}

bool Simulator::Votes(NodeId node, const View& view) const {
  if (!running(node)) return false;
  const uint64_t incarnation = machine(node).durable().incarnation;
  return std::any_of(view.members.begin(), view.members.end(),
                     [&](const Member& m) { return m.id == node && m.incarnation == incarnation; });
}

void Simulator::Restart(NodeId node) {
  Node& n = nodes_.at(node);
  if (n.machine) return;
  MachineOptions options;
  options.self = node;
  options.address = "n" + std::to_string(node);
  options.bootstrap = node == 1 && n.starts == 0;  // the first start of the first seed only
  options.random_seed = random_() ^ (node << 20) ^ ++n.starts;
  options.incarnation = random_() | 1;
  n.machine.emplace(options, n.disk);
  n.known_slot = 0;
  Flush(node);
}

void Simulator::ProposeState(NodeId node, uint64_t expected, std::string blob) {
  Node& n = nodes_.at(node);
  StateCall call{node, n.next_request++, expected, std::move(blob), std::nullopt};
  calls_.push_back(call);
  n.machine->RequestState(call.request, expected, call.blob);
  Flush(node);
}

void Simulator::Leave(NodeId node) {
  nodes_.at(node).machine->RequestLeave();
  Flush(node);
}

void Simulator::Schedule(uint64_t delay, InFlight item) {
  delay = std::clamp<uint64_t>(delay, 1, kWheel - 1);
  wheel_[(now_ + delay) % kWheel].push_back(std::move(item));
}

void Simulator::Route(const Message& message) {
  if (message.to == 0) {
    for (NodeId seed : ids_) {
      if (seed == message.from) continue;
      Message copy = message;
      copy.to = seed;
      Route(copy);
    }
    return;
  }
  std::uniform_real_distribution<double> chance(0, 1);
  if (!running(message.to)) {
    Schedule(1 + random_() % 2, InFlight{message, true});  // connection refused
    return;
  }
  if (!Connected(message.from, message.to)) {
    if (chance(random_) < 0.2) Schedule(kSendTimeoutTicks, InFlight{message, true});
    return;
  }
  if (chance(random_) < loss) return;
  const int copies = chance(random_) < duplicate ? 2 : 1;
  for (int i = 0; i < copies; ++i) Schedule(random_() % (max_delay + 1), InFlight{message});
}

void Simulator::Flush(NodeId node) {
  Node& n = nodes_.at(node);
  MembershipMachine& m = *n.machine;
  if (m.TakeDirty()) {
    n.disk = m.durable();
    if (n.disk->accepted) {
      auto& list = accepted_[n.disk->accepted->slot];
      auto it = std::find_if(list.begin(), list.end(),
                             [&](const auto& p) { return p.first == *n.disk->accepted; });
      if (it == list.end()) {
        list.emplace_back(*n.disk->accepted, std::set<NodeId>{node});
      } else {
        it->second.insert(node);
      }
    }
  }
  if (m.durable().decided.slot != n.known_slot) {
    if (m.durable().decided.slot < n.known_slot)
      Violation("node " + std::to_string(node) + " went back from slot " +
                std::to_string(n.known_slot));
    n.known_slot = m.durable().decided.slot;
    CheckEntry(node, m.durable().decided);
  }
  for (StateResult& r : m.TakeStateResults()) {
    for (StateCall& call : calls_) {
      if (call.node == node && call.request == r.request && !call.result) call.result = r;
    }
  }
  m.TakeNotifications();
  for (const Message& message : m.TakeMessages()) Route(message);
}

void Simulator::Step() {
  ++now_;
  std::vector<InFlight> due = std::move(wheel_[now_ % kWheel]);
  wheel_[now_ % kWheel].clear();
  std::shuffle(due.begin(), due.end(), random_);
  for (InFlight& item : due) {
    const Message& msg = item.message;
    if (item.unreachable) {
      if (!running(msg.from)) continue;
      nodes_.at(msg.from).machine->OnUnreachable(msg.to);
      Flush(msg.from);
      continue;
    }
    if (!running(msg.to)) {
      Schedule(1, InFlight{msg, true});
      continue;
    }
    if (!Connected(msg.from, msg.to)) continue;
    if (trace_)
      std::fprintf(
          stderr, "t%llu %llu->%llu %s slot %llu b%llu.%llu subj %llu%s\n",
          (unsigned long long)now_, (unsigned long long)msg.from, (unsigned long long)msg.to,
          KindName(msg.kind), (unsigned long long)msg.slot, (unsigned long long)msg.ballot.round,
          (unsigned long long)msg.ballot.node, (unsigned long long)msg.subject,
          msg.value
              ? (" " + Describe(msg.value->view) + " v" + std::to_string(msg.value->state.version))
                    .c_str()
              : "");
    nodes_.at(msg.to).machine->OnMessage(msg);
    Flush(msg.to);
  }
  for (NodeId id : ids_) {
    if (!running(id)) continue;
    nodes_.at(id).machine->OnTick();
    Flush(id);
  }
}

void Simulator::CheckEntry(NodeId node, const Entry& e) {
  const std::string where = "node " + std::to_string(node) + " slot " + std::to_string(e.slot);
  if (auto it = chosen_.find(e.slot); it != chosen_.end()) {
    if (it->second != e)
      Violation(where + ": installed " + Describe(e.view) + " but slot holds " +
                Describe(it->second.view) + " (or another state)");
    return;
  }
  const std::vector<NodeId> ids = e.view.Ids();
  auto [gen, fresh] = generation_members_.try_emplace(e.view.generation, ids);
  if (!fresh && gen->second != ids)
    Violation(where + ": two member sets with generation " + std::to_string(e.view.generation));
  if (e.slot == 1) {
    if (e.view.generation != 1 || ids != std::vector<NodeId>{1} || e.view.members[0].admitted != 1)
      Violation(where + ": slot 1 is not the bootstrap view");
  } else {
    auto prev = chosen_.find(e.slot - 1);
    if (prev == chosen_.end()) {
      Violation(where + ": decided before slot " + std::to_string(e.slot - 1));
    } else {
      const View& voters = prev->second.view;
      std::set<NodeId> acceptors;
      for (const auto& [value, nodes] : accepted_[e.slot]) {
        if (value == e) acceptors = nodes;
      }
      // A one-member view decides in one call, so its acceptance is never persisted alone.
      if (voters.members.size() == 1 && voters.members[0].id == node) acceptors.insert(node);
      size_t votes = 0;
      for (NodeId a : acceptors) votes += voters.Contains(a) ? 1 : 0;
      if (votes * 2 <= voters.members.size())
        Violation(where + ": " + Describe(e.view) + " accepted by " + std::to_string(votes) +
                  " of " + Describe(voters));
      const bool same = voters.members == e.view.members;
      if (e.view.generation != prev->second.view.generation + (same ? 0 : 1))
        Violation(where + ": generation " + std::to_string(e.view.generation) + " after " +
                  Describe(voters));
      CheckAdmitted(where, voters, e.view);
    }
  }
  chosen_[e.slot] = e;
}

void Simulator::CheckAdmitted(const std::string& where, const View& before, const View& after) {
  for (const Member& m : after.members) {
    uint64_t want = after.generation;  // admitted by this view, unless it stayed
    for (const Member& was : before.members)
      if (was.id == m.id && was.incarnation == m.incarnation) want = was.admitted;
    if (m.admitted != want)
      Violation(where + ": node " + std::to_string(m.id) + " admitted by generation " +
                std::to_string(m.admitted) + ", not " + std::to_string(want));
  }
}

std::vector<View> Simulator::CandidateViews() const {
  // What the disks hold now (a decided entry whose every holder lost its disk is gone, and the
  // remaining voters must not decide its slot again).
  const Entry* newest = nullptr;
  for (const auto& [id, node] : nodes_) {
    if (node.disk && (!newest || node.disk->decided.slot > newest->slot))
      newest = &node.disk->decided;
  }
  std::vector<View> views;
  if (newest == nullptr) return views;
  views.push_back(newest->view);
  for (const auto& [id, node] : nodes_) {
    if (node.disk && node.disk->accepted && node.disk->accepted->slot == newest->slot + 1)
      views.push_back(node.disk->accepted->view);
  }
  return views;
}

bool Simulator::Converged(const std::set<NodeId>& live) const {
  const std::vector<NodeId> want(live.begin(), live.end());
  std::optional<uint64_t> generation;
  for (NodeId id : live) {
    if (!running(id)) return false;
    const View& v = machine(id).view();
    if (v.Ids() != want) return false;
    if (generation && *generation != v.generation) return false;
    generation = v.generation;
  }
  return true;
}

void Simulator::CheckStateHistory() {
  uint64_t expect_slot = 1;
  std::map<uint64_t, std::string> versions;
  for (const auto& [slot, e] : chosen_) {
    if (slot != expect_slot) Violation("slots not contiguous at " + std::to_string(slot));
    expect_slot = slot + 1;
    auto [it, fresh] = versions.try_emplace(e.state.version, e.state.blob);
    if (!fresh && it->second != e.state.blob)
      Violation("state version " + std::to_string(e.state.version) + " has two blobs");
  }
  for (const auto& [version, blob] : versions) {
    if (version == 0) continue;
    auto call = std::find_if(calls_.begin(), calls_.end(),
                             [&](const StateCall& c) { return c.blob == blob; });
    if (call == calls_.end()) {
      Violation("state version " + std::to_string(version) + " holds a blob nobody proposed");
    } else if (call->expected + 1 != version) {
      Violation("'" + blob + "' expected version " + std::to_string(call->expected) +
                " but became version " + std::to_string(version));
    } else if (call->result && call->result->status.code() == StatusCode::kFailedPrecondition) {
      Violation("'" + blob + "' was reported failed but became version " + std::to_string(version));
    }
  }
  for (const StateCall& call : calls_) {
    if (!call.result || !call.result->status.ok()) continue;
    auto it = versions.find(call.result->version);
    if (it == versions.end() || it->second != call.blob ||
        call.result->version != call.expected + 1)
      Violation("'" + call.blob + "' reported as version " + std::to_string(call.result->version) +
                " which holds something else");
  }
}

void Simulator::Violation(std::string what) {
  if (violations_.size() < 8) violations_.push_back("tick " + std::to_string(now_) + ": " + what);
}

}  // namespace rt::elastic::membership::sim
