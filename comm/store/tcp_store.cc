// The TCP store: server and client of the store protocol (docs/formats/comm_store.md) on
// base/net's RPC skeleton.
#include <map>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/bytes.h"
#include "base/log.h"
#include "base/net/rpc.h"
#include "comm/store.h"

namespace rt::comm {

Result<int64_t> ParseStoreCounter(std::string_view key, const Bytes& value);

namespace {

namespace asio = boost::asio;
using net::RpcRequest;

// Store protocol message types (frame `type`).
enum StoreOp : uint16_t {
  kSet = 1,
  kGet = 2,
  kTryGet = 3,
  kWait = 4,
  kAdd = 5,
  kCompareAndSet = 6,
  kDelete = 7,
};

// Longest server-side wait one request may ask for (guards against a hostile timeout).
constexpr uint32_t kMaxWaitMs = 24u * 3600 * 1000;

uint32_t WaitMs(Deadline d) {
  int64_t ms = d.RemainingMs();
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 0, kMaxWaitMs));
}

class Server final : public TcpStoreServer {
 public:
  explicit Server(TcpStoreServerOptions options) : options_(std::move(options)) {}
  ~Server() override { Stop(); }

  Status Init() {
    net::RpcServerOptions o;
    o.bind_address = options_.bind_address;
    o.port = options_.port;
    o.max_payload = options_.max_payload;
    o.name = "store server";
    o.secret = options_.secret;
    rpc_ = net::RpcServer::Create(io_.get_executor(), o);
    rpc_->Handle(kSet, [this](RpcRequest r) { return OnSet(r); });
    rpc_->Handle(kGet, [this](RpcRequest r) { return OnGet(r); });
    rpc_->Handle(kTryGet, [this](RpcRequest r) { return OnTryGet(r); });
    rpc_->Handle(kWait, [this](RpcRequest r) { return OnWait(r); });
    rpc_->Handle(kAdd, [this](RpcRequest r) { return OnAdd(r); });
    rpc_->Handle(kCompareAndSet, [this](RpcRequest r) { return OnCas(r); });
    rpc_->Handle(kDelete, [this](RpcRequest r) { return OnDelete(r); });
    ASSIGN_OR_RETURN(port_, rpc_->Start());
    thread_ = std::thread([this] { io_.run(); });
    return Status();
  }

  uint16_t port() const override { return port_; }
  size_t size() const override {
    std::lock_guard lock(size_mu_);
    return size_;
  }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    if (rpc_) rpc_->Abort();
    asio::post(io_, [this] {
      stopping_ = true;
      for (auto& [key, timer] : waiters_) timer->cancel();
      waiters_.clear();
    });
    // Give the aborted handlers a moment to finish, then stop the loop.
    asio::post(io_, [this] { guard_.reset(); });
    if (thread_.joinable()) {
      auto until = MonoClock::now() + std::chrono::milliseconds(500);
      while (!io_.stopped() && MonoClock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      io_.stop();
      thread_.join();
    }
  }

 private:
  using Reply = asio::awaitable<Result<Bytes>>;

  ByteReader Reader(const RpcRequest& r) {
    return ByteReader(r.payload, "store request from " + r.peer);
  }

  void Changed(const std::string& key) {
    auto [b, e] = waiters_.equal_range(key);
    for (auto it = b; it != e; ++it) it->second->cancel();
    waiters_.erase(b, e);
    std::lock_guard lock(size_mu_);
    size_ = map_.size();
  }

  // Waits on the io thread until every key exists, or the deadline, or Stop().
  asio::awaitable<Status> WaitKeys(const std::vector<std::string>& keys, Deadline deadline) {
    auto ex = co_await asio::this_coro::executor;
    while (true) {
      const std::string* missing = nullptr;
      for (const auto& k : keys)
        if (!map_.count(k)) {
          missing = &k;
          break;
        }
      if (!missing) co_return Status();
      if (stopping_) co_return Aborted("store server is stopping");
      if (deadline.Expired()) {
        std::string names;
        for (const auto& k : keys)
          if (!map_.count(k)) names += (names.empty() ? "" : ", ") + k;
        co_return DeadlineExceeded("store keys missing at the deadline: " + names);
      }
      auto timer = std::make_shared<asio::steady_timer>(ex, deadline.when());
      auto it = waiters_.emplace(*missing, timer);
      (void)it;
      co_await timer->async_wait(asio::as_tuple(asio::use_awaitable));
      // Remove ourselves if the timer fired rather than being woken (woken ones are erased).
      auto [b, e] = waiters_.equal_range(*missing);
      for (auto w = b; w != e; ++w)
        if (w->second == timer) {
          waiters_.erase(w);
          break;
        }
    }
  }

