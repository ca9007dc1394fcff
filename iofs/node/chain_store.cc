#include "iofs/chain_store.h"

#include <algorithm>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/log.h"

namespace rt::iofs {
namespace {

using chain::ChainConfig;
using chain::MemberState;
using chain::NodeId;

bool Retryable(const Status& s) {
  // kAborted: a connection to a node was closed under the call; the write is retried (a
  // repeated write only adds a version) and a read goes to another replica.
  return s.retryable() || s.code() == StatusCode::kNotServing ||
         s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kAborted;
}

class ChainObjectStore final : public ObjectStore {
 public:
  ChainObjectStore(ChainRouter* router, ChainStoreOptions options)
      : router_(router), options_(options) {}

  Status Put(std::span<const ObjectPut> puts) override {
    for (const ObjectPut& p : puts)
      if (p.data.size() > options_.max_object_size)
        return InvalidArgument("object " + std::to_string(p.key) + " of " +
                               std::to_string(p.data.size()) + " bytes exceeds " +
                               std::to_string(options_.max_object_size));
    const Deadline deadline = Deadline::AfterMs(options_.op_timeout_ms);
    return ForEachInParallel(
        puts.size(), [&](size_t i) { return WriteOne(puts[i].key, puts[i].data, deadline); });
  }

  Status Get(ObjectKey key, uint64_t offset, uint64_t length,
             std::vector<std::byte>* out) override {
    return FromAnyReplica(key, [&](NodeId n, Deadline deadline) {
      return router_->ReadAt(n, key, offset, length, out, deadline);
    });
  }

  Result<size_t> GetInto(ObjectKey key, uint64_t offset, std::span<std::byte> out) override {
    size_t got = 0;
    RETURN_IF_ERROR(FromAnyReplica(key, [&](NodeId n, Deadline deadline) -> Status {
      ASSIGN_OR_RETURN(got, router_->ReadAtInto(n, key, offset, out, deadline));
      return Status();
    }));
    return got;
  }

  // Runs `read` against the serving replicas of the key's chain (this node's first) until one
  // succeeds, retrying while the chain changes; each replica's turn is bounded by
  // replica_try_ms, a chain without a serving replica is waited for stopped_chain_ms.
  template <typename Read>
  Status FromAnyReplica(ObjectKey key, const Read& read) {
    const Deadline deadline = Deadline::AfterMs(options_.op_timeout_ms);
    const chain::ChainId c = chain::ChainOf(key, router_->chain_count());
    Status last;
    std::string tried;
    StoppedChainWait stopped(options_.stopped_chain_ms);
    while (true) {
      ChainConfig config = router_->Config(c);
      std::vector<NodeId> replicas;
      for (const auto& m : config.members)
        if (m.state == MemberState::kServing) replicas.push_back(m.node);
      if (GivesUp(stopped, c, config, !replicas.empty()))
        return stopped.Error("read object " + std::to_string(key), c);
      // This node's own replica first: no network hop; replicas that did not answer lately last.
      auto self = std::find(replicas.begin(), replicas.end(), router_->self());
      if (self != replicas.end()) std::rotate(replicas.begin(), self, self + 1);
      std::stable_partition(replicas.begin(), replicas.end(),
                            [this](NodeId n) { return !Unanswering(n); });
      bool retry = replicas.empty();
      for (NodeId n : replicas) {
        Status s = read(n, deadline.Min(Deadline::AfterMs(options_.replica_try_ms)));
        NoteAnswer(n, s);
        if (s.ok()) {
          if (!tried.empty()) LOG_WARN("object {}: served by node {} after: {}", key, n, tried);
          return s;
        }
        if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kOutOfRange) return s;
        tried += (tried.empty() ? "" : "; ") + s.ToString();
        last = s;
        retry = retry || Retryable(s);
      }
      if (!retry || deadline.Expired())
        return Status(last.ok() ? StatusCode::kUnavailable : last.code(),
                      "object " + std::to_string(key) + " on chain " + std::to_string(c) +
                          ": no replica could serve it (" +
                          (tried.empty() ? "no serving replica" : tried) + ")");
      Backoff(deadline);
    }
  }

