#include "iofs/net/shm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "base/bytes.h"

// GCC 12 false positives inside std::vector::resize inlined into ByteWriter::Put.
#pragma GCC diagnostic ignored "-Warray-bounds"
#ifndef __clang__  // a GCC-only warning group
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

namespace rt::iofs::shm {
namespace {

constexpr uint32_t kMagic = 0x4d485352;  // "RSHM"
constexpr size_t kMaxMessage = 1024;

sockaddr_un Address(uint16_t port, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = SocketName(port);
  std::memcpy(a.sun_path, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  return a;
}

// Waits until `fd` is ready for `events` or `deadline` passes.
Status Wait(int fd, short events, Deadline deadline, const char* what) {
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline.Remaining()).count();
    if (left <= 0) return DeadlineExceeded(std::string("shared memory registration: ") + what);
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n > 0) return Status();
    if (n < 0 && errno != EINTR) return ErrnoStatus(errno, std::string("poll ") + what);
  }
}

// A msghdr over one buffer with room for one descriptor.
struct FdMessage {
  FdMessage(std::byte* data, size_t size) : iov{data, size} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
};

}  // namespace

std::string SocketName(uint16_t port) {
  return std::string("\0ringfsd-shm.", 13) + std::to_string(port);
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  if (inet_pton(AF_INET, std::string(host).c_str(), &a) != 1) return false;
  return (ntohl(a.s_addr) >> 24) == 127;
}

Region::~Region() { munmap(base_, size_); }

Result<std::span<std::byte>> Region::Slice(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset)
    return OutOfRange("shared region of " + std::to_string(size_) + " bytes: range at " +
                      std::to_string(offset) + " of " + std::to_string(length) +
                      " bytes is outside it");
  return std::span<std::byte>(base_ + offset, length);
}

Result<std::unique_ptr<ClientRegion>> ClientRegion::Create(uint16_t port, size_t bytes,
                                                           const std::string& peer,
                                                           Deadline deadline) {
  if (bytes == 0 || bytes > kMaxRegion)
    return InvalidArgument("shared region of " + std::to_string(bytes) + " bytes");
  const int mfd = memfd_create("ringfs-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (mfd < 0) return ErrnoStatus(errno, "memfd_create");
  auto close_mfd = [&] { close(mfd); };
  if (ftruncate(mfd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    close_mfd();
    return ErrnoStatus(err, "size and seal the shared memfd");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close_mfd();
    return ErrnoStatus(err, "mmap the shared memfd");
  }
  auto region = std::make_unique<Region>(static_cast<std::byte*>(base), bytes);
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (sock < 0) {
    const int err = errno;
    close_mfd();
    return ErrnoStatus(err, "socket(AF_UNIX)");
  }
  std::unique_ptr<ClientRegion> out(new ClientRegion(std::move(region), sock, 0));
  socklen_t len = 0;
  const sockaddr_un addr = Address(port, &len);
  if (connect(sock, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    const int err = errno;
    close_mfd();
    return Status(
        StatusCode::kUnavailable,
        "no shared-memory socket for port " + std::to_string(port) + ": " + std::strerror(err),
        true);
  }
  Status s = Wait(sock, POLLOUT, deadline, "send");
  if (s.ok()) s = SendWithFd(sock, RegistrationMessage(bytes, peer), mfd);
  close_mfd();  // the server holds its own copy now (or the registration failed)
  RETURN_IF_ERROR(s);
  std::vector<std::byte> reply(kMaxMessage);
  size_t got = 0;
  while (true) {
    RETURN_IF_ERROR(Wait(sock, POLLIN, deadline, "reply"));
    const ssize_t n = recv(sock, reply.data() + got, reply.size() - got, 0);
    if (n == 0) return Unavailable("ringfsd closed the shared-memory socket before answering");
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return ErrnoStatus(errno, "read the shared-memory registration reply");
    }
    got += static_cast<size_t>(n);
    ByteReader r(std::span(reply.data(), got), "shared-memory registration reply");
    auto code = r.Get<uint16_t>();
    auto id = r.Get<uint32_t>();
    auto why = r.GetString(kMaxMessage);
    if (!code.ok() || !id.ok() || !why.ok()) {
      if (got == reply.size()) return Corruption("shared-memory registration reply is malformed");
      continue;  // not all of it has arrived yet
    }
    if (*code != 0)
      return Status(static_cast<StatusCode>(*code), "ringfsd refused the shared region: " + *why);
    out->id_ = *id;
    return out;
  }
}

ClientRegion::~ClientRegion() { close(socket_); }

std::vector<std::byte> RegistrationMessage(uint64_t bytes, const std::string& peer) {
  ByteWriter w;
  w.Put<uint32_t>(kMagic);
  w.Put<uint64_t>(bytes);
  w.PutString(peer);
  return w.Take();
}

Status SendWithFd(int sock, std::span<const std::byte> message, int fd) {
  FdMessage m(const_cast<std::byte*>(message.data()), message.size());
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(sock, &m.msg, MSG_NOSIGNAL) != static_cast<ssize_t>(message.size()))
    return ErrnoStatus(errno, "send a descriptor over a Unix socket");
  return Status();
}

Result<std::unique_ptr<Region>> ReceiveRegion(int fd, std::string* peer) {
  std::vector<std::byte> message(kMaxMessage);
  FdMessage m(message.data(), message.size());
  msghdr& msg = m.msg;
  const ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return ErrnoStatus(errno, "receive a shared-memory registration");
  int mfd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)))
      std::memcpy(&mfd, CMSG_DATA(c), sizeof(int));
  if (mfd < 0) return InvalidArgument("shared-memory registration without a file descriptor");
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{mfd};
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
    return InvalidArgument("shared-memory registration truncated");
  ByteReader r(std::span(message.data(), static_cast<size_t>(n)), "shared-memory registration");
  ASSIGN_OR_RETURN(uint32_t magic, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint64_t size, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(*peer, r.GetString(256));
  if (magic != kMagic) return InvalidArgument("shared-memory registration: bad magic");
  if (size == 0 || size > kMaxRegion)
    return InvalidArgument("shared region of " + std::to_string(size) + " bytes (at most " +
                           std::to_string(kMaxRegion) + ")");
  // The client must not be able to shrink the file under our mapping (SIGBUS on access).
  const int seals = fcntl(mfd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK) || !(seals & F_SEAL_GROW))
    return InvalidArgument("shared region is not a memfd sealed against shrinking and growing");
  struct stat st {};
  if (fstat(mfd, &st) != 0 || static_cast<uint64_t>(st.st_size) < size)
    return InvalidArgument("shared region is smaller than the announced " + std::to_string(size) +
                           " bytes");
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  if (base == MAP_FAILED) return ErrnoStatus(errno, "mmap a client's shared region");
  return std::make_unique<Region>(static_cast<std::byte*>(base), size);
}

void SendReply(int fd, const Status& status, uint32_t id) {
  ByteWriter w;
  w.Put<uint16_t>(static_cast<uint16_t>(status.code()));
  w.Put<uint32_t>(id);
  w.PutString(std::string(status.message().substr(0, 512)));
  const std::vector<std::byte> reply = w.Take();
  // Small and local: one non-blocking send; a client that does not read it simply fails.
  (void)send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace rt::iofs::shm
