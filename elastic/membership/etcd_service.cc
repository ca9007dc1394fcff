// Membership kept in etcd (StartEtcdMembershipService; design: docs/membership.md "Membership in
// etcd", keys: docs/formats/membership_etcd.md). Each node holds a lease and, attached to it, its
// member key; the view and the replicated state are two keys changed only by compare-and-swap
// transactions. A poll loop on the service's own thread renews the lease, reads the cluster's
// keys, installs the newest view and state it sees, and proposes the next view when the live
// member keys and the view differ.
#include <algorithm>
#include <map>
#include <random>
#include <set>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/log.h"
#include "elastic/membership.h"
#include "elastic/membership/etcd_client.h"
#include "elastic/membership/etcd_values.h"
#include "elastic/membership/service_util.h"

namespace rt::elastic {
namespace asio = boost::asio;
using membership::DescribeView;
using membership::Ready;

namespace {

// Largest replicated state blob in etcd (its default request limit is 1.5 MiB).
constexpr size_t kMaxEtcdStateBlob = 1u << 20;

// What one read of the cluster's keys found.
struct Snapshot {
  std::map<NodeId, Member> live;  // member keys (their leases are alive)
  std::optional<View> view;
  int64_t view_revision = 0;  // mod_revision of the view key, 0 = none
  std::optional<ReplicatedState> state;
  int64_t state_revision = 0;
};

class EtcdService final : public membership::ServiceBase {
 public:
  EtcdService(MembershipServiceOptions options, EtcdMembershipOptions etcd, etcd::Client client)
      : options_(std::move(options)),
        etcd_(std::move(etcd)),
        client_(std::move(client)),
        poll_timer_(io_) {}

