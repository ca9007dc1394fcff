#include "elastic/membership/etcd_client.h"

#include <charconv>

#include <openssl/evp.h>

#include "base/net/http_client.h"

namespace rt::elastic::etcd {
namespace asio = boost::asio;
using Json = nlohmann::json;

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * (text.size() / 4), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the bytes of the padding ('=') as zeros: drop them.
  size_t length = static_cast<size_t>(n);
  for (size_t i = text.size(); i > 0 && text[i - 1] == '='; --i) --length;
  out.resize(length);
  return out;
}

namespace {

// etcd writes 64-bit numbers as JSON strings; absent fields are zero.
int64_t Int64Field(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return 0;
  const std::string& s = it->get_ref<const std::string&>();
  int64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// The Status for a gRPC error code (google.rpc.Code) that etcd reports.
Status GrpcError(int64_t code, const std::string& message) {
  const std::string text = "etcd: " + message;
  switch (code) {
    case 3:
      return InvalidArgument(text);
    case 4:
      return DeadlineExceeded(text);
    case 5:
      return NotFound(text);
    case 9:
      return FailedPrecondition(text);
    case 14:
      return Status(StatusCode::kUnavailable, text, /*retryable=*/true);
    default:
      return Internal(text + " (gRPC code " + std::to_string(code) + ")");
  }
}

// The key just past every key that starts with `prefix` (etcd's range_end for a prefix).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xFF) {
      prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

}  // namespace

Result<Client> Client::Create(const std::string& endpoint) {
  const std::string scheme = "http://";
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("etcd endpoint '" + endpoint + "': " + why +
                           " (expected http://HOST:PORT)");
  };
  if (endpoint.rfind(scheme, 0) != 0) return bad("not an http:// URL");
  std::string rest = endpoint.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no host:port");
  const std::string host = rest.substr(0, colon), port_text = rest.substr(colon + 1);
  int port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535)
    return bad("bad port '" + port_text + "'");
  if (host.find('/') != std::string::npos) return bad("a path is not allowed");
  return Client(endpoint, host, static_cast<uint16_t>(port));
}

asio::awaitable<Result<Json>> Client::Post(std::string path, Json body, Deadline deadline) const {
  net::HttpCallRequest request;
  request.method = "POST";
  request.host = host_;
  request.port = port_;
  request.target = path;
  request.body = body.dump();
  request.max_body_bytes = 16ull << 20;
  Result<net::HttpResponse> response = co_await net::HttpCall(std::move(request), deadline);
  if (!response.ok()) co_return response.status().WithContext("etcd at " + endpoint_);
  Json answer = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (answer.is_discarded() || !answer.is_object())
    co_return Status(StatusCode::kProtocolError, "etcd at " + endpoint_ + path +
                                                     ": answer is not a JSON object (HTTP " +
                                                     std::to_string(response->status) + ")");
  if (answer.contains("error") || answer.contains("code")) {
    const std::string message = answer.contains("message") && answer["message"].is_string()
                                    ? answer["message"].get<std::string>()
                                    : answer.dump();
    co_return GrpcError(Int64Field(answer, "code"), message + " (" + endpoint_ + path + ")");
  }
  if (response->status != 200)
    co_return Unavailable("etcd at " + endpoint_ + path + ": HTTP " +
                          std::to_string(response->status));
  co_return answer;
}

asio::awaitable<Result<std::vector<KeyValue>>> Client::RangePrefix(std::string prefix,
                                                                   Deadline deadline) const {
  const Json body = {{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))}};
  CO_ASSIGN_OR_RETURN(Json answer, co_await Post("/v3/kv/range", body, deadline));
  std::vector<KeyValue> out;
  if (!answer.contains("kvs")) co_return out;
  if (!answer["kvs"].is_array())
    co_return Status(StatusCode::kProtocolError, "etcd range: 'kvs' is not an array");
  for (const Json& kv : answer["kvs"]) {
    std::optional<std::string> key = Base64Decode(kv.value("key", ""));
    std::optional<std::string> value = Base64Decode(kv.value("value", ""));
    if (!key || !value)
      co_return Status(StatusCode::kProtocolError, "etcd range: a key or value is not base64");
    out.push_back({std::move(*key), std::move(*value), Int64Field(kv, "mod_revision"),
                   Int64Field(kv, "lease")});
  }
  co_return out;
}

asio::awaitable<Status> Client::Put(std::string key, std::string value, int64_t lease,
                                    Deadline deadline) const {
  Json body = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  Result<Json> answer = co_await Post("/v3/kv/put", body, deadline);
  co_return answer.status();
}

asio::awaitable<Result<bool>> Client::Txn(std::vector<ModRevisionIs> conditions,
                                          std::vector<TxnWrite> writes, Deadline deadline) const {
  Json compare = Json::array();
  for (const ModRevisionIs& c : conditions)
    compare.push_back({{"key", Base64Encode(c.key)},
                       {"target", "MOD"},
                       {"result", "EQUAL"},
                       {"mod_revision", std::to_string(c.mod_revision)}});
  Json success = Json::array();
  for (const TxnWrite& w : writes) {
    if (w.erase) {
      success.push_back({{"requestDeleteRange", {{"key", Base64Encode(w.key)}}}});
      continue;
    }
    Json put = {{"key", Base64Encode(w.key)}, {"value", Base64Encode(w.value)}};
    if (w.lease != 0) put["lease"] = std::to_string(w.lease);
    success.push_back({{"requestPut", std::move(put)}});
  }
  // (Named, not braced in the co_await: GCC 12 miscompiles initializer lists in coroutines.)
  const Json body = {{"compare", compare}, {"success", success}};
  CO_ASSIGN_OR_RETURN(Json answer, co_await Post("/v3/kv/txn", body, deadline));
  co_return answer.value("succeeded", false);
}

asio::awaitable<Result<std::pair<int64_t, int64_t>>> Client::GrantLease(int64_t ttl_s,
                                                                        Deadline deadline) const {
  const Json body = {{"TTL", std::to_string(ttl_s)}};
  CO_ASSIGN_OR_RETURN(Json answer, co_await Post("/v3/lease/grant", body, deadline));
  const int64_t id = Int64Field(answer, "ID");
  if (id == 0) co_return Status(StatusCode::kProtocolError, "etcd lease grant: no lease ID");
  co_return std::make_pair(id, Int64Field(answer, "TTL"));
}

asio::awaitable<Result<int64_t>> Client::KeepAlive(int64_t lease, Deadline deadline) const {
  const Json body = {{"ID", std::to_string(lease)}};
  CO_ASSIGN_OR_RETURN(Json answer, co_await Post("/v3/lease/keepalive", body, deadline));
  // The gateway streams: one {"result": {...}} per request; an expired lease has no TTL.
  const Json result = answer.contains("result") ? answer["result"] : answer;
  co_return Int64Field(result, "TTL");
}

asio::awaitable<Status> Client::RevokeLease(int64_t lease, Deadline deadline) const {
  const Json body = {{"ID", std::to_string(lease)}};
  Result<Json> answer = co_await Post("/v3/lease/revoke", body, deadline);
  if (answer.status().code() == StatusCode::kNotFound) co_return Status();
  co_return answer.status();
}

}  // namespace rt::elastic::etcd
