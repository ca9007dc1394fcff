// Mutual TLS 1.3 for ringtrain's links (docs/formats/auth.md, "TLS").
//
// A node's TLS identity is three PEM files: its certificate, its private key and the cluster
// CA's certificate. Both ends of a connection present a certificate signed by the cluster CA and
// both verify the other's chain against the CA; host names are not checked (any certificate of
// the cluster CA is a member of the cluster, as any holder of the cluster secret is). The
// cluster-secret handshake (base/net/auth.h), when configured, runs inside the TLS session.
//
// This header stays free of <boost/asio/ssl.hpp> (it is included by base/net/rpc.h): the TLS
// session is an opaque type whose operations live in tls.cc.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include "base/deadline.h"
#include "base/net/tls_files.h"
#include "base/status.h"

namespace rt::net {

// A loaded TLS identity: an OpenSSL context for TLS 1.3 only, verifying peers against the CA.
// Immutable and thread-safe once loaded: any number of connections on any threads use it.
class TlsContext {
 public:
  // Loads and checks the three files. Errors (each naming the file): InvalidArgument when a
  // path is missing from `files`; NotFound when a file does not exist; FailedPrecondition when
  // the key file is readable by group or others ("chmod 600"); InvalidArgument when a file is
  // not valid PEM, the key does not match the certificate, or the certificate is not signed by
  // the CA (OpenSSL's reason quoted).
  static Result<std::shared_ptr<const TlsContext>> Load(const TlsFiles& files);
  // Loads `files` unless they are all empty (then null: TLS off). Errors as Load.
  static Result<std::shared_ptr<const TlsContext>> LoadIfSet(const TlsFiles& files);
  ~TlsContext();

  // The subject of this end's certificate ("/CN=ringtrain node-0"), for logs.
  const std::string& subject() const { return subject_; }

  struct Impl;  // tls.cc
  // The OpenSSL state (tls.cc only).
  Impl& impl() const { return *impl_; }

 private:
  TlsContext(std::unique_ptr<Impl> impl, std::string subject);
  std::unique_ptr<Impl> impl_;
  std::string subject_;
};

// One TLS session over a connected TCP socket that it does not own (the socket must outlive
// it). Opaque outside tls.cc; frame_io reads and writes through it (StreamRef).
class TlsSession;
// Deletes a TlsSession (its type is complete only in tls.cc).
struct TlsSessionDeleter {
  void operator()(TlsSession* session) const;
};
using TlsSessionPtr = std::unique_ptr<TlsSession, TlsSessionDeleter>;

// Which end of the handshake this is.
enum class TlsRole { kClient, kServer };

// Runs the TLS handshake on a freshly connected `socket` before `deadline`. Errors, naming
// `peer`: Unauthenticated when the handshake fails (the peer's certificate is not signed by our
// CA, it presents none, it refuses ours, or it does not speak TLS: OpenSSL's reason quoted);
// DeadlineExceeded when the peer stalls; Unavailable when the connection breaks. The caller
// closes the socket after an error.
boost::asio::awaitable<Result<TlsSessionPtr>> TlsHandshake(boost::asio::ip::tcp::socket& socket,
                                                           const TlsContext& context, TlsRole role,
                                                           Deadline deadline,
                                                           std::string_view peer);

// The subject of the peer's verified certificate, or "" when it has none.
std::string TlsPeerSubject(const TlsSession& session);

// The raw operations frame_io builds on (no deadline: frame_io races them against its timer).
// At most one read (TlsRead or TlsWaitReadable) and one write may be outstanding on a session.
using TlsIoResult = std::tuple<boost::system::error_code, size_t>;
// Reads until `buffer` is full (or an error).
boost::asio::awaitable<TlsIoResult> TlsRead(TlsSession& session, std::span<std::byte> buffer);
// Writes all of `buffers`, coalescing small pieces into full TLS records.
boost::asio::awaitable<TlsIoResult> TlsWrite(TlsSession& session,
                                             std::span<const boost::asio::const_buffer> buffers);
// Waits until a read would return data at once: reads one byte ahead, which the next TlsRead
// returns first (data the TLS layer has buffered does not make the socket readable).
boost::asio::awaitable<boost::system::error_code> TlsWaitReadable(TlsSession& session);

// True for an error from the TLS layer (OpenSSL), other than a peer that closed the TCP
// connection without a TLS close (which is how ringtrain ends connections: see IsTlsTruncation).
bool IsTlsError(const boost::system::error_code& ec);
// True when the peer closed the TCP connection without a TLS close_notify (a plain close).
bool IsTlsTruncation(const boost::system::error_code& ec);

}  // namespace rt::net
