// The ringfs backend: files on a ringfsd cluster through the iofs client. Writes go to
// "<name>.tmp.<pid>.<n>" in chunk-sized requests, several in flight, and are sealed and renamed
// over the final name on Commit; reads are ranged. One io_context thread runs the client; the
// blocking calls here wait for it with a per-call deadline.
#include <unistd.h>

#include <atomic>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "base/deadline.h"
#include "base/net/frame_io.h"
#include "ckpt/storage/backends.h"
#include "iofs/client.h"

namespace rt::ckpt::internal {
namespace {

constexpr auto kCallTimeout = std::chrono::seconds(120);
constexpr size_t kWriteBatch = 32 << 20;  // bytes buffered before a parallel write
constexpr int kParallel = 8;              // chunk requests in flight

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
  std::shared_ptr<iofs::Client>& client() { return client_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  std::shared_ptr<iofs::Client> client_;
};

std::span<const std::byte> AsBytes(std::span<const uint8_t> s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

class RingfsFileWriter : public StorageFileWriter {
 public:
  RingfsFileWriter(std::shared_ptr<Connection> conn, std::string tmp, std::string final_path)
      : conn_(std::move(conn)), tmp_(std::move(tmp)), final_(std::move(final_path)) {}
  ~RingfsFileWriter() override {
    if (!committed_) (void)conn_->Run(conn_->client()->Remove(tmp_, CallDeadline()));
  }

  Status Append(std::span<const uint8_t> bytes) override {
    if (buffer_.size() + bytes.size() > kWriteBatch) RETURN_IF_ERROR(Flush());
    if (bytes.size() >= kWriteBatch) return Write(bytes);
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    return Status();
  }

  Status Commit() override {
    RETURN_IF_ERROR(Flush());
    auto& client = *conn_->client();
    RETURN_IF_ERROR(conn_->Run(client.Seal(tmp_, CallDeadline())).WithContext("seal " + tmp_));
    RETURN_IF_ERROR(conn_->Run(client.Rename(tmp_, final_, CallDeadline()))
                        .WithContext("rename " + tmp_ + " to " + final_));
    committed_ = true;
    return Status();
  }

 private:
  Status Flush() {
    if (buffer_.empty()) return Status();
    RETURN_IF_ERROR(Write(buffer_));
    buffer_.clear();
    return Status();
  }
  Status Write(std::span<const uint8_t> bytes) {
    Status s = conn_->Run(
        conn_->client()->WriteParallel(tmp_, offset_, AsBytes(bytes), kParallel, CallDeadline()));
    RETURN_IF_ERROR(s.WithContext("write " + tmp_ + " at " + std::to_string(offset_)));
    offset_ += bytes.size();
    return Status();
  }

  std::shared_ptr<Connection> conn_;
  std::string tmp_, final_;
  std::vector<uint8_t> buffer_;
  uint64_t offset_ = 0;
  bool committed_ = false;
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
    return std::unique_ptr<StorageFileWriter>(new RingfsFileWriter(conn_, tmp, final_path));
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
  std::string Abs(const std::string& rel) const { return "/" + JoinPath(root_, rel); }
  std::string Name(const std::string& rel) const { return uri_ + "/" + rel; }

  std::shared_ptr<Connection> conn_;
  const std::string root_;
  const std::string uri_;
  std::atomic<uint64_t> counter_{0};
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
