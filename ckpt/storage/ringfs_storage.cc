// The ringfs backend: files on a ringfsd cluster through the iofs client. Appended bytes are
// copied into chunk-sized buffers. A file that fits one buffer (the fragments, MANIFEST and
// `latest` of a checkpoint) is stored at Commit with one PutFile: one round trip and one
// namespace change, where a temporary file takes four. A larger one goes to
// "<name>.tmp.<pid>.<n>", created with its first full buffer: each full buffer is written at
// once, asynchronously, up to kInFlight of them in flight (as `ringfs bench` keeps), while the
// caller goes on appending; Commit waits for them, then seals and renames over the final name. The
// buffers lie in memory shared with the ringfsd when it runs on this host (the iofs shared-memory
// path: only control messages cross the socket), else on the heap. Reads are ranged. One io_context
// thread runs the client; the blocking calls here wait for it with a per-call deadline. A call that
// loses the connection (the node or the metadata node behind it went away) drops the client and its
// buffers; the next call connects again, so a storage outlives a restart of the store's nodes.
#include <unistd.h>

#include <algorithm>
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
#include "base/log.h"
#include "base/net/frame_io.h"
#include "ckpt/storage/backends.h"
#include "iofs/client.h"

namespace rt::ckpt::internal {
namespace {

constexpr auto kCallTimeout = std::chrono::seconds(120);
constexpr int kParallel = 8;   // chunk requests in flight for a ranged read
constexpr int kInFlight = 16;  // chunk-sized writes in flight, shared by a storage's files
constexpr uint64_t kSmallFile = 1u << 20;  // ReadFile reads this much before it asks the size

Deadline CallDeadline() { return Deadline::After(kCallTimeout); }

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

// A connected client and the write buffers that belong to it (its shared region, or the heap).
struct ClientAndBuffers {
  std::shared_ptr<iofs::Client> client;
  std::shared_ptr<BufferPool> buffers;  // made at the first write (Connection::Buffers)
};

// The client and the thread that runs its io_context; connects on demand.
class Connection {
 public:
  // `connect_timeout` bounds each connect; after a failed one, calls fail at once with its error
  // for kRetryAfter, so a cluster that is down costs a caller one timeout, not one per call.
  Connection(std::string host, uint16_t port, iofs::ClientOptions options, std::string root,
             std::string uri, std::chrono::milliseconds connect_timeout)
      : work_(boost::asio::make_work_guard(io_)),
        thread_([this] { io_.run(); }),
        host_(std::move(host)),
        port_(port),
        options_(std::move(options)),
        root_(std::move(root)),
        uri_(std::move(uri)),
        connect_timeout_(connect_timeout) {}
  ~Connection() {
    {
      std::lock_guard lock(mu_);
      buffers_.reset();
      client_.reset();
    }
    work_.reset();
    io_.stop();
    thread_.join();
  }
  template <typename T>
  T Run(boost::asio::awaitable<T> op) {
    return net::BlockOn<T>(io_.get_executor(), std::move(op));
  }
  boost::asio::io_context::executor_type executor() { return io_.get_executor(); }
  // The connected client with its write buffers, made now when it has none yet: shared with the
  // server when it is on this host and accepts the mapping, else on the heap. Errors: client()'s.
  Result<ClientAndBuffers> Buffers() {
    ASSIGN_OR_RETURN(std::shared_ptr<iofs::Client> client, this->client());
    std::lock_guard lock(mu_);
    if (client_ == client && buffers_) return ClientAndBuffers{client, buffers_};
    const size_t chunk = client->chunk_size() ? client->chunk_size() : (4u << 20);
    const size_t bytes = kInFlight * chunk;
    std::shared_ptr<BufferPool> pool;
    if (Run(client->MapShared(bytes, CallDeadline())).ok()) {
      pool = std::make_shared<BufferPool>(client->shared(), std::vector<std::byte>(), chunk);
    } else {
      std::vector<std::byte> heap(bytes);
      const std::span<std::byte> memory = heap;
      pool = std::make_shared<BufferPool>(memory, std::move(heap), chunk);
    }
    if (client_ == client) buffers_ = pool;
    return ClientAndBuffers{client, pool};
  }
  // The connected client, connecting first (and creating the root folder) when there is none.
  // Errors: Unavailable or Unauthenticated naming the URI (iofs::Client::Connect), the mkdir's.
  Result<std::shared_ptr<iofs::Client>> client() {
    std::lock_guard lock(mu_);
    if (client_) return client_;
    if (!failed_.ok() && MonoClock::now() < retry_at_) return failed_;
    Status s = Connect();
    if (!s.ok()) {
      failed_ = s;
      retry_at_ = MonoClock::now() + kRetryAfter;
      return s;
    }
    failed_ = Status();
    return client_;
  }
  // The next client() connects even within kRetryAfter of a failed connect.
  void RetryNow() {
    std::lock_guard lock(mu_);
    failed_ = Status();
  }
  // Drops the client when `s` says its connection is gone (Unavailable, Aborted,
  // DeadlineExceeded: a frame past its deadline closes the connection) or the metadata role
  // moved to another node (NotServing: the next connect asks where it is); returns `s`.
  Status Check(Status s) {
    const StatusCode c = s.code();
    if (c == StatusCode::kUnavailable || c == StatusCode::kAborted ||
        c == StatusCode::kDeadlineExceeded || c == StatusCode::kNotServing) {
      std::lock_guard lock(mu_);
      buffers_.reset();
      client_.reset();
    }
    return s;
  }