  Status Delete(std::span<const ObjectKey> keys) override {
    const Deadline deadline = Deadline::AfterMs(options_.op_timeout_ms);
    return ForEachInParallel(keys.size(),
                             [&](size_t i) { return WriteOne(keys[i], std::nullopt, deadline); });
  }

  Result<std::vector<ObjectKey>> Keys() override {
    const Deadline deadline = Deadline::AfterMs(options_.op_timeout_ms);
    std::set<ObjectKey> keys;
    bool any = false;
    Status last;
    for (NodeId n : router_->nodes()) {
      Result<std::vector<chain::ChunkKey>> k = router_->KeysAt(n, deadline);
      if (!k.ok()) {
        last = k.status();
        continue;
      }
      any = true;
      keys.insert(k->begin(), k->end());
    }
    if (!any) return last.ok() ? Unavailable("no node answered") : last;
    return std::vector<ObjectKey>(keys.begin(), keys.end());
  }

  uint32_t max_object_size() const override { return options_.max_object_size; }

  std::vector<std::string> CheckStorage() override {
    const Deadline deadline = Deadline::AfterMs(options_.op_timeout_ms);
    std::vector<std::string> problems;
    for (NodeId n : router_->nodes()) {
      Result<std::vector<std::string>> p = router_->CheckAt(n, deadline);
      if (!p.ok()) {
        problems.push_back("node " + std::to_string(n) + ": " + p.status().ToString());
        continue;
      }
      for (const std::string& line : *p)
        problems.push_back("node " + std::to_string(n) + ": " + line);
    }
    return problems;
  }

 private:
  // Runs op(0) .. op(count - 1), parallel_puts at a time (this thread runs one of each group);
  // the first error, after every started op ended.
  template <typename Op>
  Status ForEachInParallel(size_t count, const Op& op) {
    const size_t width = static_cast<size_t>(std::max(1, options_.parallel_puts));
    for (size_t first = 0; first < count; first += width) {
      const size_t n = std::min(width, count - first);
      std::vector<std::future<Status>> running;
      for (size_t i = 1; i < n; ++i)
        running.push_back(std::async(std::launch::async, [&op, at = first + i] { return op(at); }));
      Status status = op(first);
      for (auto& f : running) {
        Status s = f.get();
        if (status.ok() && !s.ok()) status = s;
      }
      RETURN_IF_ERROR(status);
    }
    return Status();
  }

  // How long a replica that did not answer a read is tried after the others.
  static constexpr auto kUnansweringFor = std::chrono::seconds(10);

  // True while replica `n` is tried last: its last read got no answer within kUnansweringFor.
  bool Unanswering(NodeId n) {
    std::lock_guard lock(unanswering_mu_);
    auto it = unanswering_until_.find(n);
    return it != unanswering_until_.end() && MonoClock::now() < it->second;
  }
  // Records how replica `n` answered a read: a deadline or a lost connection puts it last for
  // kUnansweringFor, so the reads after it do not each wait for it again.
  void NoteAnswer(NodeId n, const Status& s) {
    const bool silent =
        s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable;
    std::lock_guard lock(unanswering_mu_);
    if (silent) {
      unanswering_until_[n] = MonoClock::now() + kUnansweringFor;
    } else {
      unanswering_until_.erase(n);
    }
  }

