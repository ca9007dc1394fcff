// The membership service: drives a MembershipMachine on its own thread (an io_context that
// serves nothing else, so the fsyncs of the durable state block no one else's executor), feeds
// it messages from the RPC server and ticks from a timer, persists its state before anything
// it sends, and answers the MembershipService calls.
#include <mutex>
#include <random>
#include <set>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/fault.h"
#include "base/log.h"
#include "base/net/rpc.h"
#include "elastic/membership.h"
#include "elastic/membership/codec.h"
#include "elastic/membership/machine.h"
#include "elastic/membership/peer_links.h"
#include "elastic/membership/service_util.h"
#include "elastic/membership/state_file.h"

namespace rt::elastic {
namespace asio = boost::asio;
using membership::DescribeView;
using membership::Message;
using membership::Ready;

namespace {

// A tick later than this is logged.
constexpr auto kLateTick = std::chrono::milliseconds(500);

// Hands messages from a (possibly shared) RpcServer to the service while it runs.
struct Inbox {
  std::mutex mu;
  std::function<void(Message)> deliver;  // null once the service is shut down
};

asio::awaitable<Result<std::vector<std::byte>>> HandleMessage(std::shared_ptr<Inbox> inbox,
                                                              net::RpcRequest request) {
  auto message = membership::DecodeMessage(request.payload);
  if (!message.ok()) co_return message.status().WithContext("from " + request.peer);
  std::lock_guard lock(inbox->mu);
  if (!inbox->deliver) co_return Unavailable("membership service is shut down");
  inbox->deliver(std::move(*message));
  co_return std::vector<std::byte>{};
}

class Service final : public membership::ServiceBase {
 public:
  explicit Service(MembershipServiceOptions options)
      : options_(std::move(options)), tick_timer_(io_), inbox_(std::make_shared<Inbox>()) {}

