#include "base/net/tls.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

namespace rt::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;
using asio::as_tuple;
using asio::use_awaitable;
using namespace asio::experimental::awaitable_operators;

struct TlsContext::Impl {
  // Only read once loaded: every session is created from it (SSL_new takes a reference).
  asio::ssl::context ssl{asio::ssl::context::tls};
};

class TlsSession {
 public:
  TlsSession(tcp::socket& socket, asio::ssl::context& context) : stream(socket, context) {}
  asio::ssl::stream<tcp::socket&> stream;
  // The byte TlsWaitReadable read ahead, returned first by the next TlsRead.
  std::byte ahead{};
  bool has_ahead = false;
  // TlsWrite's copy of a frame's first record (one write at a time).
  std::vector<std::byte> staging;
};

void TlsSessionDeleter::operator()(TlsSession* session) const { delete session; }

namespace {

// OpenSSL's error queue as one line ("no certificate; unknown ca"), emptied.
std::string OpenSslErrors() {
  std::string text;
  while (unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    char buffer[256];
    if (reason == nullptr) {
      ERR_error_string_n(e, buffer, sizeof buffer);
      reason = buffer;
    }
    if (!text.empty()) text += "; ";
    text += reason;
  }
  return text.empty() ? "unknown OpenSSL error" : text;
}

// NotFound / IoError for a file that cannot be opened for reading.
Status CheckReadable(const std::string& path, std::string_view what) {
  if (access(path.c_str(), R_OK) == 0) return Status();
  if (errno == ENOENT)
    return NotFound("TLS " + std::string(what) + " file '" + path + "' does not exist");
  return ErrnoStatus(errno, "read TLS " + std::string(what) + " file '" + path + "'");
}

Status CheckKeyFile(const std::string& path) {
  RETURN_IF_ERROR(CheckReadable(path, "key"));
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat TLS key file '" + path + "'");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return FailedPrecondition("TLS key file '" + path + "' has mode " + mode +
                              ": group and others must have no access (chmod 600 " + path + ")");
  }
  return Status();
}

// Checks that the context's own certificate chains to the CA it verifies peers with.
Status VerifyOwnCertificate(SSL_CTX* ctx, const TlsFiles& files) {
  X509* cert = SSL_CTX_get0_certificate(ctx);
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> verify(X509_STORE_CTX_new(),
                                                                         X509_STORE_CTX_free);
  if (!verify || X509_STORE_CTX_init(verify.get(), SSL_CTX_get_cert_store(ctx), cert, chain) != 1)
    return Internal("TLS: cannot set up certificate verification: " + OpenSslErrors());
  if (X509_verify_cert(verify.get()) == 1) return Status();
  const int error = X509_STORE_CTX_get_error(verify.get());
  ERR_clear_error();
  return InvalidArgument(
      "TLS certificate '" + files.cert_file + "' does not verify against the CA '" + files.ca_file +
      "': " + X509_verify_cert_error_string(error) + " (is it signed by that CA?)");
}

std::string Subject(X509* cert) {
  if (cert == nullptr) return "";
  char buffer[512];
  X509_NAME_oneline(X509_get_subject_name(cert), buffer, sizeof buffer);
  return buffer;
}

// The Status for a failed handshake with `who`.
Status HandshakeStatus(const ErrorCode& ec, TlsSession& session, const std::string& who) {
  const std::string head = "TLS handshake with " + who + " failed: ";
  if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor)
    return Aborted(head + "socket closed locally");
  const long verify = SSL_get_verify_result(session.stream.native_handle());
  if (verify != X509_V_OK && IsTlsError(ec))
    return Unauthenticated(
        head + "its certificate is not trusted: " + X509_verify_cert_error_string(verify) +
        " (not signed by our cluster CA?)");
  if (ec == asio::error::eof || ec == asio::error::connection_reset || IsTlsTruncation(ec) ||
      ec == asio::error::broken_pipe)
    return Status(StatusCode::kUnavailable,
                  head + "the connection was closed (" + ec.message() +
                      "; does the other end run without TLS, or refuse our certificate?)",
                  /*retryable=*/true);
  if (IsTlsError(ec)) return Unauthenticated(head + ec.message());
  return Status(StatusCode::kIoError, head + ec.message());
}

}  // namespace

TlsContext::TlsContext(std::unique_ptr<Impl> impl, std::string subject)
    : impl_(std::move(impl)), subject_(std::move(subject)) {}

TlsContext::~TlsContext() = default;

