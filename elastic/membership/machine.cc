#include "elastic/membership/machine.h"

#include <algorithm>

namespace rt::elastic::membership {
namespace {

using Kind = Message::Kind;

bool IsPaxos(Kind kind) {
  return kind == Kind::kPrepare || kind == Kind::kPromise || kind == Kind::kAccept ||
         kind == Kind::kAccepted || kind == Kind::kNack;
}

}  // namespace

const char* KindName(Message::Kind kind) {
  switch (kind) {
    case Kind::kPing:
      return "Ping";
    case Kind::kPong:
      return "Pong";
    case Kind::kSuspect:
      return "Suspect";
    case Kind::kConfirm:
      return "Confirm";
    case Kind::kRefute:
      return "Refute";
    case Kind::kPrepare:
      return "Prepare";
    case Kind::kPromise:
      return "Promise";
    case Kind::kAccept:
      return "Accept";
    case Kind::kAccepted:
      return "Accepted";
    case Kind::kNack:
      return "Nack";
    case Kind::kDecided:
      return "Decided";
    case Kind::kFetch:
      return "Fetch";
    case Kind::kJoin:
      return "Join";
  }
  return "unknown";
}

MembershipMachine::MembershipMachine(MachineOptions options, std::optional<DurableState> durable)
    : options_(std::move(options)), random_(options_.random_seed) {
  if (durable) {
    durable_ = std::move(*durable);
    highest_round_ = durable_.promised.round;
  } else {
    durable_.incarnation = options_.incarnation;
    dirty_ = true;
    if (options_.bootstrap) {
      durable_.decided.slot = 1;
      durable_.decided.view.generation = 1;
      durable_.decided.view.members = {
          Member{options_.self, options_.address, durable_.incarnation, /*admitted=*/1}};
    }
  }
  for (const Member& m : view().members) heard_[m.id] = 0;
  if (durable_.decided.slot > 0) Notify(MembershipNotification::Kind::kViewInstalled);
  if (durable_.decided.slot > 0 && !IsMember()) Notify(MembershipNotification::Kind::kRemoved);
}

void MembershipMachine::Send(Kind kind, NodeId to, Message message) {
  message.kind = kind;
  message.from = options_.self;
  message.to = to;
  message.from_address = options_.address;
  message.from_incarnation = durable_.incarnation;
  message.slot = durable_.decided.slot;
  if (to == options_.self) {
    to_self_.push_back(std::move(message));
  } else {
    messages_.push_back(std::move(message));
  }
}

void MembershipMachine::SendDecided(NodeId to) {
  if (durable_.decided.slot == 0 || to == options_.self) return;
  Message m;
  m.value = durable_.decided;
  Send(Kind::kDecided, to, std::move(m));
}

void MembershipMachine::DrainSelf() {
  while (!to_self_.empty()) {
    Message m = std::move(to_self_.front());
    to_self_.pop_front();
    Handle(m);
  }
}

void MembershipMachine::OnMessage(const Message& message) {
  if (message.from == options_.self || message.from == 0) return;
  Handle(message);
  DrainSelf();
}

void MembershipMachine::Handle(const Message& m) {
  const NodeId from = m.from;
  const bool remote = from != options_.self;
  if (remote) {
    heard_[from] = ticks_;
    // Any word from a suspect answers the questions about it.
    if (auto c = confirming_.find(from); c != confirming_.end()) {
      for (NodeId requester : c->second.requesters) {
        Message refute;
        refute.subject = from;
        Send(Kind::kRefute, requester, std::move(refute));
      }
      confirming_.erase(c);
    }
    suspects_.erase(from);
  }
  const uint64_t mine = durable_.decided.slot;
  if (m.kind == Kind::kDecided) {
    if (m.value && m.value->slot > mine) Adopt(*m.value);
    return;
  }
  if (m.kind == Kind::kFetch) {
    SendDecided(from);
    return;
  }
  if (remote && m.slot != mine) {
    // Rate-limited catch-up: at most one kDecided or kFetch per peer and tick.
    auto [it, fresh] = catchup_sent_.try_emplace(from, ticks_);
    if (fresh || it->second != ticks_) {
      it->second = ticks_;
      if (m.slot < mine) {
        SendDecided(from);
      } else {
        Send(Kind::kFetch, from);
      }
    }
  }
  switch (m.kind) {
    case Kind::kPing:
      Send(Kind::kPong, from);
      return;
    case Kind::kPong:
      return;
    case Kind::kSuspect: {
      if (m.subject == options_.self || m.subject == from) {
        Message refute;
        refute.subject = m.subject;
        Send(Kind::kRefute, from, std::move(refute));
        return;
      }
      if (mine > 0 && m.slot <= mine && !view().Contains(m.subject)) {
        Message confirm;  // already removed here
        confirm.subject = m.subject;
        Send(Kind::kConfirm, from, std::move(confirm));
        return;
      }
      auto [it, fresh] = confirming_.try_emplace(m.subject, Confirmation{ticks_, {}});
      it->second.requesters.insert(from);
      if (fresh) Send(Kind::kPing, m.subject);
      return;
    }
    case Kind::kConfirm:
      if (auto s = suspects_.find(m.subject); s != suspects_.end()) {
        s->second.confirmed = true;
        MaybePropose();
      }
      return;
    case Kind::kRefute:
      if (suspects_.erase(m.subject) > 0) heard_[m.subject] = ticks_;
      return;
    case Kind::kJoin:
      if (!IsMember() || m.slot > mine) return;
      for (const Member& member : view().members) {
        if (member.id == from && member.address == m.from_address &&
            member.incarnation == m.from_incarnation)
          return;  // a member that is behind (it gets our entry above)
      }
      joiners_[from] = Joiner{m.from_address, m.from_incarnation, ticks_};
      MaybePropose();
      return;
    default:
      break;
  }
  if (IsPaxos(m.kind) && m.slot == mine && mine > 0) HandlePaxos(m);
}

void MembershipMachine::HandlePaxos(const Message& m) {
  const NodeId from = m.from;
  // Only members of the newest decided view vote on, and propose, the next slot.
  if (!view().Contains(from) || !IsMember()) return;
  switch (m.kind) {
    case Kind::kPrepare: {
      highest_round_ = std::max(highest_round_, m.ballot.round);
      Message reply;
      if (m.ballot >= durable_.promised) {
        if (m.ballot != durable_.promised) {
          durable_.promised = m.ballot;
          dirty_ = true;
        }
        promised_at_ = ticks_;
        reply.ballot = m.ballot;
        reply.accepted_ballot = durable_.accepted_ballot;
        reply.value = durable_.accepted;
        Send(Kind::kPromise, from, std::move(reply));
      } else {
        reply.ballot = durable_.promised;
        Send(Kind::kNack, from, std::move(reply));
      }
      return;
    }
    case Kind::kAccept: {
      highest_round_ = std::max(highest_round_, m.ballot.round);
      if (!m.value || m.value->slot != durable_.decided.slot + 1) return;
      Message reply;
      if (m.ballot >= durable_.promised) {
        durable_.promised = m.ballot;
        promised_at_ = ticks_;
        durable_.accepted_ballot = m.ballot;
        durable_.accepted = m.value;
        dirty_ = true;
        reply.ballot = m.ballot;
        Send(Kind::kAccepted, from, std::move(reply));
      } else {
        reply.ballot = durable_.promised;
        Send(Kind::kNack, from, std::move(reply));
      }
      return;
    }
    case Kind::kPromise: {
      if (!proposal_ || proposal_->accepting || m.ballot != proposal_->ballot) return;
      if (m.value && m.value->slot != durable_.decided.slot + 1) return;
      proposal_->promises[from] = {m.accepted_ballot, m.value};
      if (!Majority(proposal_->promises.size())) return;
      // Paxos: propose the value accepted under the highest ballot, if any; else our own.
      const std::optional<Entry>* found = nullptr;
      Ballot best;
      for (const auto& [node, promise] : proposal_->promises) {
        if (promise.second && (!found || promise.first > best)) {
          best = promise.first;
          found = &promise.second;
        }
      }
      std::optional<Entry> value = found ? **found : Target();
      if (!value) {
        proposal_.reset();  // nothing to change any more
        return;
      }
      proposal_->accepting = true;
      proposal_->value = std::move(*value);
      for (const Member& member : view().members) {
        Message accept;
        accept.ballot = proposal_->ballot;
        accept.value = proposal_->value;
        Send(Kind::kAccept, member.id, std::move(accept));
      }
      return;
    }
    case Kind::kAccepted: {
      if (!proposal_ || !proposal_->accepting || m.ballot != proposal_->ballot) return;
      proposal_->accepted.insert(from);
      if (!Majority(proposal_->accepted.size())) return;
      const Entry decided = proposal_->value;
      std::set<NodeId> tell;
      for (const Member& member : view().members) tell.insert(member.id);
      for (const Member& member : decided.view.members) tell.insert(member.id);
      Adopt(decided, /*own_proposal=*/true);
      for (NodeId node : tell) SendDecided(node);
      return;
    }
    case Kind::kNack:
      highest_round_ = std::max(highest_round_, m.ballot.round);
      if (proposal_ && m.ballot > proposal_->ballot) Abandon();
      return;
    default:
      return;
  }
}

void MembershipMachine::Adopt(const Entry& entry, bool own_proposal) {
  const Entry old = durable_.decided;
  durable_.decided = entry;
  durable_.promised = Ballot{};
  durable_.accepted_ballot = Ballot{};
  durable_.accepted.reset();
  dirty_ = true;
  proposal_.reset();
  failed_proposals_ = 0;
  next_attempt_ = ticks_;  // a new slot: propose at once if something is still wanted
  const bool view_changed = old.view != entry.view;
  if (view_changed) {
    suspects_.clear();
    for (const Member& m : view().members) {
      heard_.try_emplace(m.id, ticks_);
      joiners_.erase(m.id);
    }
    Notify(MembershipNotification::Kind::kViewInstalled);
    notifications_.back().led = own_proposal;
    if (!IsMember()) Notify(MembershipNotification::Kind::kRemoved);
  }
  if (old.state != entry.state) Notify(MembershipNotification::Kind::kStateChanged);
  ResolveStateRequests();
}

void MembershipMachine::ResolveStateRequests() {
  const Entry& e = durable_.decided;
  for (auto it = pending_states_.begin(); it != pending_states_.end();) {
    const PendingState& p = *it;
    const StateRequestId id{options_.self, p.request};
    auto done = std::find_if(e.recent.begin(), e.recent.end(),
                             [&](const StateChange& c) { return c.request == id; });
    Status status;
    uint64_t version = e.state.version;
    if (done != e.recent.end()) {
      version = done->version;
    } else if (e.state.version != p.expected_version) {
      // Whether the changes this entry remembers reach back to the request's version.
      const bool covered =
          p.expected_version > e.state.version ||
          (!e.recent.empty() && e.recent.front().version <= p.expected_version + 1);
      status = covered
                   ? FailedPrecondition("replicated state is at version " +
                                        std::to_string(e.state.version) + ", not " +
                                        std::to_string(p.expected_version))
                   : Unavailable("state request outcome unknown: version moved from " +
                                 std::to_string(p.expected_version) + " to " +
                                 std::to_string(e.state.version) + " while this node was behind");
    } else if (!IsMember()) {
      status = Unavailable("node " + std::to_string(options_.self) + " is not a member");
    } else {
      ++it;
      continue;
    }
    state_results_.push_back(StateResult{p.request, status, version});
    it = pending_states_.erase(it);
  }
}

bool MembershipMachine::IsMember() const {
  return std::any_of(view().members.begin(), view().members.end(), [&](const Member& m) {
    return m.id == options_.self && m.incarnation == durable_.incarnation;
  });
}

std::optional<NodeId> MembershipMachine::Successor() const {
  if (!IsMember()) return std::nullopt;
  const auto& members = view().members;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].id != options_.self) continue;
    if (members.size() == 1) return std::nullopt;
    return members[(i + 1) % members.size()].id;
  }
  return std::nullopt;
}