  ~Service() override {
    (void)Shutdown(Deadline::AfterMs(5'000));
    thread_.Join();  // calls in flight end at their deadlines; then the thread runs out of work
  }

  Status Start() {
    if (options_.node_id == 0) return InvalidArgument("membership: node_id must not be 0");
    if (options_.state_dir.empty()) return InvalidArgument("membership: state_dir is required");
    if (options_.timing.tick.count() <= 0 || options_.timing.heartbeat_ticks == 0 ||
        options_.timing.join_ticks == 0 || options_.timing.retry_ticks == 0)
      return InvalidArgument("membership: timing periods must be positive");
    for (const std::string& seed : options_.seeds) {
      if (auto parsed = membership::ParseAddress(seed, "membership seed"); !parsed.ok())
        return parsed.status();
    }
    ASSIGN_OR_RETURN(std::optional<membership::DurableState> durable,
                     membership::LoadDurableState(options_.state_dir));
    std::shared_ptr<net::RpcServer> server = options_.server;
    uint16_t port = 0;
    if (!server) {
      ASSIGN_OR_RETURN(auto listen, membership::ParseAddress(options_.listen, "membership listen"));
      server = own_server_ =
          net::RpcServer::Create(io_.get_executor(), {.bind_address = listen.first,
                                                      .port = listen.second,
                                                      .name = "membership server",
                                                      .secret = options_.secret});
    }
    server->Handle(membership::kMembershipMessageType, [inbox = inbox_](net::RpcRequest request) {
      return HandleMessage(inbox, request);
    });
    if (own_server_) {
      ASSIGN_OR_RETURN(port, own_server_->Start());
    }
    address_ = options_.advertise;
    if (address_.empty()) {
      if (!own_server_)
        return InvalidArgument("membership: `advertise` is required with a shared server");
      ASSIGN_OR_RETURN(auto listen, membership::ParseAddress(options_.listen, "membership listen"));
      address_ = listen.first + ":" + std::to_string(port);
    }
    const bool bootstrap =
        !durable && (options_.seeds.empty() || options_.seeds.front() == address_);
    std::random_device random;
    const uint64_t incarnation = (uint64_t{random()} << 32 | random()) | 1;
    // Request ids are remembered in the entries (Entry::recent): a restarted service must not
    // reuse its predecessor's, so they start at a random point.
    next_request_ = uint64_t{random()} << 32 | random();
    machine_.emplace(
        membership::MachineOptions{options_.node_id, address_, bootstrap, options_.timing,
                                   random() ^ options_.node_id, incarnation},
        std::move(durable));
    links_.emplace(io_.get_executor(), options_.secret, options_.timing, [this](NodeId node) {
      if (stopping_) return;
      machine_->OnUnreachable(node);
      AfterMachine();
    });
    {
      std::lock_guard lock(inbox_->mu);
      inbox_->deliver = [this](Message m) {
        asio::post(io_, [this, m = std::move(m)] { OnMessage(m); });
      };
    }
    LOG_INFO("membership: node {} at {} starting ({})", options_.node_id, address_,
             bootstrap ? "bootstraps a new cluster" : "joins through its seeds or state");
    asio::post(io_, [this] { AfterMachine(); });
    asio::co_spawn(io_, TickLoop(), asio::detached);
    thread_.Start();
    return Status();
  }

  NodeId self() const override { return options_.node_id; }
  std::string address() const override { return address_; }

  asio::awaitable<Result<View>> AwaitView(std::function<bool(const View&)> predicate,
                                          Deadline deadline) override {
    return Call(AwaitViewHere(std::move(predicate), deadline));
  }

  asio::awaitable<Result<ReplicatedState>> AwaitState(
      std::function<bool(const ReplicatedState&)> predicate, Deadline deadline) override {
    return Call(AwaitStateHere(std::move(predicate), deadline));
  }

  asio::awaitable<Result<uint64_t>> ProposeState(uint64_t expected_version, std::string blob,
                                                 Deadline deadline) override {
    if (blob.size() > membership::kMaxStateBlob)
      return Ready<Result<uint64_t>>(
          InvalidArgument("replicated state of " + std::to_string(blob.size()) + " bytes exceeds " +
                          std::to_string(membership::kMaxStateBlob)));
    return Call(ProposeHere(expected_version, std::move(blob), deadline));
  }

  asio::awaitable<Status> Leave(Deadline deadline) override { return Call(LeaveHere(deadline)); }

  Status Shutdown(Deadline deadline) override {
    if (shut_down_.exchange(true)) return Status();
    {
      std::lock_guard lock(inbox_->mu);
      inbox_->deliver = nullptr;
    }
    if (!thread_.started()) return Status();  // Start() failed
    Status result;
    if (own_server_) result = own_server_->Shutdown(deadline);
    // The thread keeps running (idle) until the service is destroyed, so a call that races
    // with Shutdown still gets its Aborted instead of waiting on a stopped executor.
    const bool stopped = thread_.RunAndWait(
        [this] {
          stopping_ = true;
          tick_timer_.cancel();
          links_->CloseAll();
          waiters_.Wake();
        },
        deadline);
    if (!stopped)
      result = DeadlineExceeded("membership service of node " + std::to_string(options_.node_id) +
                                " did not stop in time");
    LOG_INFO("membership: node {} stopped", options_.node_id);
    return result;
  }

 private:
  void OnMessage(const Message& m) {
    if (stopping_ || (m.to != 0 && m.to != options_.node_id)) return;
    if (!m.from_address.empty()) addresses_[m.from] = m.from_address;
    machine_->OnMessage(m);
    AfterMachine();
  }

  asio::awaitable<void> TickLoop() {
    auto next = MonoClock::now();
    while (!stopping_) {
      next += options_.timing.tick;
      tick_timer_.expires_at(next);
      co_await tick_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
      if (stopping_) break;
      // A tick this late means the service's thread was held up (a slow fsync, a starved
      // CPU): the failure detector saw nothing meanwhile, which the log should say.
      const auto now = MonoClock::now();
      if (now - next > kLateTick) {
        LOG_WARN("membership: node {}: a tick ran {} ms late (the service's thread was busy)",
                 options_.node_id,
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - next).count());
        next = now;  // one tick for the gap, not a burst of them
      }
      machine_->OnTick();
      AfterMachine();
    }
  }

  // Persists, then sends, then tells: the order the machine's contract asks for.
  void AfterMachine() {
    if (machine_->TakeDirty()) {
      Status saved = RT_FAULT_POINT("membership.before_persist");
      if (saved.ok()) saved = membership::SaveDurableState(options_.state_dir, machine_->durable());
      if (saved.ok()) saved = RT_FAULT_POINT("membership.after_persist");
      if (!saved.ok()) {
        // Nothing that depends on the unsaved state may leave this node.
        LOG_ERROR("membership: node {} cannot persist its state, stays silent: {}",
                  options_.node_id, saved.ToString());
        machine_->TakeMessages();
        machine_->TakeDirty();
        return;
      }
    }
    for (const Member& m : machine_->view().members) addresses_[m.id] = m.address;
    for (const Message& m : machine_->TakeMessages()) Route(m);
    for (const auto& n : machine_->TakeNotifications()) Tell(n);
    for (const auto& r : machine_->TakeStateResults()) results_[r.request] = r;
    waiters_.Wake();
  }

  void Route(const Message& m) {
    std::vector<std::byte> payload = membership::EncodeMessage(m);
    if (m.to == 0) {
      for (const std::string& seed : options_.seeds) {
        if (seed != address_) links_->Send(0, seed, payload);
      }
      return;
    }
    auto address = addresses_.find(m.to);
    if (address != addresses_.end()) links_->Send(m.to, address->second, std::move(payload));
  }

  void Tell(const MembershipNotification& n) {
    Publish(n.view, n.state);
    using Kind = MembershipNotification::Kind;
    switch (n.kind) {
      case Kind::kViewInstalled:
        LOG_INFO("membership: node {} installed view {}", options_.node_id, DescribeView(n.view));
        break;
      case Kind::kSuspected:
        LOG_WARN("membership: node {} suspects node {} (silent for {} ms)", options_.node_id,
                 n.node, n.detected_after.count());
        break;
      case Kind::kRemoved:
        LOG_WARN("membership: node {} is not in view {}{}", options_.node_id, DescribeView(n.view),
                 machine_->leaving() ? "" : "; asking to rejoin");
        break;
      case Kind::kStateChanged:
        LOG_DEBUG("membership: node {} has state version {}", options_.node_id, n.state.version);
        break;
    }
    if (options_.on_notification) options_.on_notification(n);
  }

  asio::awaitable<Result<View>> AwaitViewHere(std::function<bool(const View&)> predicate,
                                              Deadline deadline) {
    while (true) {
      if (stopping_) co_return Aborted("membership service is shut down");
      if (predicate(machine_->view())) co_return machine_->view();
      if (deadline.Expired())
        co_return DeadlineExceeded("node " + std::to_string(options_.node_id) +
                                   ": no view as awaited; the last is " +
                                   DescribeView(machine_->view()));
      co_await waiters_.Wait(io_, deadline);
    }
  }

  asio::awaitable<Result<ReplicatedState>> AwaitStateHere(
      std::function<bool(const ReplicatedState&)> predicate, Deadline deadline) {
    while (true) {
      if (stopping_) co_return Aborted("membership service is shut down");
      if (predicate(machine_->state())) co_return machine_->state();
      if (deadline.Expired())
        co_return DeadlineExceeded("node " + std::to_string(options_.node_id) +
                                   ": no replicated state as awaited; the last is version " +
                                   std::to_string(machine_->state().version));
      co_await waiters_.Wait(io_, deadline);
    }
  }

  asio::awaitable<Result<uint64_t>> ProposeHere(uint64_t expected, std::string blob,
                                                Deadline deadline) {
    if (stopping_) co_return Aborted("membership service is shut down");
    const uint64_t id = ++next_request_;
    machine_->RequestState(id, expected, std::move(blob));
    AfterMachine();
    while (true) {
      if (auto it = results_.find(id); it != results_.end()) {
        const membership::StateResult result = it->second;
        results_.erase(it);
        if (!result.status.ok()) co_return result.status;
        co_return result.version;
      }
      if (stopping_ || deadline.Expired()) {
        machine_->CancelStateRequest(id);
        if (stopping_) co_return Aborted("membership service is shut down");
        co_return DeadlineExceeded("node " + std::to_string(options_.node_id) +
                                   ": compare-and-set from version " + std::to_string(expected) +
                                   " not decided by a majority in time (its outcome is unknown)");
      }
      co_await waiters_.Wait(io_, deadline);
    }
  }

  asio::awaitable<Status> LeaveHere(Deadline deadline) {
    // The only member has no one to agree to its leaving, and nothing to leave.
    if (machine_->IsMember() && machine_->view().members.size() == 1) co_return Status();
    machine_->RequestLeave();
    AfterMachine();
    while (machine_->IsMember()) {
      if (stopping_) co_return Aborted("membership service is shut down");
      // The others left first (a whole cluster stopping): the last member has nothing to leave.
      if (machine_->view().members.size() == 1) co_return Status();
      if (deadline.Expired())
        co_return DeadlineExceeded("node " + std::to_string(options_.node_id) +
                                   ": no majority accepted its leaving in time; view is " +
                                   DescribeView(machine_->view()));
      co_await waiters_.Wait(io_, deadline);
    }
    co_return Status();
  }

  asio::io_context& io_ = thread_.io();  // the service's own (ServiceBase::thread_)
  MembershipServiceOptions options_;
  asio::steady_timer tick_timer_;
  std::shared_ptr<Inbox> inbox_;
  std::shared_ptr<net::RpcServer> own_server_;
  std::string address_;
  // On the service's thread only.
  std::optional<membership::MembershipMachine> machine_;
  std::optional<membership::PeerLinks> links_;
  std::map<NodeId, std::string> addresses_;
  membership::ChangeWaiters waiters_;
  std::map<uint64_t, membership::StateResult> results_;
  uint64_t next_request_ = 0;
  bool stopping_ = false;
};

}  // namespace

Result<std::unique_ptr<MembershipService>> StartMembershipService(
    MembershipServiceOptions options) {
  auto service = std::make_unique<Service>(std::move(options));
  RETURN_IF_ERROR(service->Start());
  return std::unique_ptr<MembershipService>(std::move(service));
}

}  // namespace rt::elastic
