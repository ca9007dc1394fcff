#include "elastic/membership/peer_links.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "base/log.h"
#include "base/net/rpc.h"

namespace rt::elastic::membership {
namespace asio = boost::asio;

namespace {
// Messages kept per peer while its connection is being made, and calls outstanding on one
// connection; beyond these, messages are dropped (a hung peer must not grow our memory).
constexpr size_t kMaxQueued = 64;
constexpr int kMaxInFlight = 64;
}  // namespace

Result<std::pair<std::string, uint16_t>> ParseAddress(const std::string& text, const char* what) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return InvalidArgument(std::string(what) + " '" + text + "' is not host:port");
  const std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  const unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (*end != '\0' || port > 65535)
    return InvalidArgument(std::string(what) + " '" + text + "' has a bad port");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return std::make_pair(host, static_cast<uint16_t>(port));
}

PeerLinks::PeerLinks(asio::any_io_executor executor,
                     std::shared_ptr<const net::ClusterSecret> secret, MembershipTiming timing,
                     std::function<void(NodeId)> on_unreachable)
    : executor_(std::move(executor)),
      secret_(std::move(secret)),
      timing_(timing),
      on_unreachable_(std::move(on_unreachable)) {}

void PeerLinks::Send(NodeId node, const std::string& address, std::vector<std::byte> payload) {
  if (closed_) return;
  Link& link = links_[address];
  if (link.client && !link.client->connected()) link.client.reset();
  if (link.client) {
    if (link.in_flight >= kMaxInFlight) {
      if (!link.full)
        LOG_WARN("membership: {} calls to {} are waiting for answers; dropping messages to it",
                 link.in_flight, address);
      link.full = true;
      return;
    }
    link.full = false;
    ++link.in_flight;
    asio::co_spawn(executor_, Call(address, node, link.client, std::move(payload)), asio::detached);
    return;
  }
  if (link.queue.size() < kMaxQueued) link.queue.push_back(std::move(payload));
  if (!link.connecting) {
    link.connecting = true;
    asio::co_spawn(executor_, Connect(address, node), asio::detached);
  }
}

asio::awaitable<void> PeerLinks::Connect(std::string address, NodeId node) {
  auto parsed = ParseAddress(address, "peer address");
  std::optional<Result<std::shared_ptr<net::RpcClient>>> client;
  if (!parsed.ok()) {
    client.emplace(parsed.status());
  } else {
    net::RpcClientOptions options;
    options.secret = secret_;
    options.peer_name = "membership peer " + std::to_string(node) + " at " + address;
    // A refused connection is retried only this long: a dead peer is reported quickly.
    client.emplace(co_await net::RpcClient::Connect(
        parsed->first, parsed->second, Deadline::After(timing_.connect_timeout), options));
  }
  Link& link = links_[address];
  link.connecting = false;
  if (closed_) {
    if (client->ok()) (**client)->Close();
    co_return;
  }
  if (!client->ok()) {
    NoteFailure(link, address, client->status());
    link.queue.clear();
    Failed(node);
    co_return;
  }
  link.client = **client;
  std::deque<std::vector<std::byte>> queued = std::move(link.queue);
  link.queue.clear();
  for (auto& payload : queued) Send(node, address, std::move(payload));
}

asio::awaitable<void> PeerLinks::Call(std::string address, NodeId node,
                                      std::shared_ptr<net::RpcClient> client,
                                      std::vector<std::byte> payload) {
  auto reply =
      co_await client->Call(kMembershipMessageType, payload, Deadline::After(timing_.send_timeout));
  Link& link = links_[address];
  --link.in_flight;
  if (closed_) co_return;
  if (reply.ok()) {
    NoteSuccess(link, address);
    co_return;
  }
  NoteFailure(link, address, reply.status());
  if (link.client == client) {
    client->Close();
    link.client.reset();
  }
  Failed(node);
}

void PeerLinks::NoteFailure(Link& link, const std::string& address, const Status& why) {
  if (link.failing) return;
  link.failing = true;
  link.failing_since = MonoClock::now();
  LOG_WARN("membership: cannot reach {}: {}", address, why.ToString());
}

void PeerLinks::NoteSuccess(Link& link, const std::string& address) {
  if (!link.failing) return;
  link.failing = false;
  LOG_INFO(
      "membership: reaches {} again, {} ms after it stopped answering", address,
      std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - link.failing_since)
          .count());
}

void PeerLinks::Failed(NodeId node) {
  if (node != 0 && on_unreachable_) on_unreachable_(node);
}

void PeerLinks::CloseAll() {
  closed_ = true;
  for (auto& [address, link] : links_) {
    if (link.client) link.client->Close();
    link.queue.clear();
  }
}

}  // namespace rt::elastic::membership