  // A short pause before retrying a chain that is changing (bounded by the deadline).
  // The wait of one operation for a chain that has no serving member.
  class StoppedChainWait {
   public:
    explicit StoppedChainWait(int64_t limit_ms) : limit_ms_(limit_ms) {}
    // Whether to give up now, given whether the chain serves in its newest config: true once it
    // has served in none for limit_ms on end.
    bool GivesUp(bool serving) {
      waiting_ = !serving && waiting_;
      if (serving) return false;
      const MonoTime now = MonoClock::now();
      if (!waiting_) since_ = now;
      waiting_ = true;
      return now - since_ >= std::chrono::milliseconds(limit_ms_);
    }
    Status Error(const std::string& what, chain::ChainId chain) const {
      return Unavailable(what + ": chain " + std::to_string(chain) +
                         " has had no serving member for " + std::to_string(limit_ms_) +
                         " ms (stopped until its last serving member is back)");
    }

   private:
    const int64_t limit_ms_;
    bool waiting_ = false;         // the chain served in none of the configs since `since_`
    MonoTime since_ = MonoTime();  // the first config without a serving member
  };

  // Whether an operation waiting in `wait` gives up on chain `c` (`config`) now: once it has
  // waited stopped_chain_ms itself, or once the chain has had this very config, without a
  // serving member, for that long, as earlier operations saw it. Operations on a stopped chain
  // thus share one wait instead of each waiting anew: a metadata node runs its namespace
  // operations one after another, and with the namespace's chain stopped, four new workers'
  // connects and listings queued behind each other for 3 s apiece (40 s to a resume from the
  // memory snapshot, in a chaos campaign). A config without a serving member changes only with
  // a new version, so one version seen stopped has been stopped all along.
  bool GivesUp(StoppedChainWait& wait, chain::ChainId c, const ChainConfig& config, bool serving) {
    const bool own = wait.GivesUp(serving);
    std::lock_guard lock(stopped_mu_);
    if (serving) {
      stopped_since_.erase(c);
      return false;
    }
    const MonoTime now = MonoClock::now();
    auto [it, added] = stopped_since_.try_emplace(c, config.version, now);
    if (!added && it->second.first != config.version) it->second = {config.version, now};
    return own || now - it->second.second >= std::chrono::milliseconds(options_.stopped_chain_ms);
  }

  static void Backoff(Deadline deadline) {
    std::this_thread::sleep_for(
        std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(50), deadline.Remaining()));
  }

  Status WriteOne(ObjectKey key, std::optional<std::span<const std::byte>> data,
                  Deadline deadline) {
    const chain::ChainId c = chain::ChainOf(key, router_->chain_count());
    StoppedChainWait stopped(options_.stopped_chain_ms);
    while (true) {
      ChainConfig config = router_->Config(c);
      Status s;
      const bool serving =
          !config.members.empty() && config.members[0].state == MemberState::kServing;
      if (GivesUp(stopped, c, config, serving))
        return stopped.Error("write object " + std::to_string(key), c);
      if (!serving) {
        s = Status(StatusCode::kNotServing, "chain " + std::to_string(c) + " has no serving head",
                   true);
      } else {
        s = router_
                ->WriteAt(config.members[0].node, key, data, config.version,
                          deadline.Min(Deadline::AfterMs(options_.write_try_ms)))
                .status();
      }
      if (s.ok()) return s;
      if (!Retryable(s) || deadline.Expired())
        return s.WithContext("write object " + std::to_string(key) + " on chain " +
                             std::to_string(c));
      Backoff(deadline);
    }
  }

  ChainRouter* const router_;
  const ChainStoreOptions options_;
  std::mutex unanswering_mu_;
  std::map<NodeId, MonoTime> unanswering_until_;  // GUARDED_BY(unanswering_mu_)
  std::mutex stopped_mu_;
  // Chains seen without a serving member: the config version seen so, and since when.
  std::map<chain::ChainId, std::pair<uint64_t, MonoTime>>
      stopped_since_;  // GUARDED_BY(stopped_mu_)
};

}  // namespace

std::unique_ptr<ObjectStore> NewChainObjectStore(ChainRouter* router, ChainStoreOptions options) {
  return std::make_unique<ChainObjectStore>(router, options);
}

}  // namespace rt::iofs
