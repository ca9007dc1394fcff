// The ringfs backend: files on a ringfsd cluster through the iofs client. Writes go to
// "<name>.tmp.<pid>.<n>": appended bytes are copied into chunk-sized buffers, and each full
// buffer is written at once, asynchronously, up to kInFlight of them in flight (as `ringfs bench`
// keeps), while the caller goes on appending; Commit waits for them, then seals and renames over
// the final name. The buffers lie in memory shared with the ringfsd when it runs on this host
// (the iofs shared-memory path: only control messages cross the socket), else on the heap. Reads
// are ranged. One io_context thread runs the client; the blocking calls here wait for it with a
// per-call deadline.
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "base/deadline.h"
#include "base/net/frame_io.h"
#include "ckpt/storage/backends.h"
#include "iofs/client.h"

namespace rt::ckpt::internal {
namespace {

constexpr auto kCallTimeout = std::chrono::seconds(120);
constexpr int kParallel = 8;   // chunk requests in flight for a ranged read
constexpr int kInFlight = 16;  // chunk-sized writes in flight, shared by a storage's files

Deadline CallDeadline() { return Deadline::After(kCallTimeout); }

// The client and the thread that runs its io_context.
class Connection {
 public:
  Connection() : work_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~Connection() {
    client_.reset();
    work_.reset();
    io_.stop();
    thread_.join();
  }
  template <typename T>
  T Run(boost::asio::awaitable<T> op) {
    return net::BlockOn<T>(io_.get_executor(), std::move(op));
  }
  boost::asio::io_context::executor_type executor() { return io_.get_executor(); }
  std::shared_ptr<iofs::Client>& client() { return client_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  std::shared_ptr<iofs::Client> client_;
};

// The buffers of the writes in flight: kInFlight chunk-sized slices of one allocation (shared
// with the server, or heap). Thread-safe.
class BufferPool {
 public:
  // `memory` is not owned (the client's shared region); `heap` is kept when it is the memory.
  BufferPool(std::span<std::byte> memory, std::vector<std::byte> heap, size_t buffer_bytes)
      : heap_(std::move(heap)) {
    for (size_t at = 0; at + buffer_bytes <= memory.size(); at += buffer_bytes)
      free_.push_back(memory.subspan(at, buffer_bytes));
  }
  // A free buffer, waiting for one until `deadline`. Errors: DeadlineExceeded.
  Result<std::span<std::byte>> Acquire(Deadline deadline) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline.when(), [&] { return !free_.empty(); }))
      return DeadlineExceeded("no free ringfs write buffer by the deadline");
    const std::span<std::byte> buffer = free_.back();
    free_.pop_back();
    return buffer;
  }
  void Release(std::span<std::byte> buffer) {
    std::lock_guard lock(mu_);
    free_.push_back(buffer);
    cv_.notify_one();
  }

 private:
  std::vector<std::byte> heap_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::span<std::byte>> free_;  // GUARDED_BY(mu_)
};

class RingfsFileWriter : public StorageFileWriter {
 public:
  RingfsFileWriter(std::shared_ptr<Connection> conn, std::shared_ptr<BufferPool> pool,
                   std::string tmp, std::string final_path)
      : conn_(std::move(conn)),
        pool_(std::move(pool)),
        tmp_(std::move(tmp)),
        final_(std::move(final_path)) {}
  ~RingfsFileWriter() override {
    // The writes in flight use the pool's buffers and this object: they must end first.
    (void)Drain();
    if (!current_.empty()) pool_->Release(current_);
    if (!committed_) (void)conn_->Run(conn_->client()->Remove(tmp_, CallDeadline()));
  }

  Status Append(std::span<const uint8_t> bytes) override {
    while (!bytes.empty()) {
      RETURN_IF_ERROR(FirstError());
      if (current_.empty()) {
        ASSIGN_OR_RETURN(current_, pool_->Acquire(CallDeadline()));
        filled_ = 0;
      }
      const size_t n = std::min(bytes.size(), current_.size() - filled_);
      std::memcpy(current_.data() + filled_, bytes.data(), n);
      filled_ += n;
      bytes = bytes.subspan(n);
      if (filled_ == current_.size()) Launch();
    }
    return Status();
  }

