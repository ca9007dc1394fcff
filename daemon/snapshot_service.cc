#include "daemon/snapshot_service.h"

#include <algorithm>
#include <optional>
#include <set>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/fault.h"
#include "base/log.h"
#include "ckpt/manifest.h"
#include "ckpt/storage/backends.h"
#include "daemon/control_api.h"
#include "daemon/node_config.h"
#include "daemon/snapshot_wire.h"

namespace rt::daemon {
namespace asio = boost::asio;
namespace {

// Largest file the memory tier accepts (a bound on what one put may make this daemon hold).
constexpr int64_t kMaxSnapshotFile = int64_t{1} << 40;
constexpr int64_t kMaxSnapshotCopies = 4;  // ckpt.memory_copies' bound

struct FileRef {
  uint64_t job = 0;
  std::string path;
  bool any = false;  // scope "any"/"origin" (a worker's call) rather than "local"/"replica"
};

// The job, path and scope fields shared by the four requests; `path` may be empty (the root)
// only when `allow_root`.
Result<FileRef> ParseRef(const Json& head, const char* path_key, bool allow_root,
                         const char* any_scope, const char* local_scope, std::string_view what) {
  FileRef ref;
  ASSIGN_OR_RETURN(const int64_t job, IntField(head, "job", 0, INT64_MAX, what));
  ref.job = static_cast<uint64_t>(job);
  ASSIGN_OR_RETURN(ref.path, StringField(head, path_key, what));
  RETURN_IF_ERROR(ckpt::internal::CheckPath(ref.path, allow_root).WithContext(what));
  ASSIGN_OR_RETURN(const std::string scope, StringField(head, "scope", what));
  if (scope != any_scope && scope != local_scope)
    return InvalidArgument(std::string(what) + ": scope '" + scope + "' is neither '" + any_scope +
                           "' nor '" + local_scope + "'");
  ref.any = scope == any_scope;
  return ref;
}

std::span<const std::byte> AsBytes(const std::vector<uint8_t>& v, size_t offset, size_t n) {
  return {reinterpret_cast<const std::byte*>(v.data()) + offset, n};
}

}  // namespace

std::shared_ptr<SnapshotService> SnapshotService::Create(asio::any_io_executor executor,
                                                         SnapshotServiceOptions options) {
  return std::shared_ptr<SnapshotService>(
      new SnapshotService(std::move(executor), std::move(options)));
}

SnapshotService::SnapshotService(asio::any_io_executor executor, SnapshotServiceOptions options)
    : executor_(std::move(executor)), options_(std::move(options)) {}

void SnapshotService::Register(net::RpcServer& server) {
  using Handler = asio::awaitable<Result<Payload>> (SnapshotService::*)(std::span<const std::byte>);
  auto bind = [this](Handler h) -> net::RpcHandler {
    return [self = shared_from_this(), h](net::RpcRequest r) -> asio::awaitable<Result<Payload>> {
      co_return co_await ((*self).*h)(r.payload);
    };
  };
  server.Handle(kSnapshotPut, bind(&SnapshotService::HandlePut));
  server.Handle(kSnapshotGet, bind(&SnapshotService::HandleGet));
  server.Handle(kSnapshotList, bind(&SnapshotService::HandleList));
  server.Handle(kSnapshotRemove, bind(&SnapshotService::HandleRemove));
}

Json SnapshotService::Report() const {
  return {{"bytes", store_.bytes()},
          {"files", store_.files()},
          {"uploads", uploads_.size()},
          {"upload_bytes", upload_bytes_}};
}

void SnapshotService::Close() {
  for (auto& [address, client] : peers_) client->Close();
  peers_.clear();
}

std::vector<SnapshotPeer> SnapshotService::Others() const {
  std::vector<SnapshotPeer> members = options_.members();
  std::sort(members.begin(), members.end(),
            [](const SnapshotPeer& a, const SnapshotPeer& b) { return a.id < b.id; });
  // Ring order from this node's successor: the members after it by id, then those before it.
  auto after = std::upper_bound(members.begin(), members.end(), options_.self,
                                [](uint64_t id, const SnapshotPeer& m) { return id < m.id; });
  std::vector<SnapshotPeer> out(after, members.end());
  for (auto it = members.begin(); it != after; ++it)
    if (it->id != options_.self) out.push_back(*it);
  return out;
}

asio::awaitable<Result<SnapshotService::Payload>> SnapshotService::CallPeer(
    const SnapshotPeer& peer, uint16_t type, Payload payload, std::chrono::milliseconds timeout) {
  const Deadline deadline = Deadline::After(timeout);
  std::shared_ptr<net::RpcClient> client;
  auto it = peers_.find(peer.address);
  if (it != peers_.end() && it->second->connected()) client = it->second;
  if (client == nullptr) {
    CO_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(peer.address, "member address"));
    net::RpcClientOptions o;
    o.secret = options_.secret;
    o.peer_name = "node " + std::to_string(peer.id) + " at " + peer.address;
    CO_ASSIGN_OR_RETURN(client, co_await net::RpcClient::Connect(
                                    host_port.first, host_port.second,
                                    deadline.Min(Deadline::After(options_.connect_timeout)), o));
    // Another call may have connected meanwhile: the newest connection serves the next calls.
    peers_[peer.address] = client;
  }
  Result<Frame> reply = co_await client->Call(type, payload, deadline);
  if (!reply.ok() && (reply.status().code() == StatusCode::kDeadlineExceeded ||
                      reply.status().code() == StatusCode::kUnavailable)) {
    // No answer: the connection may be stalled (a partition, a stopped process) and TCP would
    // keep later calls queued behind it; the next call connects anew.
    if (auto at = peers_.find(peer.address); at != peers_.end() && at->second == client)
      peers_.erase(at);
    client->Close();
  }
  if (!reply.ok()) co_return reply.status();
  co_return std::move(reply->payload);
}

