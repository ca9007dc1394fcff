// Bootstrap of a CPU communicator through the Store and Boost.Asio (comm/tcp/bootstrap.h).
#include "comm/tcp/bootstrap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/log.h"
#include "base/net/auth.h"
#include "base/net/frame_io.h"
#include "comm/store.h"

namespace rt::comm::tcp {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// This host, boot and network namespace (hostname/boot_id/net:[inode]): ranks with the same id
// may share memory. Ranks in different network namespaces stand for different hosts (containers,
// the chaos campaign's partitions, docs/chaos.md), so their traffic goes over the network.
std::string HostId() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(f, boot);
  char netns[64] = {};
  if (::readlink("/proc/self/ns/net", netns, sizeof(netns) - 1) < 0) netns[0] = '\0';
  return std::string(host) + "/" + boot + "/" + netns;
}

// Get with short slices so that Abort() is noticed within ~100 ms.
Result<Bytes> GetAbortable(Store& store, const std::string& key, Deadline deadline, Mesh& mesh) {
  while (true) {
    if (mesh.aborted()) return Status(StatusCode::kCommAborted, "bootstrap aborted");
    Deadline slice = Deadline::AfterMs(100).Min(deadline);
    Result<Bytes> r = store.Get(key, slice);
    if (r.ok()) return r;
    if (r.status().code() != StatusCode::kDeadlineExceeded || deadline.Expired())
      return r.status().WithContext("bootstrap: store key " + key);
  }
}

// How long an accepted connection may take to authenticate and say hello.
constexpr std::chrono::milliseconds kVetTimeout{10'000};

// What a rank publishes under addr/<rank>.
struct PeerAddr {
  std::string host;
  uint16_t port = 0;
  std::string host_id;
  std::string shm_name;
};

}  // namespace