  Status Commit() override {
    if (filled_ > 0) Launch();
    RETURN_IF_ERROR(Drain());
    auto& client = *conn_->client();
    RETURN_IF_ERROR(conn_->Run(client.Seal(tmp_, CallDeadline())).WithContext("seal " + tmp_));
    RETURN_IF_ERROR(conn_->Run(client.Rename(tmp_, final_, CallDeadline()))
                        .WithContext("rename " + tmp_ + " to " + final_));
    committed_ = true;
    return Status();
  }

 private:
  // Starts the write of the current buffer's filled bytes; the buffer returns to the pool when
  // the write ends.
  void Launch() {
    const std::span<std::byte> buffer = current_;
    const std::span<const std::byte> data = buffer.first(filled_);
    const uint64_t offset = offset_;
    offset_ += filled_;
    current_ = {};
    filled_ = 0;
    {
      std::lock_guard lock(mu_);
      ++in_flight_;
    }
    boost::asio::co_spawn(
        conn_->executor(), conn_->client()->Write(tmp_, offset, data, CallDeadline()),
        [this, buffer, offset](std::exception_ptr e, Status s) {
          if (e) s = Status(StatusCode::kInternal, "ringfs write threw an exception");
          pool_->Release(buffer);
          std::lock_guard lock(mu_);
          if (!s.ok() && first_error_.ok())
            first_error_ = s.WithContext("write " + tmp_ + " at " + std::to_string(offset));
          --in_flight_;
          cv_.notify_all();
        });
  }
  // Waits for every write in flight; returns the first failure.
  Status Drain() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ == 0; });
    return first_error_;
  }
  Status FirstError() {
    std::lock_guard lock(mu_);
    return first_error_;
  }

  std::shared_ptr<Connection> conn_;
  std::shared_ptr<BufferPool> pool_;
  std::string tmp_, final_;
  std::span<std::byte> current_;  // the buffer being filled (empty: none)
  size_t filled_ = 0;
  uint64_t offset_ = 0;  // of the next write
  bool committed_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;   // GUARDED_BY(mu_)
  Status first_error_;  // GUARDED_BY(mu_)
};

class RingfsStorage : public Storage {
 public:
  RingfsStorage(std::shared_ptr<Connection> conn, std::string root, std::string uri)
      : conn_(std::move(conn)), root_(std::move(root)), uri_(std::move(uri)) {}

  Result<std::unique_ptr<StorageFileWriter>> CreateFile(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    const std::string final_path = Abs(path);
    const std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." +
                            std::to_string(counter_.fetch_add(1));
    auto created = conn_->Run(client().Create(tmp, CallDeadline()));
    RETURN_IF_ERROR(created.status().WithContext("create " + tmp + " on " + uri_));
    return std::unique_ptr<StorageFileWriter>(new RingfsFileWriter(conn_, Pool(), tmp, final_path));
  }

  Result<std::vector<uint8_t>> ReadFile(const std::string& path) override {
    ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
    std::vector<uint8_t> out(size);
    RETURN_IF_ERROR(ReadRange(path, 0, out));
    return out;
  }