asio::awaitable<std::vector<Result<SnapshotService::Payload>>> SnapshotService::CallEach(
    const std::vector<SnapshotPeer>& peers, uint16_t type, Payload payload) {
  std::vector<Result<Payload>> results;
  if (peers.empty()) co_return results;
  auto executor = co_await asio::this_coro::executor;
  auto call = [this, type,
               &payload](SnapshotPeer peer) -> asio::awaitable<std::optional<Result<Payload>>> {
    co_return co_await CallPeer(peer, type, payload, options_.control_timeout);
  };
  using Call = decltype(asio::co_spawn(executor, call(peers.front()), asio::deferred));
  std::vector<Call> calls;
  for (const SnapshotPeer& peer : peers)
    calls.push_back(asio::co_spawn(executor, call(peer), asio::deferred));
  auto [order, exceptions, replies] =
      co_await asio::experimental::make_parallel_group(std::move(calls))
          .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
  for (size_t i = 0; i < replies.size(); ++i) {
    if (exceptions[i]) std::rethrow_exception(exceptions[i]);  // a bug, not an error
    results.push_back(std::move(*replies[i]));
  }
  co_return results;
}

asio::awaitable<Status> SnapshotService::Replicate(const SnapshotPeer& peer, uint64_t job,
                                                   const std::string& path, SnapshotBytes bytes) {
  const std::string upload =
      "r" + std::to_string(options_.self) + "." + std::to_string(next_upload_++);
  size_t offset = 0;
  do {
    const size_t n = std::min(kSnapshotPieceBytes, bytes->size() - offset);
    Json head = {{"job", job},       {"path", path},           {"upload", upload},
                 {"offset", offset}, {"total", bytes->size()}, {"scope", "replica"}};
    Result<Payload> r = co_await CallPeer(
        peer, kSnapshotPut, EncodeSnapshotMessage(std::move(head), AsBytes(*bytes, offset, n)),
        options_.peer_timeout);
    CO_RETURN_IF_ERROR(r.status().WithContext("memory tier: replicate job " + std::to_string(job) +
                                              " file " + path + " to node " +
                                              std::to_string(peer.id)));
    offset += n;
  } while (offset < bytes->size());
  co_return Status();
}

