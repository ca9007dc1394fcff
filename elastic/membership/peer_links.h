// Outgoing membership messages: one RpcClient per peer address, connected on first use, with a
// short queue while it connects. A message that cannot be delivered (refused, broken, timed out)
// is dropped — the protocol tolerates loss — and the peer is reported unreachable, which is how
// a killed daemon is noticed within a ping period. Runs on one executor; not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/deadline.h"
#include "base/status.h"
#include "elastic/membership.h"

namespace rt::net {
class RpcClient;
}

namespace rt::elastic::membership {

// The RPC frame type of a membership message (a one-way call: the reply is empty).
inline constexpr uint16_t kMembershipMessageType = 0x0D01;

class PeerLinks {
 public:
  // `on_unreachable(node)` is called on the executor when a message to `node` failed.
  PeerLinks(boost::asio::any_io_executor executor, std::shared_ptr<const net::ClusterSecret> secret,
            MembershipTiming timing, std::function<void(NodeId)> on_unreachable);

  // Sends an encoded message to `address`; `node` is reported unreachable on failure (0: the
  // address is a seed of unknown id, nobody is told).
  void Send(NodeId node, const std::string& address, std::vector<std::byte> payload);
  // Closes every connection and drops every queued message; later sends are dropped.
  void CloseAll();

 private:
  struct Link {
    std::shared_ptr<net::RpcClient> client;
    bool connecting = false;
    int in_flight = 0;
    std::deque<std::vector<std::byte>> queue;  // while connecting
    bool failing = false;                      // the last attempt failed (logged once)
    MonoTime failing_since;
    bool full = false;  // messages are being dropped: kMaxInFlight calls in flight (logged once)
  };
  boost::asio::awaitable<void> Connect(std::string address, NodeId node);
  boost::asio::awaitable<void> Call(std::string address, NodeId node,
                                    std::shared_ptr<net::RpcClient> client,
                                    std::vector<std::byte> payload);
  void Failed(NodeId node);
  // Logs when `address` stops being reachable (`why`), once, and when it is reachable again.
  void NoteFailure(Link& link, const std::string& address, const Status& why);
  void NoteSuccess(Link& link, const std::string& address);

  boost::asio::any_io_executor executor_;
  std::shared_ptr<const net::ClusterSecret> secret_;
  MembershipTiming timing_;
  std::function<void(NodeId)> on_unreachable_;
  std::map<std::string, Link> links_;
  bool closed_ = false;
};

// Splits "host:port". Errors: InvalidArgument naming `what` and the text.
Result<std::pair<std::string, uint16_t>> ParseAddress(const std::string& text, const char* what);

}  // namespace rt::elastic::membership