  ~EtcdService() override {
    (void)Shutdown(Deadline::AfterMs(5'000));
    thread_.Join();  // calls in flight end at their deadlines; then the thread runs out of work
  }

  Status Start() {
    if (options_.node_id == 0) return InvalidArgument("membership: node_id must not be 0");
    if (etcd_.prefix.empty() || etcd_.prefix.back() == '/')
      return InvalidArgument("membership: etcd prefix '" + etcd_.prefix +
                             "' must be non-empty and not end in '/'");
    if (etcd_.lease_ttl.count() < 1)
      return InvalidArgument("membership: etcd lease TTL must be at least 1 s");
    if (options_.timing.tick.count() <= 0)
      return InvalidArgument("membership: timing periods must be positive");
    address_ = options_.advertise.empty() ? options_.listen : options_.advertise;
    if (address_.empty() || address_.find(':') == std::string::npos ||
        address_.substr(address_.rfind(':')) == ":0")
      return InvalidArgument(
          "membership: with etcd, `advertise` (the host:port peers reach this "
          "node at) is required; got '" +
          address_ + "'");
    std::random_device random;
    incarnation_ = (uint64_t{random()} << 32 | random()) | 1;
    LOG_INFO("membership: node {} at {} uses etcd at {} (keys under {}, lease {} s)",
             options_.node_id, address_, client_.endpoint(), etcd_.prefix, etcd_.lease_ttl.count());
    asio::co_spawn(io_, PollLoop(), asio::detached);
    thread_.Start();
    return Status();
  }

  NodeId self() const override { return options_.node_id; }
  std::string address() const override { return address_; }

  asio::awaitable<Result<View>> AwaitView(std::function<bool(const View&)> predicate,
                                          Deadline deadline) override {
    return Call(AwaitHere<View>(std::move(predicate), deadline, "view"));
  }

  asio::awaitable<Result<ReplicatedState>> AwaitState(
      std::function<bool(const ReplicatedState&)> predicate, Deadline deadline) override {
    return Call(AwaitHere<ReplicatedState>(std::move(predicate), deadline, "state"));
  }

  asio::awaitable<Result<uint64_t>> ProposeState(uint64_t expected_version, std::string blob,
                                                 Deadline deadline) override {
    if (blob.size() > kMaxEtcdStateBlob)
      return Ready<Result<uint64_t>>(
          InvalidArgument("replicated state of " + std::to_string(blob.size()) + " bytes exceeds " +
                          std::to_string(kMaxEtcdStateBlob) + " (etcd)"));
    return Call(ProposeHere(expected_version, std::move(blob), deadline));
  }

  asio::awaitable<Status> Leave(Deadline deadline) override { return Call(LeaveHere(deadline)); }

  Status Shutdown(Deadline deadline) override {
    if (shut_down_.exchange(true)) return Status();
    if (!thread_.started()) return Status();  // Start() failed
    const bool stopped = thread_.RunAndWait(
        [this] {
          stopping_ = true;
          poll_timer_.cancel();
          waiters_.Wake();
        },
        deadline);
    Status result;
    if (!stopped)
      result = DeadlineExceeded("membership service of node " + std::to_string(options_.node_id) +
                                " did not stop in time");
    LOG_INFO("membership: node {} stopped (its etcd lease expires on its own)", options_.node_id);
    return result;
  }

 private:
  std::string Key(const std::string& suffix) const { return etcd_.prefix + "/" + suffix; }
  std::string MemberKey(NodeId id) const {
    char digits[24];
    std::snprintf(digits, sizeof(digits), "%020llu", static_cast<unsigned long long>(id));
    return Key("members/") + digits;
  }
  // The deadline of one etcd call made at the current instant.
  Deadline CallDeadline() const { return Deadline::After(options_.timing.send_timeout); }
  Member Self() const { return Member{options_.node_id, address_, incarnation_}; }

  asio::awaitable<void> PollLoop() {
    const auto period = options_.timing.tick * 2;
    while (!stopping_) {
      co_await PollOnce();
      if (stopping_) break;
      poll_timer_.expires_after(period);
      co_await poll_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  // One round: lease, registration, read, install, propose.
  asio::awaitable<void> PollOnce() {
    const Status lease = co_await KeepLease();
    if (stopping_) co_return;
    if (!lease.ok()) {
      OnEtcdFailure(lease);
      co_return;
    }
    Result<Snapshot> read = co_await Read();
    if (stopping_) co_return;
    if (!read.ok()) {
      OnEtcdFailure(read.status());
      co_return;
    }
    if (etcd_failing_)
      LOG_INFO("membership: node {} reaches etcd at {} again", options_.node_id,
               client_.endpoint());
    etcd_failing_ = false;
    // This node's key is gone while its lease lives (deleted by hand): put it back next round.
    if (registered_ && !leaving_ && !read->live.count(options_.node_id)) registered_ = false;
    Apply(*read);
    co_await ProposeView(std::move(*read));
  }

  // A call to etcd failed: said once per outage; past its lease this node is out of every view
  // the others install, so it knows no view (and runs no workers) until it reaches etcd again.
  void OnEtcdFailure(const Status& failure) {
    if (!etcd_failing_)
      LOG_WARN("membership: node {}: etcd at {}: {}", options_.node_id, client_.endpoint(),
               failure.ToString());
    etcd_failing_ = true;
    if (MonoClock::now() - lease_renewed_at_ > etcd_.lease_ttl && view_.generation != 0) {
      LOG_WARN("membership: node {} cannot renew its etcd lease: it is out of the view",
               options_.node_id);
      Install(View{}, /*led=*/false);
      Notify(MembershipNotification::Kind::kRemoved, 0);
    }
  }

  // Grants a lease and registers this node's member key under it, or renews the lease.
  asio::awaitable<Status> KeepLease() {
    if (leaving_) co_return Status();
    const auto now = MonoClock::now();
    if (lease_ != 0 && now - lease_renewed_at_ >= etcd_.lease_ttl / 4) {
      Result<int64_t> ttl = co_await client_.KeepAlive(lease_, CallDeadline());
      if (!ttl.ok()) co_return ttl.status();
      if (*ttl > 0) {
        lease_renewed_at_ = now;
      } else {
        LOG_WARN("membership: node {}: its etcd lease expired; registering again",
                 options_.node_id);
        lease_ = 0;
      }
    }
    if (lease_ == 0) {
      CO_ASSIGN_OR_RETURN(auto granted,
                          co_await client_.GrantLease(etcd_.lease_ttl.count(), CallDeadline()));
      lease_ = granted.first;
      lease_renewed_at_ = now;
      registered_ = false;
    }
    if (!registered_) {
      CO_RETURN_IF_ERROR(co_await client_.Put(MemberKey(options_.node_id),
                                              membership::EncodeMemberValue(Self()), lease_,
                                              CallDeadline()));
      registered_ = true;
    }
    co_return Status();
  }

  asio::awaitable<Result<Snapshot>> Read() {
    CO_ASSIGN_OR_RETURN(std::vector<etcd::KeyValue> kvs,
                        co_await client_.RangePrefix(etcd_.prefix + "/", CallDeadline()));
    Snapshot s;
    const std::string members = Key("members/"), view = Key("view"), state = Key("state");
    for (const etcd::KeyValue& kv : kvs) {
      if (kv.key.rfind(members, 0) == 0) {
        Result<Member> m = membership::DecodeMemberValue(kv.value, kv.key);
        if (!m.ok()) co_return m.status();
        s.live[m->id] = std::move(*m);
      } else if (kv.key == view) {
        CO_ASSIGN_OR_RETURN(View v, membership::DecodeViewValue(kv.value, kv.key));
        s.view = std::move(v);
        s.view_revision = kv.mod_revision;
      } else if (kv.key == state) {
        CO_ASSIGN_OR_RETURN(ReplicatedState st, membership::DecodeStateValue(kv.value, kv.key));
        s.state = std::move(st);
        s.state_revision = kv.mod_revision;
      }
    }
    co_return s;
  }

  // Installs what etcd holds when it is newer than what this node knows.
  void Apply(const Snapshot& s) {
    if (s.state && s.state->version > state_.version) {
      Publish(view_, *s.state);
      Notify(MembershipNotification::Kind::kStateChanged, 0);
    }
    // Generations only grow here, even if etcd's keys were lost (a view below the highest one
    // installed is not taken; the next proposal goes past both).
    if (s.view && s.view->generation != view_.generation &&
        s.view->generation >= highest_generation_) {
      Install(*s.view, /*led=*/s.view->generation == led_generation_);
      if (!view_.Contains(options_.node_id) && !leaving_)
        Notify(MembershipNotification::Kind::kRemoved, 0);
    }
    // Members of the view whose key is gone (their lease expired): suspected until the next view.
    for (const Member& m : view_.members) {
      if (s.live.count(m.id) || m.id == options_.node_id || !suspected_.insert(m.id).second)
        continue;
      Notify(MembershipNotification::Kind::kSuspected, m.id);
    }
  }

  // Proposes the view of exactly the live members when it differs from the current one.
  asio::awaitable<void> ProposeView(Snapshot s) {
    // Only a registered node proposes (or a leaving one, its own removal).
    if (!registered_ && !leaving_) co_return;
    View next;
    next.generation = std::max(s.view ? s.view->generation : 0, highest_generation_) + 1;
    for (const auto& [id, m] : s.live) {
      if (leaving_ && id == options_.node_id) continue;
      Member member = m;
      member.admitted = next.generation;  // unless the view holds this incarnation already
      if (s.view) {
        for (const Member& was : s.view->members)
          if (was.id == id && was.incarnation == m.incarnation) member.admitted = was.admitted;
      }
      next.members.push_back(std::move(member));
    }
    if (next.members.empty()) co_return;
    if (s.view && s.view->members == next.members) co_return;
    // (Named, not braced in the co_await: GCC 12 miscompiles initializer lists in coroutines.)
    std::vector<etcd::ModRevisionIs> unchanged = {{Key("view"), s.view_revision}};
    std::vector<etcd::TxnWrite> put = {{Key("view"), membership::EncodeViewValue(next), 0, false}};
    Result<bool> won = co_await client_.Txn(std::move(unchanged), std::move(put), CallDeadline());
    if (!won.ok()) {
      LOG_WARN("membership: node {}: proposing view {}: {}", options_.node_id, DescribeView(next),
               won.status().ToString());
      co_return;
    }
    if (!*won) co_return;  // another node changed the view first: read it next round
    led_generation_ = next.generation;
    Install(next, /*led=*/true);
  }

  void Install(const View& view, bool led) {
    Publish(view, state_);
    highest_generation_ = std::max(highest_generation_, view.generation);
    suspected_.clear();
    if (view.generation != 0)
      LOG_INFO("membership: node {} installed view {}{}", options_.node_id, DescribeView(view),
               led ? " (its proposal)" : "");
    Notify(MembershipNotification::Kind::kViewInstalled, 0, led);
  }

  void Notify(MembershipNotification::Kind kind, NodeId node, bool led = false) {
    MembershipNotification n{.kind = kind, .view = view_, .state = state_, .node = node};
    n.led = led;
    if (kind == MembershipNotification::Kind::kSuspected) {
      n.detected_after = std::chrono::duration_cast<std::chrono::milliseconds>(etcd_.lease_ttl);
      LOG_WARN("membership: node {}: node {}'s etcd lease expired", options_.node_id, node);
    }
    if (options_.on_notification) options_.on_notification(n);
    waiters_.Wake();
  }

  template <typename T>
  asio::awaitable<Result<T>> AwaitHere(std::function<bool(const T&)> predicate, Deadline deadline,
                                       const char* what) {
    while (true) {
      if (stopping_) co_return Aborted("membership service is shut down");
      const T& current = Current<T>();
      if (predicate(current)) co_return current;
      if (deadline.Expired()) {
        std::string last;
        if constexpr (std::is_same_v<T, View>)
          last = DescribeView(view_);
        else
          last = "version " + std::to_string(state_.version);
        co_return DeadlineExceeded("node " + std::to_string(options_.node_id) + ": no " + what +
                                   " as awaited; the last is " + last);
      }
      co_await waiters_.Wait(io_, deadline);
    }
  }
  template <typename T>
  const T& Current() const {
    if constexpr (std::is_same_v<T, View>)
      return view_;
    else
      return state_;
  }

  asio::awaitable<Result<uint64_t>> ProposeHere(uint64_t expected, std::string blob,
                                                Deadline deadline) {
    const std::string key = Key("state");
    const std::string value = membership::EncodeStateValue({expected + 1, blob});
    Status last = Status();
    while (!stopping_ && !deadline.Expired()) {
      if (!view_.Contains(options_.node_id))
        co_return Unavailable("node " + std::to_string(options_.node_id) +
                              " is not a member of the view");
      Result<Snapshot> read = co_await Read();
      if (read.ok()) {
        Apply(*read);
        const ReplicatedState current = read->state.value_or(ReplicatedState{});
        // An answer lost after the commit: the state already holds this proposal.
        if (current.version == expected + 1 && current.blob == blob) co_return expected + 1;
        if (current.version != expected)
          co_return FailedPrecondition("replicated state is at version " +
                                       std::to_string(current.version) + ", not " +
                                       std::to_string(expected));
        std::vector<etcd::ModRevisionIs> unchanged = {{key, read->state_revision}};
        std::vector<etcd::TxnWrite> put = {{key, value, 0, false}};
        Result<bool> won =
            co_await client_.Txn(std::move(unchanged), std::move(put), CallDeadline());
        if (won.ok() && *won) {
          if (state_.version < expected + 1) {
            Publish(view_, ReplicatedState{expected + 1, std::move(blob)});
            Notify(MembershipNotification::Kind::kStateChanged, 0);
          }
          co_return expected + 1;
        }
        if (!won.ok()) last = won.status();
        continue;  // lost the race or the answer: read again
      }
      last = read.status();
      co_await waiters_.Wait(io_, Deadline::After(options_.timing.tick));
    }
    if (stopping_) co_return Aborted("membership service is shut down");
    co_return DeadlineExceeded("node " + std::to_string(options_.node_id) +
                               ": compare-and-set from version " + std::to_string(expected) +
                               " not decided in time (its outcome is unknown)" +
                               (last.ok() ? "" : "; last error: " + last.ToString()));
  }

  asio::awaitable<Status> LeaveHere(Deadline deadline) {
    // The only member has no one to agree to its leaving, and nothing to leave.
    if (view_.Contains(options_.node_id) && view_.members.size() == 1) co_return Status();
    leaving_ = true;
    if (lease_ != 0) {
      Status revoked = co_await client_.RevokeLease(lease_, CallDeadline());
      if (!revoked.ok())
        LOG_WARN("membership: node {}: revoking its etcd lease: {}", options_.node_id,
                 revoked.ToString());
      lease_ = 0;
      registered_ = false;
    }
    while (view_.Contains(options_.node_id)) {
      if (stopping_) co_return Aborted("membership service is shut down");
      if (view_.members.size() == 1) co_return Status();
      if (deadline.Expired())
        co_return DeadlineExceeded("node " + std::to_string(options_.node_id) +
                                   ": no view without it was installed in time; view is " +
                                   DescribeView(view_));
      co_await waiters_.Wait(io_, deadline);
    }
    co_return Status();
  }

  asio::io_context& io_ = thread_.io();  // the service's own (ServiceBase::thread_)
  MembershipServiceOptions options_;
  EtcdMembershipOptions etcd_;
  etcd::Client client_;
  asio::steady_timer poll_timer_;
  std::string address_;
  uint64_t incarnation_ = 0;
  // On the service's thread only.
  int64_t lease_ = 0;
  MonoClock::time_point lease_renewed_at_{};
  bool registered_ = false;
  bool leaving_ = false;
  bool etcd_failing_ = false;
  uint64_t led_generation_ = 0;
  uint64_t highest_generation_ = 0;  // of the views installed here
  std::set<NodeId> suspected_;
  membership::ChangeWaiters waiters_;
  bool stopping_ = false;
};

}  // namespace

Result<std::unique_ptr<MembershipService>> StartEtcdMembershipService(
    MembershipServiceOptions options, EtcdMembershipOptions etcd) {
  ASSIGN_OR_RETURN(etcd::Client client, etcd::Client::Create(etcd.endpoint));
  auto service =
      std::make_unique<EtcdService>(std::move(options), std::move(etcd), std::move(client));
  RETURN_IF_ERROR(service->Start());
  return std::unique_ptr<MembershipService>(std::move(service));
}

}  // namespace rt::elastic