asio::awaitable<Result<SnapshotService::Payload>> SnapshotService::HandlePut(
    std::span<const std::byte> payload) {
  CO_ASSIGN_OR_RETURN(SnapshotMessage m, DecodeSnapshotMessage(payload, "snapshot put"));
  CO_ASSIGN_OR_RETURN(FileRef ref,
                      ParseRef(m.head, "path", false, "origin", "replica", "snapshot put"));
  CO_ASSIGN_OR_RETURN(std::string upload, StringField(m.head, "upload", "snapshot put"));
  CO_ASSIGN_OR_RETURN(const int64_t offset,
                      IntField(m.head, "offset", 0, kMaxSnapshotFile, "snapshot put"));
  CO_ASSIGN_OR_RETURN(const int64_t total,
                      IntField(m.head, "total", 0, kMaxSnapshotFile, "snapshot put"));
  CO_ASSIGN_OR_RETURN(const int64_t copies,
                      IntField(m.head, "copies", 1, kMaxSnapshotCopies, "snapshot put", 1));
  // Forget uploads whose writer went away.
  const MonoTime now = MonoClock::now();
  for (auto it = uploads_.begin(); it != uploads_.end();) {
    if (now - it->second.touched < options_.upload_timeout) {
      ++it;
      continue;
    }
    LOG_WARN("memory tier: dropping the unfinished put {}", it->first);
    upload_bytes_ -= it->second.data.size();
    it = uploads_.erase(it);
  }
  // A member that takes copies from others: `crash` kills it while a put is being forwarded to
  // it, `error` makes it refuse copies (unreachable while still in the view).
  if (!ref.any) CO_RETURN_IF_ERROR(RT_FAULT_POINT("daemon.snapshot.replica_put"));
  const std::string key = upload + "/" + std::to_string(ref.job) + "/" + ref.path;
  Upload& u = uploads_[key];
  u.touched = now;
  const std::string file = "job " + std::to_string(ref.job) + " file " + ref.path;
  if (static_cast<uint64_t>(offset) != u.data.size() ||
      u.data.size() + m.body.size() > static_cast<uint64_t>(total)) {
    const std::string got = std::to_string(u.data.size());
    upload_bytes_ -= u.data.size();
    uploads_.erase(key);
    co_return InvalidArgument("snapshot put of " + file + ": a piece of " +
                              std::to_string(m.body.size()) + " bytes at offset " +
                              std::to_string(offset) + " does not follow the " + got +
                              " bytes received of " + std::to_string(total));
  }
  const auto* body = reinterpret_cast<const uint8_t*>(m.body.data());
  u.data.insert(u.data.end(), body, body + m.body.size());
  upload_bytes_ += m.body.size();
  if (u.data.size() < static_cast<uint64_t>(total)) co_return EncodeSnapshotMessage(Json::object());
  auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(u.data));
  upload_bytes_ -= bytes->size();
  uploads_.erase(key);
  CO_RETURN_IF_ERROR(store_.Put(ref.job, ref.path, bytes));
  if (ref.any)
    CO_RETURN_IF_ERROR(co_await CopyToOthers(ref.job, ref.path, bytes, static_cast<int>(copies)));
  co_return EncodeSnapshotMessage(Json::object());
}