  Reply OnSet(RpcRequest r) {
    auto reader = Reader(r);
    CO_ASSIGN_OR_RETURN(std::string key, reader.GetString(options_.max_payload));
    CO_ASSIGN_OR_RETURN(uint32_t n, reader.Get<uint32_t>());
    CO_ASSIGN_OR_RETURN(auto value, reader.GetBytes(n));
    map_[key] = Bytes(value.begin(), value.end());
    Changed(key);
    co_return Bytes();
  }
  Reply OnGet(RpcRequest r) {
    auto reader = Reader(r);
    CO_ASSIGN_OR_RETURN(uint32_t ms, reader.Get<uint32_t>());
    CO_ASSIGN_OR_RETURN(std::string key, reader.GetString(options_.max_payload));
    std::vector<std::string> keys{key};
    CO_RETURN_IF_ERROR(co_await WaitKeys(keys, Deadline::AfterMs(std::min(ms, kMaxWaitMs))));
    co_return map_[key];
  }
  Reply OnTryGet(RpcRequest r) {
    auto reader = Reader(r);
    CO_ASSIGN_OR_RETURN(std::string key, reader.GetString(options_.max_payload));
    ByteWriter w;
    auto it = map_.find(key);
    w.Put<uint8_t>(it != map_.end());
    w.Put<uint32_t>(it != map_.end() ? static_cast<uint32_t>(it->second.size()) : 0);
    if (it != map_.end()) w.PutBytes(it->second.data(), it->second.size());
    co_return w.Take();
  }
  Reply OnWait(RpcRequest r) {
    auto reader = Reader(r);
    CO_ASSIGN_OR_RETURN(uint32_t ms, reader.Get<uint32_t>());
    CO_ASSIGN_OR_RETURN(uint32_t n, reader.Get<uint32_t>());
    if (n > reader.remaining() / 4) co_return Corruption("store wait request: bad key count");
    std::vector<std::string> keys;
    for (uint32_t i = 0; i < n; ++i) {
      CO_ASSIGN_OR_RETURN(std::string key, reader.GetString(options_.max_payload));
      keys.push_back(std::move(key));
    }
    CO_RETURN_IF_ERROR(co_await WaitKeys(keys, Deadline::AfterMs(std::min(ms, kMaxWaitMs))));
    co_return Bytes();
  }
  Reply OnAdd(RpcRequest r) {
    auto reader = Reader(r);
    CO_ASSIGN_OR_RETURN(std::string key, reader.GetString(options_.max_payload));
    CO_ASSIGN_OR_RETURN(int64_t delta, reader.Get<int64_t>());
    Bytes& v = map_[key];
    CO_ASSIGN_OR_RETURN(int64_t now, ParseStoreCounter(key, v));
    now += delta;
    v = ToBytes(std::to_string(now));
    Changed(key);
    ByteWriter w;
    w.Put<int64_t>(now);
    co_return w.Take();
  }
  Reply OnCas(RpcRequest r) {
    auto reader = Reader(r);
    CO_ASSIGN_OR_RETURN(std::string key, reader.GetString(options_.max_payload));
    CO_ASSIGN_OR_RETURN(uint8_t has_expected, reader.Get<uint8_t>());
    CO_ASSIGN_OR_RETURN(uint32_t en, reader.Get<uint32_t>());
    CO_ASSIGN_OR_RETURN(auto expected, reader.GetBytes(en));
    CO_ASSIGN_OR_RETURN(uint32_t dn, reader.Get<uint32_t>());
    CO_ASSIGN_OR_RETURN(auto desired, reader.GetBytes(dn));
    auto it = map_.find(key);
    bool matches = it == map_.end()
                       ? !has_expected
                       : (has_expected && Bytes(expected.begin(), expected.end()) == it->second);
    if (matches) {
      map_[key] = Bytes(desired.begin(), desired.end());
      Changed(key);
      co_return Bytes(desired.begin(), desired.end());
    }
    if (it == map_.end()) co_return Bytes();
    co_return it->second;
  }
  Reply OnDelete(RpcRequest r) {
    auto reader = Reader(r);
    CO_ASSIGN_OR_RETURN(std::string key, reader.GetString(options_.max_payload));
    bool existed = map_.erase(key) > 0;
    Changed(key);
    co_return Bytes{std::byte{existed ? uint8_t{1} : uint8_t{0}}};
  }

  TcpStoreServerOptions options_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_{io_.get_executor()};
  std::shared_ptr<net::RpcServer> rpc_;
  std::thread thread_;
  uint16_t port_ = 0;
  std::atomic<bool> stopped_{false};
  // On the io thread only:
  bool stopping_ = false;
  std::map<std::string, Bytes> map_;
  std::multimap<std::string, std::shared_ptr<asio::steady_timer>> waiters_;
  mutable std::mutex size_mu_;
  size_t size_ = 0;
};