std::optional<Entry> MembershipMachine::Target() const {
  const Entry& cur = durable_.decided;
  Entry next = cur;
  next.slot = cur.slot + 1;
  std::vector<Member>& members = next.view.members;
  std::erase_if(members, [&](const Member& m) {
    if (m.id == options_.self) return leaving_ && cur.view.members.size() > 1;
    auto s = suspects_.find(m.id);
    return s != suspects_.end() && s->second.confirmed;
  });
  // A joiner (or a member back with a new incarnation) is admitted by the view this makes.
  const uint64_t admitting = cur.view.generation + 1;
  for (const auto& [id, joiner] : joiners_) {
    auto it = std::find_if(members.begin(), members.end(),
                           [id = id](const Member& m) { return m.id == id; });
    if (it == members.end()) {
      members.push_back(Member{id, joiner.address, joiner.incarnation, admitting});
    } else {
      if (it->incarnation != joiner.incarnation) it->admitted = admitting;
      it->address = joiner.address;
      it->incarnation = joiner.incarnation;
    }
  }
  std::sort(members.begin(), members.end(),
            [](const Member& a, const Member& b) { return a.id < b.id; });
  const bool view_changes = members != cur.view.members;
  if (view_changes) next.view.generation = cur.view.generation + 1;
  bool state_changes = false;
  if (!pending_states_.empty() && pending_states_.front().expected_version == cur.state.version) {
    const PendingState& p = pending_states_.front();
    next.state = ReplicatedState{cur.state.version + 1, p.blob};
    next.recent.push_back(
        StateChange{next.state.version, StateRequestId{options_.self, p.request}});
    if (next.recent.size() > kRecentStateChanges) next.recent.erase(next.recent.begin());
    state_changes = true;
  }
  if (!view_changes && !state_changes) return std::nullopt;
  return next;
}

