#include "base/net/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "base/file.h"
#include "base/net/frame_io.h"
#include "base/net/rpc.h"

namespace rt::net {
namespace {

constexpr uint8_t kAuthVersion = 1;
constexpr size_t kNonceSize = 32;
constexpr size_t kMacSize = 32;
constexpr size_t kMinKeyBytes = 16;
// Handshake frames are small; a larger one is a protocol error.
constexpr uint32_t kMaxAuthPayload = 1024;
constexpr std::string_view kServerLabel = "ringtrain-auth server";
constexpr std::string_view kClientLabel = "ringtrain-auth client";

using Nonce = std::array<std::byte, kNonceSize>;

Nonce NewNonce() {
  Nonce n;
  RT_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), kNonceSize) == 1);
  return n;
}

bool SameMac(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A refused client's first frame is read whole up to this size before the refusal is sent.
constexpr uint32_t kMaxRefusedPayload = 1 << 20;

// Sends an RPC error response for the frame `header` came with.
asio::awaitable<Status> Refuse(StreamRef stream, const FrameHeader& header, const Status& why,
                               Deadline deadline, std::string_view peer) {
  co_return co_await WriteFrame(stream, header.type, kRpcResponse | kRpcError, header.request_id,
                                EncodeRpcError(why), deadline, peer);
}

}  // namespace

Result<std::shared_ptr<const ClusterSecret>> ClusterSecret::Load(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound("cluster secret file '" + path + "' does not exist");
    return ErrnoStatus(errno, "stat cluster secret file '" + path + "'");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return FailedPrecondition("cluster secret file '" + path + "' has mode " + mode +
                              ": group and others must have no access (chmod 600 " + path + ")");
  }
  ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFileBytes(path));
  std::string key(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t first = key.find_first_not_of(" \t\r\n");
  const size_t last = key.find_last_not_of(" \t\r\n");
  key = first == std::string::npos ? std::string() : key.substr(first, last - first + 1);
  if (key.size() < kMinKeyBytes)
    return InvalidArgument("cluster secret file '" + path + "' holds " +
                           std::to_string(key.size()) + " bytes; at least " +
                           std::to_string(kMinKeyBytes) + " are needed (ringctl init-secret)");
  return std::shared_ptr<const ClusterSecret>(new ClusterSecret(std::move(key)));
}

Status ClusterSecret::Create(const std::string& path) {
  unsigned char random[32];
  if (RAND_bytes(random, sizeof(random)) != 1)
    return Internal("cluster secret: the OpenSSL random generator failed");
  std::string hex;
  for (unsigned char c : random) {
    static const char kDigits[] = "0123456789abcdef";
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  hex += '\n';
  Status created = CreateNewFile(path, hex, 0600);
  if (created.code() == StatusCode::kAlreadyExists)
    return Status(StatusCode::kAlreadyExists,
                  "cluster secret file '" + path + "' exists already; not replacing it");
  return created.WithContext("cluster secret file");
}

Result<std::shared_ptr<const ClusterSecret>> ClusterSecret::LoadWithTls(const std::string& path,
                                                                        const TlsFiles& tls) {
  if (path.empty()) {
    if (!tls.empty())
      return FailedPrecondition(
          "TLS needs the cluster secret too ([auth] secret_file, --secret-file): the secret "
          "authenticates the links that TLS does not wrap");
    return std::shared_ptr<const ClusterSecret>();
  }
  ASSIGN_OR_RETURN(auto secret, Load(path));
  if (tls.empty()) return secret;
  ASSIGN_OR_RETURN(auto context, TlsContext::Load(tls));
  return secret->WithTls(std::move(context));
}

std::shared_ptr<const ClusterSecret> ClusterSecret::WithTls(
    std::shared_ptr<const TlsContext> tls) const {
  auto copy = std::shared_ptr<ClusterSecret>(new ClusterSecret(key_));
  copy->tls_ = std::move(tls);
  return copy;
}

std::shared_ptr<const ClusterSecret> ClusterSecret::FromKey(std::string key) {
  return std::shared_ptr<const ClusterSecret>(new ClusterSecret(std::move(key)));
}

std::array<std::byte, 32> ClusterSecret::Mac(std::string_view label, std::span<const std::byte> a,
                                             std::span<const std::byte> b) const {
  std::vector<unsigned char> message;
  for (auto part : {Bytes(label), a, b}) {
    const auto* p = reinterpret_cast<const unsigned char*>(part.data());
    message.insert(message.end(), p, p + part.size());
  }
  std::array<std::byte, 32> out{};
  unsigned int length = 0;
  RT_CHECK(HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), message.data(),
                message.size(), reinterpret_cast<unsigned char*>(out.data()), &length) != nullptr &&
           length == out.size());
  return out;
}

