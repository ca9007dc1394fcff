// Mutual authentication of a fresh connection with the cluster secret (docs/formats/auth.md).
//
// Every connection between ringtrain processes (daemons, workers, ringctl, ringfs clients, chunk
// servers) may start with a challenge-response over frames: the client sends a nonce, the
// server answers with its own nonce and an HMAC-SHA256 over both under the secret, the client
// checks it and answers with its own HMAC, and the server checks that. Neither side sends the
// secret; each MAC covers a nonce the other side just chose, so a recorded handshake replayed on
// a new connection fails; the two MACs carry different labels, so one cannot be reflected as the
// other. Only the two ends' knowledge of the secret is proven: the bytes that follow are not
// protected by the handshake itself: links that leave a trusted network use TLS
// (base/net/tls.h), inside which the handshake then runs (`stream` carries the TLS session).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "base/deadline.h"
#include "base/net/frame_io.h"
#include "base/net/tls.h"
#include "base/status.h"

namespace rt::net {

// Frame types of the handshake (reserved for it in every protocol built on frames).
inline constexpr uint16_t kAuthHello = 0xFFF0;      // client → server: version, client nonce
inline constexpr uint16_t kAuthChallenge = 0xFFF1;  // server → client: server nonce, server MAC
inline constexpr uint16_t kAuthProof = 0xFFF2;      // client → server: client MAC
inline constexpr uint16_t kAuthAccepted = 0xFFF3;  // server → client: empty; the connection is open

// The cluster secret: at least 16 bytes read from a file only its owner may read or write; and
// optionally the node's TLS identity (base/net/tls.h), so that the credentials of a link travel
// as one value: every RpcServer and RpcClient given a secret that carries TLS runs over TLS
// (RpcServerOptions::secret). TLS comes with a secret, never instead of one: the secret also
// authenticates the links TLS does not wrap (the CPU collectives' mesh). Immutable and
// thread-safe once loaded.
class ClusterSecret {
 public:
  // Reads the secret file (its bytes, surrounding whitespace trimmed, are the key). Errors:
  // NotFound naming the path; FailedPrecondition when group or others have any access to it
  // ("chmod 600 PATH"); InvalidArgument when it holds fewer than 16 bytes.
  static Result<std::shared_ptr<const ClusterSecret>> Load(const std::string& path);
  // Loads the secret file and, when `tls` names files, the TLS identity it carries (errors of
  // Load and TlsContext::Load). `path` "" with `tls` empty: null (no secret, no TLS). Errors:
  // FailedPrecondition for TLS files without a secret file.
  static Result<std::shared_ptr<const ClusterSecret>> LoadWithTls(const std::string& path,
                                                                  const TlsFiles& tls);
  // Creates a new secret file with 32 random bytes (64 hex digits), mode 0600, failing with
  // AlreadyExists rather than replacing one. Errors: IoError naming the path.
  static Status Create(const std::string& path);
  // A secret with the given key bytes (tests).
  static std::shared_ptr<const ClusterSecret> FromKey(std::string key);

  // HMAC-SHA256 of `label` || `a` || `b` under the key.
  std::array<std::byte, 32> Mac(std::string_view label, std::span<const std::byte> a,
                                std::span<const std::byte> b) const;

  // A copy of this secret that carries `tls` (null: one without TLS).
  std::shared_ptr<const ClusterSecret> WithTls(std::shared_ptr<const TlsContext> tls) const;
  // The TLS identity the links of this secret run over; null for plain TCP.
  const std::shared_ptr<const TlsContext>& tls() const { return tls_; }

 private:
  explicit ClusterSecret(std::string key) : key_(std::move(key)) {}
  std::string key_;
  std::shared_ptr<const TlsContext> tls_;
};

// Runs the client side of the handshake on a freshly connected `stream`. `secret` null: the
// connection is used unauthenticated (nothing is sent). Errors: Unauthenticated when the server
// proves no knowledge of the secret or rejects ours (its reason quoted), or has no secret
// configured; DeadlineExceeded; Unavailable when the connection breaks. Every error names
// `peer`. The caller must close the socket after an error.
boost::asio::awaitable<Status> AuthenticateClient(StreamRef stream, const ClusterSecret* secret,
                                                  Deadline deadline, std::string_view peer);

// Runs the server side on a freshly accepted `stream`. With a secret the client must complete
// the handshake: a client that sends anything else gets an RPC error response
// (Unauthenticated, "this server requires the cluster secret") for its first frame. Without a
// secret, a client that starts a handshake is told that this server has none. Errors:
// Unauthenticated (naming `peer` and why), DeadlineExceeded for a client that stays silent.
// The caller logs the error, naming the address, and closes the socket.
boost::asio::awaitable<Status> AuthenticateServer(StreamRef stream, const ClusterSecret* secret,
                                                  Deadline deadline, std::string_view peer);

// True for a loopback address ("127.0.0.1", "::1", "localhost", 127.0.0.0/8).
bool IsLoopbackAddress(std::string_view address);

}  // namespace rt::net
