#include "iofs/client.h"

#include <array>
#include <functional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/net/rpc.h"
#include "iofs/engine/block_crc.h"
#include "iofs/net/shm.h"
#include "iofs/net/wire.h"

// GCC 12 false positives inside std::vector::resize inlined into ByteWriter::Put.
#pragma GCC diagnostic ignored "-Warray-bounds"
#ifndef __clang__  // a GCC-only warning group
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

namespace rt::iofs {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;

std::vector<std::byte> PathPayload(const std::string& path) {
  ByteWriter w;
  w.PutString(path);
  return w.Take();
}

// Counts running workers; Wait() returns when all have finished (single executor only).
class WaitGroup {
 public:
  explicit WaitGroup(asio::any_io_executor ex)
      : timer_(ex, asio::steady_timer::time_point::max()) {}
  void Add() { ++running_; }
  void Done() {
    if (--running_ == 0) timer_.cancel();
  }
  awaitable<void> Wait() {
    while (running_ > 0) (void)co_await timer_.async_wait(asio::as_tuple(use_awaitable));
  }

 private:
  asio::steady_timer timer_;
  int running_ = 0;
};

// Calls `fn(at, n)` for every piece of the file range [begin, end) cut at multiples of
// `piece_size` (so concurrent requests never share a chunk), `parallel` pieces in flight, and
// returns the first error (no piece starts after one). Single executor: the workers share state.
awaitable<Status> ForEachPiece(uint64_t begin, uint64_t end, uint64_t piece_size, int parallel,
                               std::function<awaitable<Status>(uint64_t at, uint64_t n)> fn) {
  auto ex = co_await asio::this_coro::executor;
  WaitGroup group(ex);
  uint64_t next = begin;
  Status first_error;
  for (int w = 0; w < std::max(1, parallel); ++w) {
    group.Add();
    asio::co_spawn(
        ex,
        [&]() -> awaitable<void> {
          while (next < end && first_error.ok()) {
            const uint64_t at = next;
            const uint64_t n = std::min(end - at, piece_size - at % piece_size);
            next += n;
            Status s = co_await fn(at, n);
            if (!s.ok() && first_error.ok()) first_error = s;
          }
          group.Done();
        },
        asio::detached);
  }
  co_await group.Wait();
  co_return first_error;
}

}  // namespace

Client::~Client() {
  if (rpc_) rpc_->Close();
}

awaitable<Result<std::shared_ptr<Client>>> Client::Connect(std::string host, uint16_t port,
                                                           Deadline deadline) {
  co_return co_await Connect(std::move(host), port, deadline, ClientOptions{});
}

awaitable<Result<std::shared_ptr<Client>>> Client::Connect(std::string host, uint16_t port,
                                                           Deadline deadline,
                                                           ClientOptions options) {
  net::RpcClientOptions o;
  o.max_payload = wire::kMaxPayload;
  o.secret = options.secret;
  o.peer_name = "ringfsd at " + host + ":" + std::to_string(port);
  auto first = co_await net::RpcClient::Connect(host, port, deadline, o);
  if (!first.ok()) co_return first.status();
  auto reply = co_await (*first)->Call(wire::kInfo, {}, deadline);
  if (!reply.ok()) co_return reply.status();
  auto info = wire::DecodeInfo(reply->payload);
  if (!info.ok()) co_return info.status();
  std::shared_ptr<Client> client(new Client());
  client->chunk_size_ = info->chunk_size;
  client->server_ = host + ":" + std::to_string(port);
  client->host_ = host;
  client->port_ = port;
  if (info->meta_node == 0)
    co_return Unavailable("ringfsd at " + host + ":" + std::to_string(port) +
                          " knows no metadata node yet (it waits for its first membership view)");
  if (info->meta_node == info->self) {
    client->rpc_ = *first;
    co_return client;
  }
  (*first)->Close();
  for (const auto& n : info->nodes) {
    if (n.id != info->meta_node) continue;
    o.peer_name = "ringfsd metadata node " + std::to_string(n.id) + " at " + n.host + ":" +
                  std::to_string(n.port);
    auto meta = co_await net::RpcClient::Connect(n.host, n.port, deadline, o);
    if (!meta.ok()) co_return meta.status();
    client->rpc_ = *meta;
    client->server_ = n.host + ":" + std::to_string(n.port);
    client->host_ = n.host;
    client->port_ = n.port;
    co_return client;
  }
  co_return Corruption("cluster info names metadata node " + std::to_string(info->meta_node) +
                       " but lists no address for it");
}

