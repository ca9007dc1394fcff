#include "daemon/snapshot_storage.h"

#include <optional>
#include <random>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "base/net/rpc.h"
#include "ckpt/storage/backends.h"
#include "daemon/control_api.h"
#include "daemon/node_config.h"
#include "daemon/snapshot_wire.h"

namespace rt::daemon {
namespace asio = boost::asio;
namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kCallTimeout = std::chrono::seconds(120);

// The connection to the daemon: one RPC client on its own io thread. Thread-safe: every call
// runs as a coroutine on that thread.
class DaemonChannel {
 public:
  DaemonChannel(std::string address, std::shared_ptr<const net::ClusterSecret> secret)
      : address_(std::move(address)), secret_(std::move(secret)), guard_(io_.get_executor()) {
    thread_ = std::thread([this] { io_.run(); });
  }
  ~DaemonChannel() {
    asio::co_spawn(
        io_,
        [this]() -> asio::awaitable<void> {
          if (client_) client_->Close();
          co_return;
        },
        asio::use_future)
        .get();
    guard_.reset();
    io_.stop();
    thread_.join();
  }

  // Calls `type` with `payload` (connecting first when not connected) and decodes the reply.
  // `body` receives the reply's body. Errors: those of the call, naming the daemon.
  Result<nlohmann::json> Call(uint16_t type, std::vector<std::byte> payload,
                              std::vector<uint8_t>* body = nullptr) {
    nlohmann::json head;
    // (The coroutine returns a Status: use_future needs a default-constructible result.)
    auto call = [this, type, payload = std::move(payload), body,
                 &head]() -> asio::awaitable<Status> {
      const Deadline deadline = Deadline::After(kCallTimeout);
      if (client_ == nullptr || !client_->connected()) {
        CO_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(address_, "daemon address"));
        net::RpcClientOptions o;
        o.secret = secret_;
        o.peer_name = "daemon at " + address_;
        CO_ASSIGN_OR_RETURN(client_,
                            co_await net::RpcClient::Connect(host_port.first, host_port.second,
                                                             Deadline::After(kConnectTimeout), o));
      }
      CO_ASSIGN_OR_RETURN(Frame reply, co_await client_->Call(type, payload, deadline));
      CO_ASSIGN_OR_RETURN(SnapshotMessage m,
                          DecodeSnapshotMessage(reply.payload, "reply of " + address_));
      if (body != nullptr) {
        const auto* p = reinterpret_cast<const uint8_t*>(m.body.data());
        body->assign(p, p + m.body.size());
      }
      head = std::move(m.head);
      co_return Status();
    };
    RETURN_IF_ERROR(asio::co_spawn(io_, std::move(call), asio::use_future).get());
    return head;
  }

  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::shared_ptr<const net::ClusterSecret> secret_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::shared_ptr<net::RpcClient> client_;  // on the io thread only
};

class SnapshotFileWriter : public ckpt::StorageFileWriter {
 public:
  SnapshotFileWriter(std::shared_ptr<DaemonChannel> channel, uint64_t job, std::string path,
                     std::string upload, int copies)
      : channel_(std::move(channel)),
        job_(job),
        path_(std::move(path)),
        upload_(std::move(upload)),
        copies_(copies) {}

  Status Append(std::span<const uint8_t> bytes) override {
    data_.insert(data_.end(), bytes.begin(), bytes.end());
    return Status();
  }

  Status Commit() override {
    size_t offset = 0;
    do {
      const size_t n = std::min(kSnapshotPieceBytes, data_.size() - offset);
      nlohmann::json head = {{"job", job_},      {"path", path_},         {"upload", upload_},
                             {"offset", offset}, {"total", data_.size()}, {"scope", "origin"},
                             {"copies", copies_}};
      const std::span<const std::byte> piece(
          reinterpret_cast<const std::byte*>(data_.data()) + offset, n);
      RETURN_IF_ERROR(channel_->Call(kSnapshotPut, EncodeSnapshotMessage(std::move(head), piece))
                          .status()
                          .WithContext("memory tier: put " + path_));
      offset += n;
    } while (offset < data_.size());
    data_.clear();
    return Status();
  }

 private:
  std::shared_ptr<DaemonChannel> channel_;
  uint64_t job_;
  std::string path_;
  std::string upload_;
  int copies_;  // other daemons that get a copy
  std::vector<uint8_t> data_;
};

class SnapshotStorage : public ckpt::Storage {
 public:
  SnapshotStorage(std::shared_ptr<DaemonChannel> channel, uint64_t job, int copies)
      : channel_(std::move(channel)), job_(job), copies_(copies) {
    std::random_device random;
    upload_prefix_ = std::to_string(random()) + std::to_string(random());
  }