class Client final : public Store {
 public:
  Client(std::string name, TcpStoreClientOptions options)
      : name_(std::move(name)), options_(options), thread_([this] { io_.run(); }) {}
  ~Client() override {
    if (rpc_) rpc_->Close();
    guard_.reset();
    asio::post(io_, [this] { rpc_.reset(); });
    auto until = MonoClock::now() + std::chrono::milliseconds(200);
    while (!io_.stopped() && MonoClock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    io_.stop();
    thread_.join();
  }

  Status Connect(const std::string& host, uint16_t port, Deadline deadline) {
    net::RpcClientOptions o;
    o.peer_name = name_;
    o.max_payload = 64u << 20;
    o.secret = options_.secret;
    ASSIGN_OR_RETURN(
        rpc_, net::BlockOn(io_.get_executor(), net::RpcClient::Connect(host, port, deadline, o)));
    return Status();
  }

  Status Set(std::string_view key, std::span<const std::byte> value, Deadline d) override {
    ByteWriter w;
    w.PutString(key);
    w.Put<uint32_t>(static_cast<uint32_t>(value.size()));
    w.PutBytes(value.data(), value.size());
    return Call(kSet, w, d).status();
  }
  Result<Bytes> Get(std::string_view key, Deadline d) override {
    ByteWriter w;
    w.Put<uint32_t>(WaitMs(d));
    w.PutString(key);
    ASSIGN_OR_RETURN(Frame f, Call(kGet, w, d));
    return std::move(f.payload);
  }
  Result<std::optional<Bytes>> TryGet(std::string_view key, Deadline d) override {
    ByteWriter w;
    w.PutString(key);
    ASSIGN_OR_RETURN(Frame f, Call(kTryGet, w, d));
    ByteReader r(f.payload, "store reply from " + name_);
    ASSIGN_OR_RETURN(uint8_t found, r.Get<uint8_t>());
    ASSIGN_OR_RETURN(uint32_t n, r.Get<uint32_t>());
    ASSIGN_OR_RETURN(auto value, r.GetBytes(n));
    if (!found) return std::optional<Bytes>();
    return std::optional<Bytes>(Bytes(value.begin(), value.end()));
  }
  Status Wait(std::span<const std::string> keys, Deadline d) override {
    ByteWriter w;
    w.Put<uint32_t>(WaitMs(d));
    w.Put<uint32_t>(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.PutString(k);
    return Call(kWait, w, d).status();
  }
  Result<int64_t> Add(std::string_view key, int64_t delta, Deadline d) override {
    ByteWriter w;
    w.PutString(key);
    w.Put<int64_t>(delta);
    ASSIGN_OR_RETURN(Frame f, Call(kAdd, w, d));
    ByteReader r(f.payload, "store reply from " + name_);
    return r.Get<int64_t>();
  }
  Result<Bytes> CompareAndSet(std::string_view key, std::optional<Bytes> expected,
                              std::span<const std::byte> desired, Deadline d) override {
    ByteWriter w;
    w.PutString(key);
    w.Put<uint8_t>(expected.has_value());
    w.Put<uint32_t>(expected ? static_cast<uint32_t>(expected->size()) : 0);
    if (expected) w.PutBytes(expected->data(), expected->size());
    w.Put<uint32_t>(static_cast<uint32_t>(desired.size()));
    w.PutBytes(desired.data(), desired.size());
    ASSIGN_OR_RETURN(Frame f, Call(kCompareAndSet, w, d));
    return std::move(f.payload);
  }
  Result<bool> Delete(std::string_view key, Deadline d) override {
    ByteWriter w;
    w.PutString(key);
    ASSIGN_OR_RETURN(Frame f, Call(kDelete, w, d));
    return !f.payload.empty() && f.payload[0] != std::byte{0};
  }

 private:
  Result<Frame> Call(uint16_t type, ByteWriter& w, Deadline d) {
    // The server answers a timed-out wait itself; give its answer time to arrive.
    Deadline call_deadline = Deadline::At(d.when() + options_.response_slack);
    return net::BlockOn(io_.get_executor(), rpc_->Call(type, w.bytes(), call_deadline));
  }

  std::string name_;
  TcpStoreClientOptions options_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_{io_.get_executor()};
  std::thread thread_;
  std::shared_ptr<net::RpcClient> rpc_;
};

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(TcpStoreServerOptions options) {
  auto server = std::make_unique<Server>(std::move(options));
  RETURN_IF_ERROR(server->Init());
  return std::unique_ptr<TcpStoreServer>(std::move(server));
}

Result<std::shared_ptr<Store>> ConnectTcpStore(const std::string& host, uint16_t port,
                                               Deadline deadline, TcpStoreClientOptions options) {
  auto client = std::make_shared<Client>("store at " + host + ":" + std::to_string(port), options);
  RETURN_IF_ERROR(client->Connect(host, port, deadline));
  return std::shared_ptr<Store>(std::move(client));
}

}  // namespace rt::comm