Result<std::shared_ptr<const TlsContext>> TlsContext::Load(const TlsFiles& files) {
  std::string missing;
  if (files.cert_file.empty()) missing += " cert_file";
  if (files.key_file.empty()) missing += " key_file";
  if (files.ca_file.empty()) missing += " ca_file";
  if (!missing.empty())
    return InvalidArgument("TLS needs cert_file, key_file and ca_file; missing:" + missing);
  RETURN_IF_ERROR(CheckReadable(files.cert_file, "certificate"));
  RETURN_IF_ERROR(CheckReadable(files.ca_file, "CA"));
  RETURN_IF_ERROR(CheckKeyFile(files.key_file));

  auto impl = std::make_unique<Impl>();
  SSL_CTX* ctx = impl->ssl.native_handle();
  ERR_clear_error();
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1)
    return Internal("TLS: this OpenSSL does not support TLS 1.3: " + OpenSslErrors());
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1)
    return InvalidArgument("TLS certificate file '" + files.cert_file +
                           "' holds no usable PEM certificate: " + OpenSslErrors());
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    const std::string why = OpenSslErrors();
    if (why.find("mismatch") != std::string::npos)  // OpenSSL checks the pair as it loads
      return InvalidArgument("TLS key file '" + files.key_file +
                             "' does not match the certificate '" + files.cert_file + "': " + why);
    return InvalidArgument("TLS key file '" + files.key_file +
                           "' holds no usable PEM private key: " + why);
  }
  if (SSL_CTX_check_private_key(ctx) != 1)
    return InvalidArgument("TLS key file '" + files.key_file +
                           "' does not match the certificate '" + files.cert_file +
                           "': " + OpenSslErrors());
  if (SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) != 1)
    return InvalidArgument("TLS CA file '" + files.ca_file +
                           "' holds no usable PEM certificate: " + OpenSslErrors());
  RETURN_IF_ERROR(VerifyOwnCertificate(ctx, files));
  // Both ends verify the other's chain; a peer without a certificate fails the handshake.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // Every connection is long-lived and fresh: no session tickets, no resumption.
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  std::string subject = Subject(SSL_CTX_get0_certificate(ctx));
  return std::shared_ptr<const TlsContext>(new TlsContext(std::move(impl), std::move(subject)));
}

Result<std::shared_ptr<const TlsContext>> TlsContext::LoadIfSet(const TlsFiles& files) {
  if (files.empty()) return std::shared_ptr<const TlsContext>();
  return Load(files);
}

asio::awaitable<Result<TlsSessionPtr>> TlsHandshake(tcp::socket& socket, const TlsContext& context,
                                                    TlsRole role, Deadline deadline,
                                                    std::string_view peer) {
  const std::string who(peer);
  TlsSessionPtr session(new TlsSession(socket, context.impl().ssl));
  asio::steady_timer timer(socket.get_executor());
  timer.expires_at(deadline.when());
  const auto type =
      role == TlsRole::kClient ? asio::ssl::stream_base::client : asio::ssl::stream_base::server;
  auto r = co_await (session->stream.async_handshake(type, as_tuple(use_awaitable)) ||
                     timer.async_wait(as_tuple(use_awaitable)));
  if (r.index() == 1)
    co_return DeadlineExceeded("TLS handshake with " + who + ": deadline exceeded");
  auto [ec] = std::get<0>(r);
  if (ec) co_return HandshakeStatus(ec, *session, who);
  co_return std::move(session);
}

std::string TlsPeerSubject(const TlsSession& session) {
  X509* cert = SSL_get0_peer_certificate(const_cast<TlsSession&>(session).stream.native_handle());
  return Subject(cert);
}

asio::awaitable<TlsIoResult> TlsRead(TlsSession& session, std::span<std::byte> buffer) {
  size_t done = 0;
  if (session.has_ahead && !buffer.empty()) {
    buffer[0] = session.ahead;
    session.has_ahead = false;
    done = 1;
  }
  if (done == buffer.size()) co_return TlsIoResult{ErrorCode(), done};
  auto [ec, n] = co_await asio::async_read(session.stream,
                                           asio::buffer(buffer.data() + done, buffer.size() - done),
                                           as_tuple(use_awaitable));
  co_return TlsIoResult{ec, done + n};
}

asio::awaitable<TlsIoResult> TlsWrite(TlsSession& session,
                                      std::span<const asio::const_buffer> buffers) {
  if (buffers.size() == 1)
    co_return co_await asio::async_write(session.stream, buffers[0], as_tuple(use_awaitable));
  // Each buffer of a sequence would become TLS records of its own (a 20-byte frame header one
  // record and one TCP segment): copy the first record's worth together, send the rest as is.
  constexpr size_t kRecord = 16 * 1024;
  std::vector<std::byte>& staging = session.staging;
  staging.clear();
  size_t next = 0, offset = 0;  // the first byte not staged: buffers[next] at offset
  while (next < buffers.size() && staging.size() < kRecord) {
    const auto* data = static_cast<const std::byte*>(buffers[next].data());
    const size_t take = std::min(buffers[next].size() - offset, kRecord - staging.size());
    staging.insert(staging.end(), data + offset, data + offset + take);
    offset += take;
    if (offset == buffers[next].size()) {
      ++next;
      offset = 0;
    }
  }
  std::vector<asio::const_buffer> rest;
  rest.reserve(buffers.size() - next + 1);
  rest.push_back(asio::buffer(staging.data(), staging.size()));
  for (size_t i = next; i < buffers.size(); ++i)
    rest.push_back(i == next ? buffers[i] + offset : buffers[i]);
  co_return co_await asio::async_write(session.stream, rest, as_tuple(use_awaitable));
}

asio::awaitable<ErrorCode> TlsWaitReadable(TlsSession& session) {
  if (session.has_ahead) co_return ErrorCode();
  auto [ec, n] = co_await session.stream.async_read_some(asio::buffer(&session.ahead, 1),
                                                         as_tuple(use_awaitable));
  if (n == 1) session.has_ahead = true;
  co_return n == 1 ? ErrorCode() : ec;
}

bool IsTlsError(const ErrorCode& ec) {
  return ec.category() == asio::error::get_ssl_category() && !IsTlsTruncation(ec);
}

bool IsTlsTruncation(const ErrorCode& ec) { return ec == asio::ssl::error::stream_truncated; }

}  // namespace rt::net