awaitable<Result<std::vector<std::byte>>> Client::Call(uint16_t type,
                                                       std::vector<std::byte> payload,
                                                       Deadline deadline) {
  auto reply = co_await rpc_->Call(type, payload, deadline);
  if (!reply.ok()) co_return reply.status();
  co_return std::move(reply->payload);
}

awaitable<Result<FileStat>> Client::Create(std::string path, Deadline deadline) {
  auto reply = co_await Call(wire::kFsCreate, PathPayload(path), deadline);
  if (!reply.ok()) co_return reply.status();
  ByteReader r(*reply, "create reply");
  co_return wire::GetStat(r);
}

awaitable<Status> Client::Mkdir(std::string path, Deadline deadline) {
  co_return (co_await Call(wire::kFsMkdir, PathPayload(path), deadline)).status();
}

awaitable<Status> Client::MapShared(size_t bytes, Deadline deadline) {
  if (!shm::IsLoopbackHost(host_))
    co_return Status(StatusCode::kUnavailable, "shared memory: " + server_ + " is not on this host",
                     true);
  auto region = shm::ClientRegion::Create(port_, bytes, rpc_->LocalName(), deadline);
  if (!region.ok()) co_return region.status();
  shared_ = std::move(*region);
  co_return Status();
}

std::span<std::byte> Client::shared() const {
  return shared_ ? shared_->region().bytes() : std::span<std::byte>();
}

namespace {
// [path, offset, region id, offset in the region, length]: the control message of a shared-memory
// write or read.
std::vector<std::byte> SharedRequest(const std::string& path, uint64_t offset, uint32_t id,
                                     uint64_t at, uint64_t length) {
  ByteWriter w;
  w.PutString(path);
  w.Put<uint64_t>(offset);
  w.Put<uint32_t>(id);
  w.Put<uint64_t>(at);
  w.Put<uint64_t>(length);
  return w.Take();
}
}  // namespace

awaitable<Status> Client::WriteShared(std::string path, uint64_t offset,
                                      std::span<const std::byte> data, Deadline deadline) {
  const uint64_t at = static_cast<uint64_t>(data.data() - shared_->region().bytes().data());
  ++shared_requests_;
  co_return (co_await Call(wire::kFsWriteShm,
                           SharedRequest(path, offset, shared_->id(), at, data.size()), deadline))
      .status();
}

awaitable<Result<size_t>> Client::ReadShared(std::string path, uint64_t offset,
                                             std::span<std::byte> out, Deadline deadline) {
  const uint64_t at = static_cast<uint64_t>(out.data() - shared_->region().bytes().data());
  ++shared_requests_;
  auto reply = co_await Call(wire::kFsReadShm,
                             SharedRequest(path, offset, shared_->id(), at, out.size()), deadline);
  if (!reply.ok()) co_return reply.status();
  ByteReader r(*reply, "shared read reply");
  CO_ASSIGN_OR_RETURN(uint64_t n, r.Get<uint64_t>());
  if (n > out.size())
    co_return Corruption("shared read reply from " + server_ + ": " + std::to_string(n) + " bytes");
  co_return static_cast<size_t>(n);
}

awaitable<Status> Client::Write(std::string path, uint64_t offset, std::span<const std::byte> data,
                                Deadline deadline) {
  if (shared_ && shared_->region().Contains(data))
    co_return co_await WriteShared(std::move(path), offset, data, deadline);
  // [path, offset, CRC32C of data] then the data itself, sent from the caller's memory in a frame
  // without a payload CRC: the server checks the data against the CRC (end to end).
  ByteWriter w;
  w.PutString(path);
  w.Put<uint64_t>(offset);
  w.Put<uint32_t>(FastCrc32c(data.data(), data.size()));
  const std::vector<std::byte> head = w.Take();
  const std::span<const std::byte> pieces[] = {head, data};
  auto reply = co_await rpc_->Call(wire::kFsWrite, net::Pieces(pieces), net::kFrameUncheckedPayload,
                                   deadline);
  co_return reply.status();
}