Status BootstrapMesh(const CommOptions& options, const std::string& scope, Mesh& mesh) {
  const int n = options.size, me = options.rank;
  const Deadline deadline = Deadline::After(options.bootstrap_timeout);
  if (n == 1) return Status();
  auto store = ScopedStore(options.store, scope);

  // 1. A nonce that names this communicator instance on every connection.
  uint64_t nonce = 0;
  if (me == 0) {
    std::random_device rd;
    nonce = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid()) ^
            static_cast<uint64_t>(MonoClock::now().time_since_epoch().count());
    auto v = store->CompareAndSet("nonce", std::nullopt, ToBytes(std::to_string(nonce)), deadline);
    if (!v.ok()) return v.status().WithContext("bootstrap: publishing the nonce");
    nonce = std::stoull(ToString(*v));
  } else {
    ASSIGN_OR_RETURN(Bytes v, GetAbortable(*store, "nonce", deadline, mesh));
    nonce = std::stoull(ToString(v));
  }

  // 2. Listen, create our shared-memory segment, publish our address.
  asio::io_context io;
  boost::system::error_code ec;
  tcp::acceptor acceptor(io);
  tcp::endpoint ep(asio::ip::make_address(options.listen_address, ec), 0);
  if (ec) return InvalidArgument("bad listen address " + options.listen_address);
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status(StatusCode::kIoError,
                  "bootstrap: cannot listen on " + options.listen_address + ": " + ec.message());
  const uint16_t port = acceptor.local_endpoint().port();
  const std::string host_id = HostId();
  const bool want_shm = options.transport != Transport::kTcp;
  std::string shm_name;
  if (want_shm) {
    char name[96];
    std::snprintf(name, sizeof(name), "/ringtrain-comm-%016llx-%d",
                  static_cast<unsigned long long>(nonce), me);
    shm_name = name;
    ASSIGN_OR_RETURN(
        auto seg, CreateShmSegment(shm_name, n, options.shm_ring_bytes, options.shm_arena_bytes));
    mesh.set_own_segment(std::move(seg));
    mesh.set_ring_bytes(options.shm_ring_bytes);
    mesh.set_arena_bytes(options.shm_arena_bytes);
    mesh.set_single_copy_bytes(options.shm_single_copy_bytes);
    mesh.set_single_copy_oversubscribed(options.shm_single_copy_oversubscribed);
    mesh.set_yield_window(options.shm_yield_window);
  }
  {
    std::ostringstream addr;
    addr << options.listen_address << "\n" << port << "\n" << host_id << "\n" << shm_name;
    RETURN_IF_ERROR(store->Set("addr/" + std::to_string(me), ToBytes(addr.str()), deadline)
                        .WithContext("bootstrap: publishing the address"));
  }
  std::vector<PeerAddr> addrs(n);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    ASSIGN_OR_RETURN(Bytes v, GetAbortable(*store, "addr/" + std::to_string(r), deadline, mesh));
    std::istringstream in(ToString(v));
    std::string port_s;
    std::getline(in, addrs[r].host);
    std::getline(in, port_s);
    std::getline(in, addrs[r].host_id);
    std::getline(in, addrs[r].shm_name);
    addrs[r].port = static_cast<uint16_t>(std::stoi(port_s));
  }
  auto& peers = mesh.peers();
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    peers[r].same_host = addrs[r].host_id == host_id;
    peers[r].shm = want_shm && peers[r].same_host && !addrs[r].shm_name.empty();
  }

  // 3. Connections: rank j connects to every lower rank i (a control connection, plus a data
  // connection when the pair does not share memory); each connection opens with a hello.
  const int conns = options.tcp_connections_per_peer;
  mesh.set_stripe_bytes(options.tcp_stripe_bytes);
  std::vector<std::optional<tcp::socket>> ctrl(n);
  std::vector<std::vector<std::optional<tcp::socket>>> data(n);
  for (auto& d : data) d.resize(conns);
  int expected_in = 0;
  for (int r = me + 1; r < n; ++r) expected_in += peers[r].shm ? 1 : 1 + conns;
  Status failure;
  int pending = expected_in;
  for (int r = 0; r < me; ++r) pending += peers[r].shm ? 1 : 1 + conns;
  auto fail = [&](Status s) {
    if (failure.ok()) failure = std::move(s);
  };
  // Each accepted connection is vetted in its own coroutine (handshake, then hello), so a stray
  // or hostile one that stays silent delays no real peer.
  int accepted = 0;
  auto admit = [&](tcp::socket sock) -> asio::awaitable<void> {
    const std::string who = "a connecting peer at " + net::RemoteName(sock);
    const Deadline vet = Deadline::After(kVetTimeout).Min(deadline);
    if (Status auth = co_await net::AuthenticateServer(sock, options.secret.get(), vet, who);
        !auth.ok()) {
      LOG_WARN("bootstrap of rank {}: dropping {}: {}", me, who, auth.ToString());
      co_return;
    }
    Result<Frame> f = co_await net::ReadFrame(sock, 1024, vet, who);
    if (!f.ok() || f->header.type != kHello) co_return;  // not one of ours: drop it
    Result<Hello> h = DecodeHello(f->payload);
    if (!h.ok() || h->nonce != nonce || h->rank <= static_cast<uint32_t>(me) ||
        h->rank >= static_cast<uint32_t>(n))
      co_return;  // another generation or communicator: never mix
    if (h->purpose >= kData + conns) {
      fail(Status(StatusCode::kProtocolError,
                  "bootstrap: " + RankName(h->rank) + " opened data connection " +
                      std::to_string(h->purpose - kData) + " of " + std::to_string(conns)));
      co_return;
    }
    auto& slot = h->purpose >= kData ? data[h->rank][h->purpose - kData] : ctrl[h->rank];
    if (slot) {
      fail(Status(StatusCode::kProtocolError,
                  "bootstrap: two connections from " + RankName(h->rank)));
      co_return;
    }
    boost::system::error_code ignored;
    sock.set_option(tcp::no_delay(true), ignored);
    slot.emplace(std::move(sock));
    ++accepted;
    --pending;
  };
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        while (accepted < expected_in && failure.ok()) {
          auto [aec, sock] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
          if (aec) {
            if (aec != asio::error::operation_aborted)
              fail(Status(StatusCode::kIoError, "bootstrap: accept: " + aec.message()));
            co_return;
          }
          asio::co_spawn(io, admit(std::move(sock)), asio::detached);
        }
      },
      asio::detached);
  for (int r = 0; r < me; ++r) {
    for (int p = 0; p <= conns; ++p) {
      const uint8_t purpose = p == 0 ? uint8_t{kControl} : static_cast<uint8_t>(kData + p - 1);
      if (purpose >= kData && peers[r].shm) continue;
      asio::co_spawn(
          io,
          [&, r, purpose]() -> asio::awaitable<void> {
            auto sock = co_await net::Connect(addrs[r].host, addrs[r].port, deadline);
            if (!sock.ok()) {
              fail(Status(StatusCode::kPeerFailed, "bootstrap: cannot reach " + RankName(r) + ": " +
                                                       sock.status().ToString()));
              co_return;
            }
            if (Status auth = co_await net::AuthenticateClient(*sock, options.secret.get(),
                                                               deadline, RankName(r));
                !auth.ok()) {
              fail(auth.WithContext("bootstrap: connecting to " + RankName(r)));
              co_return;
            }
            auto hello = EncodeHello(Hello{nonce, static_cast<uint32_t>(me), purpose});
            Status s = co_await net::WriteFrame(*sock, kHello, 0, 0, hello, deadline, RankName(r));
            if (!s.ok()) {
              fail(Status(StatusCode::kPeerFailed, "bootstrap: " + s.ToString()));
              co_return;
            }
            (purpose >= kData ? data[r][purpose - kData] : ctrl[r]).emplace(std::move(*sock));
            --pending;
          },
          asio::detached);
    }
  }
  while (pending > 0 && failure.ok()) {
    if (mesh.aborted()) {
      failure = Status(StatusCode::kCommAborted, "bootstrap aborted");
      break;
    }
    if (deadline.Expired()) {
      std::string missing;
      for (int r = 0; r < n; ++r)
        if (r != me &&
            (!ctrl[r] || (!peers[r].shm && !std::all_of(data[r].begin(), data[r].end(),
                                                        [](auto& s) { return s.has_value(); }))))
          missing += (missing.empty() ? "" : ", ") + RankName(r);
      failure = Status(StatusCode::kPeerFailed,
                       "bootstrap: no connection from " + missing + " before the deadline");
      break;
    }
    // One handler at a time, so that the loop ends as soon as the last connection is in (a
    // slice would wait out its 50 ms behind the acceptor's next accept).
    io.run_one_for(std::chrono::milliseconds(50));
  }
  if (!failure.ok()) return failure;
  acceptor.close(ec);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    peers[r].ctrl_fd = ctrl[r]->release();
    if (!peers[r].shm) {
      for (auto& s : data[r]) peers[r].data_fds.push_back(s->release());
      peers[r].data_fd = peers[r].data_fds[0];
    }
    fcntl(peers[r].ctrl_fd, F_SETFL, fcntl(peers[r].ctrl_fd, F_GETFL) | O_NONBLOCK);
    for (int fd : peers[r].data_fds) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  // 4. Map the same-host peers' segments, then a ready barrier; after it every peer has mapped
  // our segment and its name can go (nothing is left behind if a process is killed later).
  for (int r = 0; r < n; ++r) {
    if (r == me || !peers[r].shm) continue;
    ASSIGN_OR_RETURN(peers[r].segment, OpenShmSegment(addrs[r].shm_name, n, options.shm_ring_bytes,
                                                      options.shm_arena_bytes));
  }
  Status ready = mesh.ControlBarrier(kReady, deadline);
  if (!shm_name.empty()) shm_unlink(shm_name.c_str());
  return ready;
}

}  // namespace rt::comm::tcp