 private:
  static constexpr auto kRetryAfter = std::chrono::seconds(5);

  // Connects and creates the root folder. REQUIRES mu_.
  Status Connect() {
    auto client =
        Run(iofs::Client::Connect(host_, port_, Deadline::After(connect_timeout_), options_));
    RETURN_IF_ERROR(client.status().WithContext("connect to " + uri_));
    if (!root_.empty()) {
      Status s = Run((*client)->Mkdir("/" + root_, CallDeadline()));
      RETURN_IF_ERROR(s.WithContext("mkdir /" + root_ + " on " + uri_));
    }
    client_ = std::move(*client);
    return Status();
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  const std::string host_;
  const uint16_t port_;
  const iofs::ClientOptions options_;
  const std::string root_;
  const std::string uri_;
  const std::chrono::milliseconds connect_timeout_;
  std::mutex mu_;
  std::shared_ptr<iofs::Client> client_;  // GUARDED_BY(mu_); null: connect at the next call
  std::shared_ptr<BufferPool> buffers_;   // GUARDED_BY(mu_): client_'s write buffers
  Status failed_;                         // GUARDED_BY(mu_): the last connect's error
  MonoTime retry_at_{};                   // GUARDED_BY(mu_): no connect before this
};

class RingfsFileWriter : public StorageFileWriter {
 public:
  // Writes through `io.client` (the one that created the file) and its buffers.
  RingfsFileWriter(std::shared_ptr<Connection> conn, ClientAndBuffers io, std::string tmp,
                   std::string final_path)
      : conn_(std::move(conn)),
        client_(std::move(io.client)),
        pool_(std::move(io.buffers)),
        tmp_(std::move(tmp)),
        final_(std::move(final_path)) {}
  ~RingfsFileWriter() override {
    // The writes in flight use the pool's buffers and this object: they must end first.
    (void)Drain();
    if (!current_.empty()) pool_->Release(current_);
    if (created_ && !committed_)
      (void)conn_->Check(conn_->Run(client_->Remove(tmp_, CallDeadline())));
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
      if (filled_ == current_.size()) RETURN_IF_ERROR(Launch());
    }
    return Status();
  }

  Status Commit() override {
    if (!created_) {
      // The whole file is in the current buffer (or it is empty): one atomic put.
      const std::span<const std::byte> data = current_.first(filled_);
      auto put = conn_->Run(client_->PutFile(final_, data, CallDeadline()));
      RETURN_IF_ERROR(conn_->Check(put.status()).WithContext("put " + final_));
      committed_ = true;
      return Status();
    }
    if (filled_ > 0) RETURN_IF_ERROR(Launch());
    RETURN_IF_ERROR(Drain());
    RETURN_IF_ERROR(
        conn_->Check(conn_->Run(client_->Seal(tmp_, CallDeadline()))).WithContext("seal " + tmp_));
    RETURN_IF_ERROR(conn_->Check(conn_->Run(client_->Rename(tmp_, final_, CallDeadline())))
                        .WithContext("rename " + tmp_ + " to " + final_));
    committed_ = true;
    return Status();
  }