awaitable<Result<FileStat>> Client::PutFile(std::string path, std::span<const std::byte> data,
                                            Deadline deadline) {
  // As Write: the data follows the head in a frame without a payload CRC, checked end to end.
  ByteWriter w;
  w.PutString(path);
  w.Put<uint32_t>(FastCrc32c(data.data(), data.size()));
  const std::vector<std::byte> head = w.Take();
  const std::span<const std::byte> pieces[] = {head, data};
  auto reply = co_await rpc_->Call(wire::kFsPutFile, net::Pieces(pieces),
                                   net::kFrameUncheckedPayload, deadline);
  if (!reply.ok()) co_return reply.status();
  ByteReader r(reply->payload, "put reply");
  co_return wire::GetStat(r);
}

awaitable<Result<size_t>> Client::ReadInto(std::string path, uint64_t offset,
                                           std::span<std::byte> out, Deadline deadline) {
  if (shared_ && shared_->region().Contains(out))
    co_return co_await ReadShared(std::move(path), offset, out, deadline);
  ByteWriter w;
  w.PutString(path);
  w.Put<uint64_t>(offset);
  w.Put<uint64_t>(out.size());
  const std::vector<std::byte> request = w.Take();
  const std::span<const std::byte> pieces[] = {request};
  std::array<std::byte, 4> head;
  size_t received = 0;
  auto reply = co_await rpc_->CallInto(wire::kFsRead, net::Pieces(pieces), 0, head, out, &received,
                                       deadline);
  if (!reply.ok()) co_return reply.status();
  if (received < head.size()) co_return Corruption("read reply from " + server_ + ": truncated");
  ByteReader r(head, "read reply");
  CO_ASSIGN_OR_RETURN(uint32_t crc, r.Get<uint32_t>());
  const size_t n = received - head.size();
  if (const uint32_t got = FastCrc32c(out.data(), n); got != crc)
    co_return Status(StatusCode::kChecksumMismatch,
                     "read of " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                         " of " + path + " from " + server_ + ": data CRC32C " +
                         std::to_string(got) + " != " + std::to_string(crc) +
                         " sent by the server (corrupted in transit)");
  co_return n;
}

awaitable<Result<std::vector<std::byte>>> Client::Read(std::string path, uint64_t offset,
                                                       uint64_t length, Deadline deadline) {
  std::vector<std::byte> out(std::min(length, wire::kMaxReadPerRequest));
  auto n = co_await ReadInto(std::move(path), offset, out, deadline);
  if (!n.ok()) co_return n.status();
  out.resize(*n);
  co_return out;
}

awaitable<Result<FileStat>> Client::Stat(std::string path, Deadline deadline) {
  auto reply = co_await Call(wire::kFsStat, PathPayload(path), deadline);
  if (!reply.ok()) co_return reply.status();
  ByteReader r(*reply, "stat reply");
  co_return wire::GetStat(r);
}

awaitable<Result<std::vector<FileStat>>> Client::List(std::string path, Deadline deadline) {
  auto reply = co_await Call(wire::kFsList, PathPayload(path), deadline);
  if (!reply.ok()) co_return reply.status();
  ByteReader r(*reply, "list reply");
  auto n = r.Get<uint32_t>();
  if (!n.ok()) co_return n.status();
  std::vector<FileStat> out;
  for (uint32_t i = 0; i < *n; ++i) {
    auto st = wire::GetStat(r);
    if (!st.ok()) co_return st.status();
    out.push_back(std::move(*st));
  }
  co_return out;
}

awaitable<Status> Client::Rename(std::string from, std::string to, Deadline deadline) {
  ByteWriter w;
  w.PutString(from);
  w.PutString(to);
  co_return (co_await Call(wire::kFsRename, w.Take(), deadline)).status();
}

