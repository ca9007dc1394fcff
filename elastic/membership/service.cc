// The membership service: drives a MembershipMachine on its own thread (an io_context that
// serves nothing else, so the fsyncs of the durable state block no one else's executor), feeds
// it messages from the RPC server and ticks from a timer, persists its state before anything
// it sends, and answers the MembershipService calls.
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
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
#include "elastic/membership/state_file.h"

namespace rt::elastic {
namespace asio = boost::asio;
using membership::Message;

namespace {

std::string Describe(const View& view) {
  std::string s = "generation " + std::to_string(view.generation) + " [";
  for (size_t i = 0; i < view.members.size(); ++i)
    s += (i ? " " : "") + std::to_string(view.members[i].id);
  return s + "]";
}

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

template <typename T>
asio::awaitable<T> Ready(T value) {
  co_return value;
}

template <typename T>
asio::awaitable<std::optional<T>> Optional(asio::awaitable<T> work) {
  co_return co_await std::move(work);
}

// Runs `work` on the service's thread and resumes the caller on its own executor.
template <typename T>
asio::awaitable<T> RunOn(asio::io_context& io, asio::awaitable<T> work) {
  // co_spawn needs a default-constructible result, which Result<T> is not.
  std::optional<T> result =
      co_await asio::co_spawn(io, Optional(std::move(work)), asio::use_awaitable);
  co_return std::move(*result);
}

class Service final : public MembershipService {
 public:
  explicit Service(MembershipServiceOptions options)
      : options_(std::move(options)), tick_timer_(io_), inbox_(std::make_shared<Inbox>()) {}

