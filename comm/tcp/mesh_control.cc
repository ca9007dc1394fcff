// The mesh's control connections: liveness (goodbye and abort notices, a closed connection),
// best-effort notices to every peer, and bootstrap's ready barrier (comm/tcp/mesh.h).
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/frame.h"
#include "comm/tcp/mesh.h"

namespace rt::comm::tcp {

Status Mesh::PollControl(int timeout_ms, std::span<Xfer> xfers, bool include_data) {
  std::vector<pollfd> fds;
  std::vector<int> who;  // peer of each control entry, -1 for data/abort entries
  fds.push_back({abort_fd_, POLLIN, 0});
  who.push_back(-1);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || peers_[r].ctrl_fd < 0 || peers_[r].ctrl_closed) continue;
    fds.push_back({peers_[r].ctrl_fd, POLLIN, 0});
    who.push_back(r);
  }
  if (include_data) {
    for (auto& x : xfers) {
      if (peers_[x.peer].shm || peers_[x.peer].data_fd < 0) continue;
      if (x.hdone == kDataHeaderSize && x.done == x.bytes && x.header_checked) continue;
      fds.push_back(
          {peers_[x.peer].data_fds[x.conn], static_cast<short>(x.send ? POLLOUT : POLLIN), 0});
      who.push_back(-1);
    }
  }
  int n = poll(fds.data(), fds.size(), timeout_ms);
  if (n < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
  if (aborted()) return Status(StatusCode::kCommAborted, "communicator aborted");
  for (size_t i = 0; i < fds.size(); ++i) {
    if (who[i] < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    RETURN_IF_ERROR(HandleControl(who[i]));
  }
  return Status();
}

Status Mesh::HandleControl(int r) {
  Peer& p = peers_[r];
  char buf[4096];
  while (true) {
    ssize_t got = recv(p.ctrl_fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (got > 0) {
      p.ctrl_in.append(buf, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (got < 0 && errno == EINTR) continue;
    p.ctrl_closed = true;  // EOF or error
    break;
  }
  while (!p.ctrl_in.empty()) {
    size_t used = 0;
    auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(p.ctrl_in.data()),
                                            p.ctrl_in.size());
    Result<Frame> f = DecodeFrame(bytes, 1 << 20, &used);
    if (!f.ok()) {
      if (f.status().code() == StatusCode::kOutOfRange) break;  // incomplete
      return Status(StatusCode::kProtocolError,
                    RankName(r) + " sent a bad control frame: " + f.status().ToString());
    }
    p.ctrl_in.erase(0, used);
    if (f->header.type == kGoodbye) {
      p.goodbye = true;
    } else if (f->header.type == kAbortNotice) {
      std::string reason(reinterpret_cast<const char*>(f->payload.data()), f->payload.size());
      return Status(StatusCode::kPeerFailed, RankName(r) + " failed: " + reason);
    }
  }
  if (p.ctrl_closed && !p.goodbye)
    return PeerGone(r, "died (its connection closed without a goodbye)");
  return Status();
}

namespace {
void WriteFrameNoWait(int fd, uint16_t type, std::span<const std::byte> payload) {
  if (fd < 0) return;
  auto wire = EncodeFrame(type, 0, 0, payload);
  (void)!send(fd, wire.data(), wire.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}
}  // namespace

void Mesh::SendGoodbye() {
  for (int r = 0; r < size_; ++r)
    if (r != rank_) WriteFrameNoWait(peers_[r].ctrl_fd, kGoodbye, {});
}

void Mesh::SendAbortNotice(const std::string& reason) {
  auto payload =
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(reason.data()), reason.size());
  for (int r = 0; r < size_; ++r)
    if (r != rank_) WriteFrameNoWait(peers_[r].ctrl_fd, kAbortNotice, payload);
}

Status Mesh::ControlBarrier(uint16_t type, Deadline deadline) {
  std::vector<bool> seen(size_, false);
  seen[rank_] = true;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto wire = EncodeFrame(type, 0, 0, {});
    if (send(peers_[r].ctrl_fd, wire.data(), wire.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(wire.size()))
      return PeerGone(r, std::string("unreachable during bootstrap: ") + std::strerror(errno));
  }
  while (true) {
    bool all = true;
    for (int r = 0; r < size_; ++r) all &= static_cast<bool>(seen[r]);
    if (all) return Status();
    if (aborted()) return Status(StatusCode::kCommAborted, "bootstrap aborted");
    if (deadline.Expired()) {
      std::string missing;
      for (int r = 0; r < size_; ++r)
        if (!seen[r]) missing += (missing.empty() ? "" : ", ") + RankName(r);
      return Status(StatusCode::kPeerFailed, "bootstrap: no ready message from " + missing);
    }
    std::vector<pollfd> fds{{abort_fd_, POLLIN, 0}};
    std::vector<int> who{-1};
    for (int r = 0; r < size_; ++r)
      if (!seen[r]) {
        fds.push_back({peers_[r].ctrl_fd, POLLIN, 0});
        who.push_back(r);
      }
    int timeout = static_cast<int>(std::min<int64_t>(deadline.RemainingMs() + 1, 100));
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR)
      return ErrnoStatus(errno, "poll");
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int r = who[i];
      Peer& p = peers_[r];
      char buf[256];
      ssize_t got = recv(p.ctrl_fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (got == 0) return PeerGone(r, "died during bootstrap (connection closed)");
      if (got < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return PeerGone(r, std::string("failed during bootstrap: ") + std::strerror(errno));
      }
      p.ctrl_in.append(buf, static_cast<size_t>(got));
      size_t used = 0;
      auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(p.ctrl_in.data()),
                                              p.ctrl_in.size());
      Result<Frame> f = DecodeFrame(bytes, 1 << 20, &used);
      if (!f.ok()) {
        if (f.status().code() == StatusCode::kOutOfRange) continue;
        return Status(StatusCode::kProtocolError, RankName(r) + ": bad bootstrap frame");
      }
      p.ctrl_in.erase(0, used);
      if (f->header.type == type)
        seen[r] = true;
      else if (f->header.type == kAbortNotice)
        return PeerGone(r, "failed during bootstrap: " + ToString(f->payload));
    }
  }
}

}  // namespace rt::comm::tcp