  Result<std::unique_ptr<ckpt::StorageFileWriter>> CreateFile(const std::string& path) override {
    RETURN_IF_ERROR(ckpt::internal::CheckPath(path, false));
    const std::string upload = upload_prefix_ + "." + std::to_string(next_upload_++);
    return std::unique_ptr<ckpt::StorageFileWriter>(
        new SnapshotFileWriter(channel_, job_, path, upload, copies_));
  }

  Result<std::vector<uint8_t>> ReadFile(const std::string& path) override {
    std::vector<uint8_t> out, piece;
    uint64_t size = 0;
    do {
      ASSIGN_OR_RETURN(size, Get(path, out.size(), kSnapshotPieceBytes, &piece));
      out.insert(out.end(), piece.begin(), piece.end());
      if (piece.empty() && out.size() < size)
        return Internal("memory tier: " + Name(path) + ": an empty piece before its end");
    } while (out.size() < size);
    return out;
  }

  Status ReadRange(const std::string& path, uint64_t offset, std::span<uint8_t> out) override {
    std::vector<uint8_t> piece;
    size_t done = 0;
    do {
      const size_t want = std::min(kSnapshotPieceBytes, out.size() - done);
      ASSIGN_OR_RETURN(const uint64_t size, Get(path, offset + done, want, &piece));
      if (offset > size || out.size() > size - offset)
        return OutOfRange("file " + Name(path) + " is " + std::to_string(size) + " bytes: range [" +
                          std::to_string(offset) + ", " + std::to_string(offset + out.size()) +
                          ") runs past its end (truncated?)");
      if (piece.size() != want) return Internal("memory tier: " + Name(path) + ": a short piece");
      std::copy(piece.begin(), piece.end(), out.begin() + static_cast<ptrdiff_t>(done));
      done += want;
    } while (done < out.size());
    return Status();
  }

  Result<std::vector<std::string>> List(const std::string& dir) override {
    RETURN_IF_ERROR(ckpt::internal::CheckPath(dir, true));
    ASSIGN_OR_RETURN(
        nlohmann::json head,
        channel_->Call(kSnapshotList,
                       EncodeSnapshotMessage({{"job", job_}, {"dir", dir}, {"scope", "any"}})));
    auto names = head.find("names");
    if (names == head.end() || !names->is_array())
      return Status(StatusCode::kProtocolError,
                    "memory tier: list of " + Name(dir) + ": reply without names");
    std::vector<std::string> out;
    for (const auto& n : *names)
      if (n.is_string()) out.push_back(n.get<std::string>());
    return out;
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    std::vector<uint8_t> none;
    return Get(path, 0, 0, &none);
  }

  Status Remove(const std::string& path) override {
    RETURN_IF_ERROR(ckpt::internal::CheckPath(path, false));
    return channel_
        ->Call(kSnapshotRemove,
               EncodeSnapshotMessage({{"job", job_}, {"path", path}, {"scope", "any"}}))
        .status();
  }

  Status RenameAtomic(const std::string& from, const std::string&) override {
    return Unimplemented("memory tier: rename of " + Name(from) + " is not supported");
  }

  std::string uri() const override {
    return "memtier://" + channel_->address() + "/job-" + std::to_string(job_);
  }

 private:
  std::string Name(const std::string& path) const { return uri() + "/" + path; }

  // Reads up to `length` bytes at `offset` into `piece`; returns the file's size.
  Result<uint64_t> Get(const std::string& path, uint64_t offset, size_t length,
                       std::vector<uint8_t>* piece) {
    RETURN_IF_ERROR(ckpt::internal::CheckPath(path, false));
    ASSIGN_OR_RETURN(nlohmann::json head, channel_->Call(kSnapshotGet,
                                                         EncodeSnapshotMessage({{"job", job_},
                                                                                {"path", path},
                                                                                {"offset", offset},
                                                                                {"length", length},
                                                                                {"scope", "any"}}),
                                                         piece));
    auto size = head.find("size");
    if (size == head.end() || !size->is_number_unsigned())
      return Status(StatusCode::kProtocolError,
                    "memory tier: get of " + Name(path) + ": reply without a size");
    return size->get<uint64_t>();
  }

  std::shared_ptr<DaemonChannel> channel_;
  uint64_t job_;
  int copies_;
  std::string upload_prefix_;
  std::atomic<uint64_t> next_upload_{1};
};

}  // namespace

Result<std::shared_ptr<ckpt::Storage>> OpenSnapshotStorage(
    const std::string& address, std::shared_ptr<const net::ClusterSecret> secret, uint64_t job,
    int copies) {
  RETURN_IF_ERROR(SplitHostPort(address, "daemon address").status());
  auto channel = std::make_shared<DaemonChannel>(address, std::move(secret));
  auto storage = std::make_shared<SnapshotStorage>(channel, job, copies);
  // Connects now, so that a daemon that cannot be reached fails the open.
  RETURN_IF_ERROR(storage->List("").status().WithContext("open the memory tier"));
  return std::shared_ptr<ckpt::Storage>(std::move(storage));
}

}  // namespace rt::daemon