asio::awaitable<Status> AuthenticateClient(StreamRef stream, const ClusterSecret* secret,
                                           Deadline deadline, std::string_view peer) {
  if (secret == nullptr) co_return Status();
  const std::string who(peer);
  const Nonce mine = NewNonce();
  std::vector<std::byte> hello{std::byte{kAuthVersion}};
  hello.insert(hello.end(), mine.begin(), mine.end());
  CO_RETURN_IF_ERROR(co_await WriteFrame(stream, kAuthHello, 0, 0, hello, deadline, peer));
  CO_ASSIGN_OR_RETURN(Frame challenge, co_await ReadFrame(stream, kMaxAuthPayload, deadline, peer));
  if (challenge.header.flags & kRpcError) {
    const Status why = DecodeRpcError(challenge.payload, peer);
    if (why.code() == StatusCode::kUnimplemented)
      co_return Unauthenticated(who +
                                " has no cluster secret configured (or is not a ringtrain "
                                "server): it does not take the handshake");
    co_return Unauthenticated("the handshake with " + who + " failed: " + why.ToString());
  }
  if (challenge.header.type != kAuthChallenge || challenge.payload.size() != kNonceSize + kMacSize)
    co_return Status(StatusCode::kProtocolError,
                     who + " answered the authentication hello with an unexpected frame");
  const std::span<const std::byte> theirs(challenge.payload.data(), kNonceSize);
  const std::span<const std::byte> their_mac(challenge.payload.data() + kNonceSize, kMacSize);
  if (!SameMac(their_mac, secret->Mac(kServerLabel, mine, theirs)))
    co_return Unauthenticated(who + " does not hold this cluster's secret (its proof is wrong)");
  const auto proof = secret->Mac(kClientLabel, theirs, mine);
  CO_RETURN_IF_ERROR(co_await WriteFrame(stream, kAuthProof, 0, 0, proof, deadline, peer));
  CO_ASSIGN_OR_RETURN(Frame accepted, co_await ReadFrame(stream, kMaxAuthPayload, deadline, peer));
  if (accepted.header.flags & kRpcError)
    co_return Unauthenticated(who + " refused our credentials: " +
                              std::string(DecodeRpcError(accepted.payload, peer).message()));
  if (accepted.header.type != kAuthAccepted)
    co_return Status(StatusCode::kProtocolError,
                     who + " answered the authentication proof with an unexpected frame");
  co_return Status();
}

asio::awaitable<Status> AuthenticateServer(StreamRef stream, const ClusterSecret* secret,
                                           Deadline deadline, std::string_view peer) {
  if (secret == nullptr) co_return Status();
  const std::string who(peer);
  CO_ASSIGN_OR_RETURN(FrameHeader header,
                      co_await ReadFrameHeader(stream, kDefaultMaxFramePayload, deadline, peer));
  if (header.type != kAuthHello || header.length != 1 + kNonceSize) {
    const Status why = Unauthenticated(
        "this server requires the cluster secret ([auth] secret_file, --secret-file)");
    (void)co_await DiscardPayload(stream, header, kMaxRefusedPayload, deadline, peer);
    (void)co_await Refuse(stream, header, why, deadline, peer);
    co_return Unauthenticated(who + " sent no credentials");
  }
  std::vector<std::byte> hello(header.length);
  CO_RETURN_IF_ERROR(co_await ReadExactly(stream, hello, deadline, peer));
  CO_RETURN_IF_ERROR(VerifyFramePayload(header, hello).WithContext(who));
  if (hello[0] != std::byte{kAuthVersion}) {
    (void)co_await Refuse(stream, header, Unauthenticated("unknown authentication version"),
                          deadline, peer);
    co_return Unauthenticated(who + " speaks authentication version " +
                              std::to_string(static_cast<int>(hello[0])));
  }
  const std::span<const std::byte> theirs(hello.data() + 1, kNonceSize);
  const Nonce mine = NewNonce();
  std::vector<std::byte> challenge(mine.begin(), mine.end());
  const auto mac = secret->Mac(kServerLabel, theirs, mine);
  challenge.insert(challenge.end(), mac.begin(), mac.end());
  CO_RETURN_IF_ERROR(
      co_await WriteFrame(stream, kAuthChallenge, kRpcResponse, 0, challenge, deadline, peer));
  CO_ASSIGN_OR_RETURN(Frame proof, co_await ReadFrame(stream, kMaxAuthPayload, deadline, peer));
  if (proof.header.type != kAuthProof ||
      !SameMac(proof.payload, secret->Mac(kClientLabel, mine, theirs))) {
    (void)co_await Refuse(stream, proof.header, Unauthenticated("wrong cluster secret"), deadline,
                          peer);
    co_return Unauthenticated(who + " does not hold this cluster's secret (its proof is wrong)");
  }
  co_return co_await WriteFrame(stream, kAuthAccepted, kRpcResponse, 0,
                                std::span<const std::byte>(), deadline, peer);
}

bool IsLoopbackAddress(std::string_view address) {
  return address == "localhost" || address == "::1" || address.starts_with("127.");
}

}  // namespace rt::net