 private:
  // Starts the write of the current buffer's filled bytes, creating the temporary file first if
  // this is the first; the buffer returns to the pool when the write ends. Errors: the create's.
  Status Launch() {
    if (!created_) {
      auto created = conn_->Run(client_->Create(tmp_, CallDeadline()));
      RETURN_IF_ERROR(conn_->Check(created.status()).WithContext("create " + tmp_));
      created_ = true;
    }
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
    boost::asio::co_spawn(conn_->executor(), client_->Write(tmp_, offset, data, CallDeadline()),
                          [this, buffer, offset](std::exception_ptr e, Status s) {
                            if (e)
                              s = Status(StatusCode::kInternal, "ringfs write threw an exception");
                            pool_->Release(buffer);
                            std::lock_guard lock(mu_);
                            if (!s.ok() && first_error_.ok())
                              first_error_ =
                                  s.WithContext("write " + tmp_ + " at " + std::to_string(offset));
                            --in_flight_;
                            cv_.notify_all();
                          });
    return Status();
  }
  // Waits for every write in flight; returns the first failure (Connection::Check sees it here,
  // on the caller's thread: the io thread must never wait for the connection's mutex). Bounded
  // by the writes' own deadlines (CallDeadline): each completes, with an error if late, and the
  // wait cannot end sooner, since the writes use this object and its buffers.
  Status Drain() {
    Status first;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return in_flight_ == 0; });
      first = first_error_;
    }
    return conn_->Check(first);
  }
  Status FirstError() {
    std::lock_guard lock(mu_);
    return first_error_;
  }

  std::shared_ptr<Connection> conn_;
  std::shared_ptr<iofs::Client> client_;  // before pool_: its shared region outlives the pool
  std::shared_ptr<BufferPool> pool_;
  std::string tmp_, final_;
  std::span<std::byte> current_;  // the buffer being filled (empty: none)
  size_t filled_ = 0;
  uint64_t offset_ = 0;   // of the next write
  bool created_ = false;  // tmp_ exists (the first full buffer was launched)
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
    ASSIGN_OR_RETURN(ClientAndBuffers io, conn_->Buffers());
    return std::unique_ptr<StorageFileWriter>(
        new RingfsFileWriter(conn_, std::move(io), tmp, final_path));
  }

  Result<std::vector<uint8_t>> ReadFile(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    // First one read of up to kSmallFile bytes: the server clamps it to the file's size, so a
    // shorter answer is the whole file (a MANIFEST, `latest`, a fragment: one round trip where
    // a stat and a ranged read take three).
    ASSIGN_OR_RETURN(std::shared_ptr<iofs::Client> client, conn_->client());
    auto head = conn_->Run(client->Read(Abs(path), 0, kSmallFile, CallDeadline()));
    if (!head.ok() && head.status().code() == StatusCode::kNotFound)
      return NotFound("checkpoint file " + Name(path) + " does not exist");
    RETURN_IF_ERROR(conn_->Check(head.status()).WithContext("read " + Name(path)));
    const auto* first = reinterpret_cast<const uint8_t*>(head->data());
    if (head->size() < kSmallFile) return std::vector<uint8_t>(first, first + head->size());
    // A larger file: its size, then the rest in parallel ranged reads.
    ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
    if (size < head->size())
      return Corruption("file " + Name(path) + " shrank from " + std::to_string(head->size()) +
                        " to " + std::to_string(size) + " bytes while it was read");
    std::vector<uint8_t> out(size);
    std::copy(first, first + head->size(), out.begin());
    RETURN_IF_ERROR(ReadRange(path, head->size(), std::span(out).subspan(head->size())));
    return out;
  }

  Status ReadRange(const std::string& path, uint64_t offset, std::span<uint8_t> out) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    std::span<std::byte> bytes(reinterpret_cast<std::byte*>(out.data()), out.size());
    ASSIGN_OR_RETURN(std::shared_ptr<iofs::Client> client, conn_->client());
    auto got =
        conn_->Run(client->ReadParallelInto(Abs(path), offset, bytes, kParallel, CallDeadline()));
    RETURN_IF_ERROR(conn_->Check(got.status()).WithContext("read " + Name(path)));
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
    ASSIGN_OR_RETURN(std::shared_ptr<iofs::Client> client, conn_->client());
    auto listed = conn_->Run(client->List(Abs(dir), CallDeadline()));
    if (!listed.ok() && listed.status().code() == StatusCode::kNotFound)
      return std::vector<std::string>();
    RETURN_IF_ERROR(conn_->Check(listed.status()).WithContext("list " + Name(dir)));
    std::vector<std::string> names;
    for (const iofs::FileStat& st : *listed)
      names.push_back(st.path.substr(st.path.rfind('/') + 1));
    std::sort(names.begin(), names.end());
    return names;
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    ASSIGN_OR_RETURN(std::shared_ptr<iofs::Client> client, conn_->client());
    auto st = conn_->Run(client->Stat(Abs(path), CallDeadline()));
    if (!st.ok() && st.status().code() == StatusCode::kNotFound)
      return NotFound("checkpoint file " + Name(path) + " does not exist");
    RETURN_IF_ERROR(conn_->Check(st.status()).WithContext("stat " + Name(path)));
    return st->size;
  }

  Status Remove(const std::string& path) override { return RemoveAll({path}); }

  Status RemoveAll(const std::vector<std::string>& paths) override {
    std::vector<std::string> absolute;
    for (const std::string& path : paths) {
      RETURN_IF_ERROR(CheckPath(path, false));
      absolute.push_back(Abs(path));
    }
    if (absolute.empty()) return Status();
    ASSIGN_OR_RETURN(std::shared_ptr<iofs::Client> client, conn_->client());
    auto removed = conn_->Run(client->RemoveTrees(std::move(absolute), CallDeadline()));
    return conn_->Check(removed.status())
        .WithContext("remove " + (paths.size() == 1 ? Name(paths[0])
                                                    : std::to_string(paths.size()) +
                                                          " files and folders of " + uri_));
  }

  Status RenameAtomic(const std::string& from, const std::string& to) override {
    RETURN_IF_ERROR(CheckPath(from, false));
    RETURN_IF_ERROR(CheckPath(to, false));
    ASSIGN_OR_RETURN(std::shared_ptr<iofs::Client> client, conn_->client());
    return conn_->Check(conn_->Run(client->Rename(Abs(from), Abs(to), CallDeadline())))
        .WithContext("rename " + Name(from) + " to " + Name(to));
  }

  std::string uri() const override { return uri_; }
  void RetryNow() override { conn_->RetryNow(); }

 private:
  std::string Abs(const std::string& rel) const { return "/" + JoinPath(root_, rel); }
  std::string Name(const std::string& rel) const { return uri_ + "/" + rel; }

  std::shared_ptr<Connection> conn_;
  const std::string root_;
  const std::string uri_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace

Result<std::shared_ptr<Storage>> OpenRingfsStorage(const std::string& host, uint16_t port,
                                                   const std::string& root, std::string uri,
                                                   std::shared_ptr<const net::ClusterSecret> secret,
                                                   bool connect_lazily) {
  iofs::ClientOptions options;
  options.secret = std::move(secret);
  // Lazily: a storage with an alternative tier spends at most a second per try on a cluster
  // that is down (connection refused is retried until the deadline: servers may be starting).
  const std::chrono::milliseconds timeout =
      connect_lazily ? std::chrono::seconds(1) : std::chrono::seconds(10);
  auto conn = std::make_shared<Connection>(host, port, std::move(options), root, uri, timeout);
  if (Result<std::shared_ptr<iofs::Client>> client = conn->client(); !client.ok()) {
    if (!connect_lazily) return client.status();
    LOG_WARN("{} (calls connect again; until then they fail)", client.status().ToString());
  }
  return std::shared_ptr<Storage>(new RingfsStorage(std::move(conn), root, std::move(uri)));
}

}  // namespace rt::ckpt::internal