  Status ReadRange(const std::string& path, uint64_t offset, std::span<uint8_t> out) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    std::span<std::byte> bytes(reinterpret_cast<std::byte*>(out.data()), out.size());
    auto got =
        conn_->Run(client().ReadParallelInto(Abs(path), offset, bytes, kParallel, CallDeadline()));
    RETURN_IF_ERROR(got.status().WithContext("read " + Name(path)));
    if (*got != out.size()) {
      ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
      return OutOfRange("file " + Name(path) + " is " + std::to_string(size) + " bytes: range [" +
                        std::to_string(offset) + ", " + std::to_string(offset + out.size()) +
                        ") runs past its end (truncated?)");
    }
    return Status();
  }

  Result<std::vector<std::string>> List(const std::string& dir) override {
    RETURN_IF_ERROR(CheckPath(dir, true));
    auto listed = conn_->Run(client().List(Abs(dir), CallDeadline()));
    if (!listed.ok() && listed.status().code() == StatusCode::kNotFound)
      return std::vector<std::string>();
    RETURN_IF_ERROR(listed.status().WithContext("list " + Name(dir)));
    std::vector<std::string> names;
    for (const iofs::FileStat& st : *listed)
      names.push_back(st.path.substr(st.path.rfind('/') + 1));
    std::sort(names.begin(), names.end());
    return names;
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    auto st = conn_->Run(client().Stat(Abs(path), CallDeadline()));
    if (!st.ok() && st.status().code() == StatusCode::kNotFound)
      return NotFound("checkpoint file " + Name(path) + " does not exist");
    RETURN_IF_ERROR(st.status().WithContext("stat " + Name(path)));
    return st->size;
  }

  Status Remove(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    auto st = conn_->Run(client().Stat(Abs(path), CallDeadline()));
    if (!st.ok() && st.status().code() == StatusCode::kNotFound) return Status();
    RETURN_IF_ERROR(st.status().WithContext("stat " + Name(path)));
    if (st->is_dir) {
      ASSIGN_OR_RETURN(std::vector<std::string> names, List(path));
      for (const std::string& name : names) RETURN_IF_ERROR(Remove(JoinPath(path, name)));
    }
    Status s = conn_->Run(client().Remove(Abs(path), CallDeadline()));
    if (s.code() == StatusCode::kNotFound) return Status();
    return s.WithContext("remove " + Name(path));
  }

  Status RenameAtomic(const std::string& from, const std::string& to) override {
    RETURN_IF_ERROR(CheckPath(from, false));
    RETURN_IF_ERROR(CheckPath(to, false));
    return conn_->Run(client().Rename(Abs(from), Abs(to), CallDeadline()))
        .WithContext("rename " + Name(from) + " to " + Name(to));
  }

  std::string uri() const override { return uri_; }

 private:
  iofs::Client& client() { return *conn_->client(); }
  // The write buffers, made at the first file written: shared with the server when it is on
  // this host and accepts the mapping, else on the heap.
  std::shared_ptr<BufferPool> Pool() {
    std::lock_guard lock(pool_mu_);
    if (pool_) return pool_;
    const size_t chunk = client().chunk_size() ? client().chunk_size() : (4u << 20);
    const size_t bytes = kInFlight * chunk;
    if (conn_->Run(client().MapShared(bytes, CallDeadline())).ok()) {
      pool_ = std::make_shared<BufferPool>(client().shared(), std::vector<std::byte>(), chunk);
    } else {
      std::vector<std::byte> heap(bytes);
      const std::span<std::byte> memory = heap;
      pool_ = std::make_shared<BufferPool>(memory, std::move(heap), chunk);
    }
    return pool_;
  }
  std::string Abs(const std::string& rel) const { return "/" + JoinPath(root_, rel); }
  std::string Name(const std::string& rel) const { return uri_ + "/" + rel; }

  std::shared_ptr<Connection> conn_;
  const std::string root_;
  const std::string uri_;
  std::atomic<uint64_t> counter_{0};
  std::mutex pool_mu_;
  std::shared_ptr<BufferPool> pool_;  // GUARDED_BY(pool_mu_)
};

}  // namespace

Result<std::shared_ptr<Storage>> OpenRingfsStorage(
    const std::string& host, uint16_t port, const std::string& root, std::string uri,
    std::shared_ptr<const net::ClusterSecret> secret) {
  auto conn = std::make_shared<Connection>();
  iofs::ClientOptions options;
  options.secret = std::move(secret);
  auto client = conn->Run(
      iofs::Client::Connect(host, port, Deadline::After(std::chrono::seconds(10)), options));
  RETURN_IF_ERROR(client.status().WithContext("connect to " + uri));
  conn->client() = std::move(*client);
  if (!root.empty()) {
    Status s = conn->Run(conn->client()->Mkdir("/" + root, CallDeadline()));
    RETURN_IF_ERROR(s.WithContext("mkdir /" + root + " on " + uri));
  }
  return std::shared_ptr<Storage>(new RingfsStorage(std::move(conn), root, std::move(uri)));
}

}  // namespace rt::ckpt::internal