void MembershipMachine::MaybePropose() {
  if (!IsMember() || proposal_ || ticks_ < next_attempt_) return;
  // Another member is driving a ballot for this slot: give it time to finish first.
  if (durable_.promised.node != options_.self && durable_.promised.round > 0 &&
      ticks_ - promised_at_ < Patience())
    return;
  if (!Target()) return;
  StartPrepare();
}

void MembershipMachine::StartPrepare() {
  highest_round_ = std::max(highest_round_, durable_.promised.round) + 1;
  proposal_ = Proposal{};
  proposal_->ballot = Ballot{highest_round_, options_.self};
  proposal_->started = ticks_;
  for (const Member& member : view().members) {
    Message prepare;
    prepare.ballot = proposal_->ballot;
    Send(Kind::kPrepare, member.id, std::move(prepare));
  }
}

uint64_t MembershipMachine::Patience() const {
  return 6 * options_.timing.retry_ticks << std::min<uint32_t>(failed_proposals_, 2);
}

void MembershipMachine::Abandon() {
  proposal_.reset();
  // Random exponential back-off, so that of two proposers one soon finds the other done.
  const uint64_t retry = options_.timing.retry_ticks;
  const uint64_t spread = retry << std::min<uint32_t>(failed_proposals_, 4);
  next_attempt_ = ticks_ + retry + random_() % (spread + 1);
  ++failed_proposals_;
}

