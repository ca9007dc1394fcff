// Shared-memory data path for clients on the server's host (as 3FS's USRBIO): the client maps a
// memfd, passes it once to ringfsd over a Unix socket (SCM_RIGHTS), and from then on file writes
// and reads whose data lies in that region cross the TCP connection only as small control
// messages (kFsWriteShm/kFsReadShm); the server reads and writes the bytes in place. Remote
// clients, or servers without the socket, keep the TCP data path. Format: iofs_wire.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"

namespace rt::iofs::shm {

// Largest region a server maps for one client.
inline constexpr uint64_t kMaxRegion = 16ull << 30;

// The abstract Unix socket name ("\0ringfsd-shm.<port>") of the server listening on TCP `port`.
std::string SocketName(uint16_t port);

// True for "localhost" and loopback addresses (127.0.0.0/8, ::1): only then is the server
// on this host, so only then is the shared path tried.
bool IsLoopbackHost(std::string_view host);

// A mapped region (either side). Unmapped when destroyed.
class Region {
 public:
  Region(std::byte* base, size_t size) : base_(base), size_(size) {}
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  std::span<std::byte> bytes() const { return {base_, size_}; }
  // True if `s` lies entirely inside the region.
  bool Contains(std::span<const std::byte> s) const {
    return !s.empty() && s.data() >= base_ && s.data() + s.size() <= base_ + size_;
  }
  // The bytes [offset, offset + length), or OutOfRange.
  Result<std::span<std::byte>> Slice(uint64_t offset, uint64_t length) const;

 private:
  std::byte* base_;
  size_t size_;
};

// Client side: a sealed memfd of `bytes` mapped here and registered with the server at
// SocketName(port), bound to the client's TCP connection `peer` ("host:port" of the client's
// end as the server sees it). The Unix socket stays open: closing it (destroying this) makes the
// server drop the region.
class ClientRegion {
 public:
  // Errors: Unavailable when no server listens on the socket (use TCP), IoError, or the
  // server's refusal. Every socket call is bounded by `deadline`.
  static Result<std::unique_ptr<ClientRegion>> Create(uint16_t port, size_t bytes,
                                                      const std::string& peer, Deadline deadline);
  ~ClientRegion();
  // The shared bytes.
  const Region& region() const { return *region_; }
  // The id the server gave the region.
  uint32_t id() const { return id_; }

 private:
  ClientRegion(std::unique_ptr<Region> region, int socket, uint32_t id)
      : region_(std::move(region)), socket_(socket), id_(id) {}
  std::unique_ptr<Region> region_;
  int socket_;
  uint32_t id_;
};

// Sends `message` on the Unix stream socket `sock` with descriptor `fd` attached (SCM_RIGHTS).
Status SendWithFd(int sock, std::span<const std::byte> message, int fd);

// The registration message of a region of `bytes` bound to `peer` (see iofs_wire.md).
std::vector<std::byte> RegistrationMessage(uint64_t bytes, const std::string& peer);

// Server side: one registration read from an accepted Unix socket `fd` (which must be readable):
// the client's memfd, checked (sealed against shrinking and growing, at least the announced size,
// at most kMaxRegion) and mapped. `peer` receives the TCP connection the region is bound to.
Result<std::unique_ptr<Region>> ReceiveRegion(int fd, std::string* peer);
// Answers a registration on `fd`: the region id, or the error.
void SendReply(int fd, const Status& status, uint32_t id);

}  // namespace rt::iofs::shm
