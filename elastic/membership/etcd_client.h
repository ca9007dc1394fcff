// A small client of etcd's v3 API through its JSON gateway (HTTP POST of JSON to /v3/...; keys
// and values travel base64-encoded): ranges, puts, compare-and-swap transactions and leases,
// each one request on its own connection with a deadline (base/net/http_client.h). What the
// etcd membership service (etcd_service.cc) needs, nothing more.
//
// Thread safety: the object is immutable; call its coroutines on any executor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "base/deadline.h"
#include "base/status.h"

namespace rt::elastic::etcd {

// One key-value pair as etcd returns it.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;  // revision of its last change
  int64_t lease = 0;         // lease it is attached to, 0 = none
};

// One condition of a transaction: the key's mod_revision equals `mod_revision` (0: the key does
// not exist).
struct ModRevisionIs {
  std::string key;
  int64_t mod_revision = 0;
};

// One write of a transaction's success branch: a put (with `lease` when not 0) or, when
// `erase`, a delete of `key`.
struct TxnWrite {
  std::string key;
  std::string value;
  int64_t lease = 0;
  bool erase = false;
};

class Client {
 public:
  // `endpoint`: "http://host:port" of an etcd client URL. Errors: InvalidArgument naming the
  // endpoint when it is not of that form (https is not supported).
  static Result<Client> Create(const std::string& endpoint);

  const std::string& endpoint() const { return endpoint_; }

  // Every key starting with `prefix`, sorted by key.
  boost::asio::awaitable<Result<std::vector<KeyValue>>> RangePrefix(std::string prefix,
                                                                    Deadline deadline) const;
  // Puts `key` = `value`, attached to `lease` when not 0. NotFound when the lease has expired.
  boost::asio::awaitable<Status> Put(std::string key, std::string value, int64_t lease,
                                     Deadline deadline) const;
  // If every condition holds, applies `writes` atomically and returns true; else changes
  // nothing and returns false.
  boost::asio::awaitable<Result<bool>> Txn(std::vector<ModRevisionIs> conditions,
                                           std::vector<TxnWrite> writes, Deadline deadline) const;
  // A new lease of `ttl_s` seconds (etcd may raise it to its minimum); returns its id and TTL.
  boost::asio::awaitable<Result<std::pair<int64_t, int64_t>>> GrantLease(int64_t ttl_s,
                                                                         Deadline deadline) const;
  // Renews `lease`; returns its remaining TTL in seconds, 0 when it has expired or was revoked.
  boost::asio::awaitable<Result<int64_t>> KeepAlive(int64_t lease, Deadline deadline) const;
  // Revokes `lease` (its keys are deleted). Revoking a lease that is gone is not an error.
  boost::asio::awaitable<Status> RevokeLease(int64_t lease, Deadline deadline) const;

 private:
  Client(std::string endpoint, std::string host, uint16_t port)
      : endpoint_(std::move(endpoint)), host_(std::move(host)), port_(port) {}
  // POSTs `body` to `path` ("/v3/kv/range") and returns the decoded JSON answer. Errors:
  // Unavailable (etcd unreachable, or an HTTP status other than 200 that is not a gRPC error),
  // the gRPC error etcd reports mapped to a Status ("etcd: MESSAGE"), DeadlineExceeded,
  // ProtocolError for an answer that is not JSON.
  boost::asio::awaitable<Result<nlohmann::json>> Post(std::string path, nlohmann::json body,
                                                      Deadline deadline) const;

  std::string endpoint_;
  std::string host_;
  uint16_t port_ = 0;
};

// Base64 (RFC 4648, with padding), as the gateway writes keys and values.
std::string Base64Encode(std::string_view bytes);
// Decodes base64; nullopt when `text` is not valid base64.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace rt::elastic::etcd