void MembershipMachine::RaiseSuspicion(NodeId suspect) {
  if (suspects_.count(suspect)) return;
  suspects_[suspect] = Suspicion{ticks_, false};
  auto heard = heard_.find(suspect);
  Notify(MembershipNotification::Kind::kSuspected, suspect,
         heard == heard_.end() ? 0 : ticks_ - heard->second);
  for (const Member& m : view().members) {
    if (m.id == options_.self || m.id == suspect) continue;
    Message ask;
    ask.subject = suspect;
    Send(Kind::kSuspect, m.id, std::move(ask));
  }
}

void MembershipMachine::OnUnreachable(NodeId peer) {
  if (peer == Successor()) RaiseSuspicion(peer);
  if (auto c = confirming_.find(peer); c != confirming_.end()) {
    for (NodeId requester : c->second.requesters) {
      Message confirm;
      confirm.subject = peer;
      Send(Kind::kConfirm, requester, std::move(confirm));
    }
    confirming_.erase(c);
  }
  DrainSelf();
}

void MembershipMachine::OnTick() {
  ++ticks_;
  const MembershipTiming& t = options_.timing;
  // Answer confirmation requests whose suspect stayed silent; keep pinging the others.
  for (auto it = confirming_.begin(); it != confirming_.end();) {
    if (ticks_ - it->second.started >= t.confirm_ticks) {
      for (NodeId requester : it->second.requesters) {
        Message confirm;
        confirm.subject = it->first;
        Send(Kind::kConfirm, requester, std::move(confirm));
      }
      it = confirming_.erase(it);
    } else {
      if (ticks_ % t.heartbeat_ticks == 0) Send(Kind::kPing, it->first);
      ++it;
    }
  }
  if (IsMember()) {
    if (std::optional<NodeId> next = Successor()) {
      if (ticks_ % t.heartbeat_ticks == 0) Send(Kind::kPing, *next);
      auto [heard, fresh] = heard_.try_emplace(*next, ticks_);
      if (ticks_ - heard->second >= t.suspect_ticks) RaiseSuspicion(*next);
    }
    // Ask again about suspicions nobody answered (the questions or answers may have been lost).
    for (auto& [suspect, s] : suspects_) {
      if (!s.confirmed && ticks_ - s.raised >= 2 * t.confirm_ticks) {
        s.raised = ticks_;
        for (const Member& m : view().members) {
          if (m.id == options_.self || m.id == suspect) continue;
          Message ask;
          ask.subject = suspect;
          Send(Kind::kSuspect, m.id, std::move(ask));
        }
      }
    }
    std::erase_if(joiners_,
                  [&](const auto& j) { return ticks_ - j.second.seen > 4 * t.join_ticks; });
    // A proposal without a majority in time is retried with a higher ballot; the wait doubles
    // with every failed try (up to 16x), so slow networks still finish a round.
    if (proposal_ && ticks_ - proposal_->started >= Patience()) Abandon();
    MaybePropose();
  } else if (!leaving_ && ticks_ % t.join_ticks == 1 % t.join_ticks) {
    for (const Member& m : view().members) Send(Kind::kJoin, m.id);
    Send(Kind::kJoin, 0);  // the seeds
  }
  DrainSelf();
}