  ~Service() override {
    (void)Shutdown(Deadline::AfterMs(5'000));
    if (!thread_.joinable()) return;
    // Calls in flight end within send_timeout; then the thread runs out of work.
    work_.reset();
    if (finished_.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) io_.stop();
    thread_.join();
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
    finished_ = finished_promise_.get_future();
    thread_ = std::thread([this] {
      io_.run();
      finished_promise_.set_value();
    });
    return Status();
  }

  NodeId self() const override { return options_.node_id; }
  std::string address() const override { return address_; }

  View CurrentView() const override {
    std::lock_guard lock(mu_);
    return view_;
  }
  ReplicatedState CurrentState() const override {
    std::lock_guard lock(mu_);
    return state_;
  }

  asio::awaitable<Result<View>> AwaitView(std::function<bool(const View&)> predicate,
                                          Deadline deadline) override {
    if (shut_down_) return Ready<Result<View>>(Aborted("membership service is shut down"));
    return RunOn(io_, AwaitViewHere(std::move(predicate), deadline));
  }

  asio::awaitable<Result<ReplicatedState>> AwaitState(
      std::function<bool(const ReplicatedState&)> predicate, Deadline deadline) override {
    if (shut_down_)
      return Ready<Result<ReplicatedState>>(Aborted("membership service is shut down"));
    return RunOn(io_, AwaitStateHere(std::move(predicate), deadline));
  }

  asio::awaitable<Result<uint64_t>> ProposeState(uint64_t expected_version, std::string blob,
                                                 Deadline deadline) override {
    if (shut_down_) return Ready<Result<uint64_t>>(Aborted("membership service is shut down"));
    if (blob.size() > membership::kMaxStateBlob)
      return Ready<Result<uint64_t>>(
          InvalidArgument("replicated state of " + std::to_string(blob.size()) + " bytes exceeds " +
                          std::to_string(membership::kMaxStateBlob)));
    return RunOn(io_, ProposeHere(expected_version, std::move(blob), deadline));
  }

  asio::awaitable<Status> Leave(Deadline deadline) override {
    if (shut_down_) return Ready<Status>(Aborted("membership service is shut down"));
    return RunOn(io_, LeaveHere(deadline));
  }

  Status Shutdown(Deadline deadline) override {
    if (shut_down_.exchange(true)) return Status();
    {
      std::lock_guard lock(inbox_->mu);
      inbox_->deliver = nullptr;
    }
    if (!thread_.joinable()) return Status();  // Start() failed
    Status result;
    if (own_server_) result = own_server_->Shutdown(deadline);
    // The thread keeps running (idle) until the service is destroyed, so a call that races
    // with Shutdown still gets its Aborted instead of waiting on a stopped executor.
    auto stopped = std::make_shared<std::promise<void>>();
    std::future<void> done = stopped->get_future();
    asio::post(io_, [this, stopped] {
      stopping_ = true;
      tick_timer_.cancel();
      links_->CloseAll();
      WakeWaiters();
      stopped->set_value();
    });
    if (done.wait_until(deadline.when()) == std::future_status::timeout) {
      result = DeadlineExceeded("membership service of node " + std::to_string(options_.node_id) +
                                " did not stop in time");
    }
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
    WakeWaiters();
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
    {
      std::lock_guard lock(mu_);
      view_ = n.view;
      state_ = n.state;
    }
    using Kind = MembershipNotification::Kind;
    switch (n.kind) {
      case Kind::kViewInstalled:
        LOG_INFO("membership: node {} installed view {}", options_.node_id, Describe(n.view));
        break;
      case Kind::kSuspected:
        LOG_WARN("membership: node {} suspects node {} (silent for {} ms)", options_.node_id,
                 n.node, n.detected_after.count());
        break;
      case Kind::kRemoved:
        LOG_WARN("membership: node {} is not in view {}{}", options_.node_id, Describe(n.view),
                 machine_->leaving() ? "" : "; asking to rejoin");
        break;
      case Kind::kStateChanged:
        LOG_DEBUG("membership: node {} has state version {}", options_.node_id, n.state.version);
        break;
    }
    if (options_.on_notification) options_.on_notification(n);
  }

  // Waits until something changes here (a view, a state, a result) or `deadline` passes.
  asio::awaitable<void> WaitForChange(Deadline deadline) {
    asio::steady_timer timer(io_, deadline.when());
    waiters_.insert(&timer);
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    waiters_.erase(&timer);
  }

  void WakeWaiters() {
    for (asio::steady_timer* timer : waiters_) timer->cancel();
  }

  asio::awaitable<Result<View>> AwaitViewHere(std::function<bool(const View&)> predicate,
                                              Deadline deadline) {
    while (true) {
      if (stopping_) co_return Aborted("membership service is shut down");
      if (predicate(machine_->view())) co_return machine_->view();
      if (deadline.Expired())
        co_return DeadlineExceeded("node " + std::to_string(options_.node_id) +
                                   ": no view as awaited; the last is " +
                                   Describe(machine_->view()));
      co_await WaitForChange(deadline);
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
      co_await WaitForChange(deadline);
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
      co_await WaitForChange(deadline);
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
                                   Describe(machine_->view()));
      co_await WaitForChange(deadline);
    }
    co_return Status();
  }

  // Declared first: destroyed last, after everything that holds its sockets and timers.
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  MembershipServiceOptions options_;
  asio::steady_timer tick_timer_;
  std::shared_ptr<Inbox> inbox_;
  std::shared_ptr<net::RpcServer> own_server_;
  std::string address_;
  // On the service's thread only.
  std::optional<membership::MembershipMachine> machine_;
  std::optional<membership::PeerLinks> links_;
  std::map<NodeId, std::string> addresses_;
  std::set<asio::steady_timer*> waiters_;
  std::map<uint64_t, membership::StateResult> results_;
  uint64_t next_request_ = 0;
  bool stopping_ = false;
  // Any thread.
  mutable std::mutex mu_;
  View view_;              // guarded by mu_
  ReplicatedState state_;  // guarded by mu_
  std::atomic<bool> shut_down_{false};
  std::promise<void> finished_promise_;
  std::future<void> finished_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<MembershipService>> StartMembershipService(
    MembershipServiceOptions options) {
  auto service = std::make_unique<Service>(std::move(options));
  RETURN_IF_ERROR(service->Start());
  return std::unique_ptr<MembershipService>(std::move(service));
}

}  // namespace rt::elastic