awaitable<Status> Client::Remove(std::string path, Deadline deadline) {
  co_return (co_await Call(wire::kFsRemove, PathPayload(path), deadline)).status();
}

awaitable<Result<uint64_t>> Client::RemoveTrees(std::vector<std::string> paths, Deadline deadline) {
  if (paths.size() > wire::kMaxRemovePaths)
    co_return InvalidArgument("remove of " + std::to_string(paths.size()) +
                              " paths at once (at most " + std::to_string(wire::kMaxRemovePaths) +
                              ")");
  ByteWriter w;
  w.Put<uint32_t>(static_cast<uint32_t>(paths.size()));
  for (const std::string& p : paths) w.PutString(p);
  auto reply = co_await Call(wire::kFsRemoveTrees, w.Take(), deadline);
  if (!reply.ok()) co_return reply.status();
  ByteReader r(*reply, "remove reply");
  co_return r.Get<uint64_t>();
}

awaitable<Status> Client::Seal(std::string path, Deadline deadline) {
  co_return (co_await Call(wire::kFsSeal, PathPayload(path), deadline)).status();
}

awaitable<Result<FsckReport>> Client::Fsck(bool repair, Deadline deadline) {
  ByteWriter w;
  w.Put<uint8_t>(repair ? 1 : 0);
  auto reply = co_await Call(wire::kFsFsck, w.Take(), deadline);
  if (!reply.ok()) co_return reply.status();
  co_return wire::DecodeFsck(*reply);
}

awaitable<Status> Client::WriteParallel(std::string path, uint64_t offset,
                                        std::span<const std::byte> data, int parallel,
                                        Deadline deadline) {
  const uint64_t piece = chunk_size_ ? chunk_size_ : (4u << 20);
  auto self = shared_from_this();
  co_return co_await ForEachPiece(offset, offset + data.size(), piece, parallel,
                                  [&](uint64_t at, uint64_t n) -> awaitable<Status> {
                                    co_return co_await Write(path, at, data.subspan(at - offset, n),
                                                             deadline);
                                  });
}

awaitable<Status> Client::ReadParallel(std::string path, uint64_t offset, uint64_t length,
                                       int parallel, std::vector<std::byte>* out,
                                       Deadline deadline) {
  auto st = co_await Stat(path, deadline);
  if (!st.ok()) co_return st.status();
  const uint64_t end = std::min(st->size, offset + std::min(length, st->size));
  // Every byte is overwritten by a read (or the call fails): no zero fill of a reused buffer.
  out->resize(end > offset ? end - offset : 0);
  co_return co_await ReadRange(std::move(path), offset, *out, parallel, deadline);
}

awaitable<Result<uint64_t>> Client::ReadParallelInto(std::string path, uint64_t offset,
                                                     std::span<std::byte> out, int parallel,
                                                     Deadline deadline) {
  auto st = co_await Stat(path, deadline);
  if (!st.ok()) co_return st.status();
  const uint64_t n = offset >= st->size ? 0 : std::min<uint64_t>(st->size - offset, out.size());
  CO_RETURN_IF_ERROR(co_await ReadRange(std::move(path), offset, out.first(n), parallel, deadline));
  co_return n;
}

awaitable<Status> Client::ReadRange(std::string path, uint64_t offset, std::span<std::byte> out,
                                    int parallel, Deadline deadline) {
  const uint64_t piece = chunk_size_ ? chunk_size_ : (4u << 20);
  auto self = shared_from_this();
  co_return co_await ForEachPiece(
      offset, offset + out.size(), piece, parallel,
      [&](uint64_t at, uint64_t n) -> awaitable<Status> {
        // Straight into `out`: no intermediate buffer.
        auto got = co_await ReadInto(path, at, out.subspan(at - offset, n), deadline);
        if (!got.ok()) co_return got.status();
        if (*got != n) co_return Corruption(path + ": short read at " + std::to_string(at));
        co_return Status();
      });
}

}  // namespace rt::iofs
