// The ringfs client library: file operations against a ringfsd cluster over base/net RPC, as
// Boost.Asio C++20 coroutines. Connect() asks the given server for the cluster and connects to
// the metadata node; every call takes a deadline; many calls may be in flight on one Client
// (they are pipelined on its connection), and PutFile/GetFile keep `parallel` chunk-sized
// requests in flight. Use a Client on one executor (see base/net/rpc.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "base/deadline.h"
#include "base/status.h"
#include "iofs/file_system.h"

namespace rt::net {
class ClusterSecret;
class RpcClient;
}  // namespace rt::net

namespace rt::iofs {
namespace shm {
class ClientRegion;
}

// How a Client connects.
struct ClientOptions {
  // The cluster secret proven to every ringfsd node this client connects to (base/net/auth.h);
  // null (default) for a cluster that runs without one.
  std::shared_ptr<const net::ClusterSecret> secret = nullptr;
};

class Client : public std::enable_shared_from_this<Client> {
 public:
  // Connects to host:port, asks it for the cluster map and connects to the metadata node, both
  // authenticated with options.secret when set. Errors: Unauthenticated naming the node when
  // it requires a secret this client does not have, or does not hold the same one; Unavailable
  // or DeadlineExceeded when it cannot be reached.
  static boost::asio::awaitable<Result<std::shared_ptr<Client>>> Connect(std::string host,
                                                                         uint16_t port,
                                                                         Deadline deadline,
                                                                         ClientOptions options);
  // The same without a secret. (Not a default argument: GCC 12 miscompiles coroutine parameters
  // initialised from default arguments with non-trivial types.)
  static boost::asio::awaitable<Result<std::shared_ptr<Client>>> Connect(std::string host,
                                                                         uint16_t port,
                                                                         Deadline deadline);
  // Closes the connection; calls still in flight fail with Aborted.
  ~Client();

  // The file operations of FileSystem (iofs/file_system.h), with the same contracts and errors,
  // plus Unavailable/DeadlineExceeded from the connection.
  boost::asio::awaitable<Result<FileStat>> Create(std::string path, Deadline deadline);
  boost::asio::awaitable<Status> Mkdir(std::string path, Deadline deadline);
  // Writes `data` at `offset` (one request; keep it at most a few chunks).
  boost::asio::awaitable<Status> Write(std::string path, uint64_t offset,
                                       std::span<const std::byte> data, Deadline deadline);
  // Reads up to `length` bytes at `offset` (at most 64 MiB per call).
  boost::asio::awaitable<Result<std::vector<std::byte>>> Read(std::string path, uint64_t offset,
                                                              uint64_t length, Deadline deadline);
  // Reads up to out.size() bytes (at most 64 MiB) at `offset` straight into `out` (zero-copy
  // receive); returns the bytes read. The data is checked against the server's CRC32C
  // (ChecksumMismatch if it was corrupted on the way).
  boost::asio::awaitable<Result<size_t>> ReadInto(std::string path, uint64_t offset,
                                                  std::span<std::byte> out, Deadline deadline);
  boost::asio::awaitable<Result<FileStat>> Stat(std::string path, Deadline deadline);
  boost::asio::awaitable<Result<std::vector<FileStat>>> List(std::string path, Deadline deadline);
  boost::asio::awaitable<Status> Rename(std::string from, std::string to, Deadline deadline);
  boost::asio::awaitable<Status> Remove(std::string path, Deadline deadline);
  // FileSystem::RemoveTrees: each path (a file, or a folder with everything under it) in one
  // namespace change, missing ones skipped; at most wire::kMaxRemovePaths. Returns how many files
  // and folders were deleted.
  boost::asio::awaitable<Result<uint64_t>> RemoveTrees(std::vector<std::string> paths,
                                                       Deadline deadline);
  boost::asio::awaitable<Status> Seal(std::string path, Deadline deadline);
  // FileSystem::PutFile: `data` (at most a few chunks: one request) becomes the whole content of
  // a sealed file at `path`, atomically replacing what was there, in one round trip.
  boost::asio::awaitable<Result<FileStat>> PutFile(std::string path,
                                                   std::span<const std::byte> data,
                                                   Deadline deadline);
  boost::asio::awaitable<Result<FsckReport>> Fsck(bool repair, Deadline deadline);

  // Writes `data` at `offset` of an existing file as chunk-sized requests, `parallel` in flight.
  boost::asio::awaitable<Status> WriteParallel(std::string path, uint64_t offset,
                                               std::span<const std::byte> data, int parallel,
                                               Deadline deadline);
  // Reads [offset, offset + length) as chunk-sized requests, `parallel` in flight, into `out`
  // (resized to what the file holds).
  boost::asio::awaitable<Status> ReadParallel(std::string path, uint64_t offset, uint64_t length,
                                              int parallel, std::vector<std::byte>* out,
                                              Deadline deadline);

  // Shared-memory data path (iofs/net/shm.h), for a client on the metadata node's host: maps
  // `bytes` of memory shared with the server. Afterwards Write/ReadInto (and the parallel forms)
  // whose data lies inside shared() send only small control messages; the server reads and
  // writes the bytes in place. Other buffers keep using TCP. Errors: Unavailable when the server
  // is not on this host or offers no shared-memory socket (everything keeps working over TCP).
  boost::asio::awaitable<Status> MapShared(size_t bytes, Deadline deadline);
  // The shared bytes (empty before MapShared succeeded).
  std::span<std::byte> shared() const;
  // Writes and reads served through the shared region so far.
  uint64_t shared_requests() const { return shared_requests_; }

  // Reads [offset, offset + out.size()) into `out` as chunk-sized requests, `parallel` in flight;
  // returns the bytes read (less at the end of the file). With `out` inside shared() no data
  // crosses the socket.
  boost::asio::awaitable<Result<uint64_t>> ReadParallelInto(std::string path, uint64_t offset,
                                                            std::span<std::byte> out, int parallel,
                                                            Deadline deadline);

  // The file chunk size of the cluster (the natural request size).
  uint32_t chunk_size() const { return chunk_size_; }
  // "host:port" of the metadata node.
  const std::string& server() const { return server_; }

 private:
  Client() = default;
  boost::asio::awaitable<Result<std::vector<std::byte>>> Call(uint16_t type,
                                                              std::vector<std::byte> payload,
                                                              Deadline deadline);
  // Reads [offset, offset + out.size()) of a file that holds them into `out`.
  boost::asio::awaitable<Status> ReadRange(std::string path, uint64_t offset,
                                           std::span<std::byte> out, int parallel,
                                           Deadline deadline);
  // Write and ReadInto through the shared region.
  boost::asio::awaitable<Status> WriteShared(std::string path, uint64_t offset,
                                             std::span<const std::byte> data, Deadline deadline);
  boost::asio::awaitable<Result<size_t>> ReadShared(std::string path, uint64_t offset,
                                                    std::span<std::byte> out, Deadline deadline);
  std::shared_ptr<net::RpcClient> rpc_;
  uint32_t chunk_size_ = 0;
  std::string server_;
  std::string host_;  // the metadata node
  uint16_t port_ = 0;
  std::unique_ptr<shm::ClientRegion> shared_;
  uint64_t shared_requests_ = 0;
};

}  // namespace rt::iofs