asio::awaitable<Status> SnapshotService::CopyToOthers(uint64_t job, const std::string& path,
                                                      SnapshotBytes bytes, int copies) {
  const std::vector<SnapshotPeer> others = Others();
  if (others.empty()) co_return Status();  // a view of one: its memory is all there is
  const bool shared = IsSharedSnapshotFile(path);
  Status first_error;
  int taken = 0;
  for (const SnapshotPeer& peer : others) {
    Status s = co_await Replicate(peer, job, path, bytes);
    if (s.ok()) {
      // A file of one rank needs `copies` copies: on the successors, or on the next members
      // after them when one cannot be reached (it died, and the view does not know yet).
      if (++taken == copies && !shared) break;
      continue;
    }
    LOG_WARN("{}{}", s.ToString(), shared ? "" : "; trying the next member");
    if (first_error.ok()) first_error = s;
  }
  if (taken == 0)
    co_return first_error.WithContext("memory tier: no other live member holds job " +
                                      std::to_string(job) + " file " + path);
  if (taken < copies && !shared && others.size() >= static_cast<size_t>(copies))
    LOG_WARN("memory tier: job {} file {} has {} of its {} copies on other members", job, path,
             taken, copies);
  co_return Status();
}

asio::awaitable<Result<SnapshotService::Payload>> SnapshotService::HandleGet(
    std::span<const std::byte> payload) {
  CO_ASSIGN_OR_RETURN(SnapshotMessage m, DecodeSnapshotMessage(payload, "snapshot get"));
  CO_ASSIGN_OR_RETURN(FileRef ref, ParseRef(m.head, "path", false, "any", "local", "snapshot get"));
  CO_ASSIGN_OR_RETURN(const int64_t offset,
                      IntField(m.head, "offset", 0, kMaxSnapshotFile, "snapshot get"));
  CO_ASSIGN_OR_RETURN(const int64_t length,
                      IntField(m.head, "length", 0, kSnapshotPieceBytes, "snapshot get"));
  const std::string file = "job " + std::to_string(ref.job) + " file " + ref.path;
  SnapshotBytes bytes = store_.Get(ref.job, ref.path);
  if (ref.any && ref.path == ckpt::kLatestFile) {
    // Every rank must see the same `latest`: the newest any live member holds (a member may
    // have missed the last update when its writer died while forwarding it).
    CO_ASSIGN_OR_RETURN(bytes, co_await NewestLatest(ref.job, std::move(bytes)));
  } else if (bytes == nullptr && ref.any) {
    Json head = m.head;
    head["scope"] = "local";
    for (const SnapshotPeer& peer : Others()) {
      Result<Payload> r =
          co_await CallPeer(peer, kSnapshotGet, EncodeSnapshotMessage(head), options_.peer_timeout);
      if (r.ok() || r.status().code() == StatusCode::kOutOfRange) co_return r;
      if (r.status().code() != StatusCode::kNotFound)
        LOG_WARN("memory tier: get {} from node {}: {}", file, peer.id, r.status().ToString());
    }
  }
  if (bytes == nullptr)
    co_return NotFound("memory tier: " + file +
                       (ref.any ? " is held by no live member" : " is not held here"));
  if (static_cast<uint64_t>(offset) > bytes->size())
    co_return OutOfRange("memory tier: " + file + " is " + std::to_string(bytes->size()) +
                         " bytes, a read at " + std::to_string(offset) + " runs past its end");
  const size_t n = std::min<size_t>(static_cast<size_t>(length), bytes->size() - offset);
  co_return EncodeSnapshotMessage({{"size", bytes->size()}},
                                  AsBytes(*bytes, static_cast<size_t>(offset), n));
}

