#include "daemon/control_api.h"

#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "daemon/node_config.h"

namespace rt::daemon {
namespace asio = boost::asio;

std::vector<std::byte> EncodeJson(const Json& value) {
  const std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  auto p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

Result<Json> DecodeJsonObject(std::span<const std::byte> payload, std::string_view what) {
  if (payload.size() > kMaxControlPayload)
    return InvalidArgument(std::string(what) + ": payload of " + std::to_string(payload.size()) +
                           " bytes is over the limit");
  const auto* p = reinterpret_cast<const char*>(payload.data());
  Json j = Json::parse(p, p + payload.size(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(std::string(what) + ": payload is not JSON");
  if (!j.is_object()) return InvalidArgument(std::string(what) + ": payload is not an object");
  return j;
}

Result<int64_t> IntField(const Json& object, const char* key, int64_t min, int64_t max,
                         std::string_view what, std::optional<int64_t> fallback) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (fallback) return *fallback;
    return InvalidArgument(std::string(what) + ": no '" + key + "'");
  }
  if (!it->is_number_integer())
    return InvalidArgument(std::string(what) + ": '" + key + "' is not an integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return InvalidArgument(std::string(what) + ": '" + key + "' is out of range");
  const int64_t v = it->get<int64_t>();
  if (v < min || v > max)
    return InvalidArgument(std::string(what) + ": '" + key + "' = " + std::to_string(v) +
                           " is outside " + std::to_string(min) + ".." + std::to_string(max));
  return v;
}

Result<std::string> StringField(const Json& object, const char* key, std::string_view what,
                                std::optional<std::string> fallback) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (fallback) return *fallback;
    return InvalidArgument(std::string(what) + ": no '" + key + "'");
  }
  if (!it->is_string())
    return InvalidArgument(std::string(what) + ": '" + key + "' is not a string");
  return it->get<std::string>();
}

asio::awaitable<Result<Json>> CallJson(net::RpcClient& client, uint16_t type, const Json& request,
                                       Deadline deadline) {
  const std::vector<std::byte> payload = EncodeJson(request);
  CO_ASSIGN_OR_RETURN(Frame reply, co_await client.Call(type, payload, deadline));
  co_return DecodeJsonObject(reply.payload, "response from " + client.peer());
}

asio::awaitable<Result<Json>> CallJsonOnce(std::string address,
                                           std::shared_ptr<const net::ClusterSecret> secret,
                                           uint16_t type, Json request, Deadline deadline) {
  CO_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(address, "daemon address"));
  net::RpcClientOptions options;
  options.secret = std::move(secret);
  options.peer_name = "daemon at " + address;
  CO_ASSIGN_OR_RETURN(
      std::shared_ptr<net::RpcClient> client,
      co_await net::RpcClient::Connect(host_port.first, host_port.second, deadline, options));
  Result<Json> reply = co_await CallJson(*client, type, request, deadline);
  client->Close();
  co_return reply;
}

Result<Json> CallJsonBlocking(const std::string& address,
                              std::shared_ptr<const net::ClusterSecret> secret, uint16_t type,
                              const Json& request, Deadline deadline) {
  asio::io_context io;
  std::optional<Result<Json>> result;
  auto run = [&]() -> asio::awaitable<void> {
    result.emplace(co_await CallJsonOnce(address, secret, type, request, deadline));
  };
  asio::co_spawn(io, run(), asio::detached);
  io.run();
  if (!result) return Internal("call to " + address + " did not complete");
  return std::move(*result);
}

}  // namespace rt::daemon
