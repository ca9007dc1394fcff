// The rendezvous Store: a small key/value service that ranks use to find each other
// (bootstrap addresses, unique ids, barriers). comm declares the interface; comm provides an
// in-memory store (threads in one process) and a TCP store (a server and a client on
// base/net); the daemon provides its own implementation later (STYLE.md rule 1).
//
// Keys are scoped by job and generation (ScopedStore, StoreScope) so that a communicator of a
// new generation never reads an old generation's keys.
//
// Every call takes a deadline and returns DeadlineExceeded (naming the key) when it passes.
// Implementations are thread-safe: any number of threads may call one Store at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"

namespace rt::net {
class ClusterSecret;
}

namespace rt::comm {

using Bytes = std::vector<std::byte>;

// A key/value rendezvous store. Thread-safe.
class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing an earlier value, and wakes waiters on `key`.
  virtual Status Set(std::string_view key, std::span<const std::byte> value, Deadline deadline) = 0;

  // Waits until `key` exists, then returns its value. DeadlineExceeded names the key.
  virtual Result<Bytes> Get(std::string_view key, Deadline deadline) = 0;

  // Returns the value of `key` now, or std::nullopt when it does not exist (no waiting).
  virtual Result<std::optional<Bytes>> TryGet(std::string_view key, Deadline deadline) = 0;

  // Waits until every key in `keys` exists. DeadlineExceeded names the missing keys.
  virtual Status Wait(std::span<const std::string> keys, Deadline deadline) = 0;

  // Adds `delta` to the integer counter at `key` (a missing key counts as 0) and returns the new
  // value. A key holding a value that is not a counter is an InvalidArgument.
  virtual Result<int64_t> Add(std::string_view key, int64_t delta, Deadline deadline) = 0;

  // Atomically: if the current value of `key` equals `expected` (a missing key equals
  // std::nullopt), sets it to `desired`. Returns the value after the call either way, so the
  // caller compares it with `desired` to learn whether it won.
  virtual Result<Bytes> CompareAndSet(std::string_view key, std::optional<Bytes> expected,
                                      std::span<const std::byte> desired, Deadline deadline) = 0;

  // Deletes `key`; returns whether it existed.
  virtual Result<bool> Delete(std::string_view key, Deadline deadline) = 0;
};

// Convenience for string values.
Bytes ToBytes(std::string_view s);
std::string ToString(std::span<const std::byte> b);

// The key prefix of one job's generation: "job/<job>/gen/<generation>/".
std::string StoreScope(std::string_view job, int64_t generation);

// A view of `base` in which every key is prefixed with `prefix` (e.g. StoreScope(...)).
// Shares `base`; thread-safe like it.
std::shared_ptr<Store> ScopedStore(std::shared_ptr<Store> base, std::string prefix);

// An in-process store (for ranks that are threads of one process, and tests).
std::shared_ptr<Store> NewMemoryStore();

// Settings of the TCP store server.
struct TcpStoreServerOptions {
  // Address to bind; default loopback. Use "0.0.0.0" to serve other hosts.
  std::string bind_address = "127.0.0.1";
  // Port; 0 picks a free one (see TcpStoreServer::port()).
  uint16_t port = 0;
  // Largest key + value accepted, in bytes (default 16 MiB).
  uint32_t max_payload = 16u << 20;
  // The cluster (or run) secret every client must prove it holds (base/net/auth.h); a client
  // without it gets an Unauthenticated error and a log line naming its address. Null (default):
  // no authentication, loopback addresses only.
  std::shared_ptr<const net::ClusterSecret> secret = nullptr;
};

// A standalone TCP store server: one io_context thread serving the store protocol
// (docs/formats/comm_store.md). Tests and the bench tool run it; the daemon has its own store.
class TcpStoreServer {
 public:
  // Binds and starts serving. Errors name the address when bind fails.
  static Result<std::unique_ptr<TcpStoreServer>> Start(TcpStoreServerOptions options);
  virtual ~TcpStoreServer() = default;
  // The bound port.
  virtual uint16_t port() const = 0;
  // Stops serving: waiters get Aborted, connections are closed. Idempotent, thread-safe.
  virtual void Stop() = 0;
  // Number of keys held (for tests).
  virtual size_t size() const = 0;
};

// Settings of a TCP store client.
struct TcpStoreClientOptions {
  // How long a server-side wait may be left waiting for a key beyond the caller's deadline
  // before the client gives up on the response (network slack).
  std::chrono::milliseconds response_slack{500};
  // The secret to prove to the server (TcpStoreServerOptions::secret); null (default) for a
  // server without one. A wrong or missing secret fails the connect with Unauthenticated.
  std::shared_ptr<const net::ClusterSecret> secret = nullptr;
};

// Connects to a TCP store server, retrying until `deadline`. The client has its own
// io_context thread; its calls block the calling thread (never call from an io_context thread
// that must keep running). Errors name "store at host:port".
Result<std::shared_ptr<Store>> ConnectTcpStore(const std::string& host, uint16_t port,
                                               Deadline deadline,
                                               TcpStoreClientOptions options = {});

}  // namespace rt::comm