void MembershipMachine::RequestState(uint64_t request, uint64_t expected_version,
                                     std::string blob) {
  pending_states_.push_back(PendingState{request, expected_version, std::move(blob)});
  ResolveStateRequests();
  MaybePropose();
  DrainSelf();
}

void MembershipMachine::CancelStateRequest(uint64_t request) {
  std::erase_if(pending_states_, [&](const PendingState& p) { return p.request == request; });
}

void MembershipMachine::RequestLeave() {
  leaving_ = true;
  MaybePropose();
  DrainSelf();
}

void MembershipMachine::Notify(MembershipNotification::Kind kind, NodeId node,
                               uint64_t silent_ticks) {
  MembershipNotification n;
  n.kind = kind;
  n.view = view();
  n.state = state();
  n.node = node;
  n.detected_after = options_.timing.tick * silent_ticks;
  notifications_.push_back(std::move(n));
}

std::vector<Message> MembershipMachine::TakeMessages() { return std::exchange(messages_, {}); }

std::vector<MembershipNotification> MembershipMachine::TakeNotifications() {
  return std::exchange(notifications_, {});
}

std::vector<StateResult> MembershipMachine::TakeStateResults() {
  return std::exchange(state_results_, {});
}

bool MembershipMachine::TakeDirty() { return std::exchange(dirty_, false); }

}  // namespace rt::elastic::membership