asio::awaitable<Result<SnapshotBytes>> SnapshotService::NewestLatest(uint64_t job,
                                                                     SnapshotBytes mine) {
  auto newest_step = [](const SnapshotBytes& b) -> int64_t {
    if (b == nullptr) return -1;
    Result<std::vector<int64_t>> steps = ckpt::DecodeLatest(*b);
    return steps.ok() && !steps->empty() ? steps->front() : -1;
  };
  SnapshotBytes best = std::move(mine);
  Json head = {{"job", job},
               {"path", ckpt::kLatestFile},
               {"offset", 0},
               {"length", kSnapshotPieceBytes},
               {"scope", "local"}};
  const std::vector<SnapshotPeer> others = Others();
  std::vector<Result<Payload>> replies =
      co_await CallEach(others, kSnapshotGet, EncodeSnapshotMessage(head));
  for (size_t i = 0; i < others.size(); ++i) {
    const uint64_t peer = others[i].id;
    Result<Payload>& r = replies[i];
    if (!r.ok()) {
      if (r.status().code() != StatusCode::kNotFound)
        LOG_WARN("memory tier: get job {} latest from node {}: {}", job, peer,
                 r.status().ToString());
      continue;
    }
    Result<SnapshotMessage> m =
        DecodeSnapshotMessage(*r, "latest from node " + std::to_string(peer));
    if (!m.ok()) {
      LOG_WARN("memory tier: {}", m.status().ToString());
      continue;
    }
    const auto* p = reinterpret_cast<const uint8_t*>(m->body.data());
    auto theirs = std::make_shared<const std::vector<uint8_t>>(p, p + m->body.size());
    if (newest_step(theirs) > newest_step(best)) best = std::move(theirs);
  }
  co_return best;
}

asio::awaitable<Result<SnapshotService::Payload>> SnapshotService::HandleList(
    std::span<const std::byte> payload) {
  CO_ASSIGN_OR_RETURN(SnapshotMessage m, DecodeSnapshotMessage(payload, "snapshot list"));
  CO_ASSIGN_OR_RETURN(FileRef ref, ParseRef(m.head, "dir", true, "any", "local", "snapshot list"));
  const std::vector<std::string> mine = store_.List(ref.job, ref.path);
  std::set<std::string> names(mine.begin(), mine.end());
  if (ref.any) {
    Json head = m.head;
    head["scope"] = "local";
    const std::vector<SnapshotPeer> others = Others();
    std::vector<Result<Payload>> replies =
        co_await CallEach(others, kSnapshotList, EncodeSnapshotMessage(head));
    for (size_t i = 0; i < others.size(); ++i) {
      Result<SnapshotMessage> reply =
          replies[i].ok() ? DecodeSnapshotMessage(*replies[i], "snapshot list reply")
                          : Result<SnapshotMessage>(replies[i].status());
      const Json* list = nullptr;
      if (reply.ok() && reply->head.contains("names") && reply->head["names"].is_array())
        list = &reply->head["names"];
      if (list == nullptr) {
        LOG_WARN("memory tier: list job {} '{}' on node {}: {}", ref.job, ref.path, others[i].id,
                 reply.ok() ? "reply without names" : reply.status().ToString());
        continue;
      }
      for (const Json& name : *list)
        if (name.is_string()) names.insert(name.get<std::string>());
    }
  }
  co_return EncodeSnapshotMessage(
      {{"names", std::vector<std::string>(names.begin(), names.end())}});
}

asio::awaitable<Result<SnapshotService::Payload>> SnapshotService::HandleRemove(
    std::span<const std::byte> payload) {
  CO_ASSIGN_OR_RETURN(SnapshotMessage m, DecodeSnapshotMessage(payload, "snapshot remove"));
  CO_ASSIGN_OR_RETURN(FileRef ref,
                      ParseRef(m.head, "path", false, "any", "local", "snapshot remove"));
  store_.Remove(ref.job, ref.path);
  if (ref.any) {
    Json head = m.head;
    head["scope"] = "local";
    const std::vector<SnapshotPeer> others = Others();
    std::vector<Result<Payload>> replies =
        co_await CallEach(others, kSnapshotRemove, EncodeSnapshotMessage(head));
    for (size_t i = 0; i < others.size(); ++i)
      if (!replies[i].ok())
        LOG_WARN("memory tier: remove job {} {} on node {}: {}", ref.job, ref.path, others[i].id,
                 replies[i].status().ToString());
  }
  co_return EncodeSnapshotMessage(Json::object());
}

}  // namespace rt::daemon
