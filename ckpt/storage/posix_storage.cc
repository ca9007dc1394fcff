// The POSIX folder backend: files written as "<name>.tmp.<pid>.<n>", fsynced, renamed over the
// final name, and the folder fsynced, so a crash leaves the old file or the new one. While a file
// is written, the kernel is asked to start writing back every kWritebackBytes appended (as
// RocksDB's bytes_per_sync does), so that the disk works while the rest is encoded and appended
// and the fsync at Commit waits only for the tail.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>

#include "ckpt/storage/backends.h"

namespace rt::ckpt::internal {
namespace {

namespace fs = std::filesystem;

// Appended bytes after which writeback of them is started (sync_file_range, not waited for).
constexpr uint64_t kWritebackBytes = 1 << 20;

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status FsyncPath(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.fd < 0) return ErrnoStatus(errno, "open folder " + path);
  if (::fsync(fd.fd) != 0) return ErrnoStatus(errno, "fsync folder " + path);
  return Status();
}

// Creates `dir` and its missing parents below `root`, fsyncing each parent of a new folder.
Status MakeDirs(const std::string& root, const std::string& rel_dir) {
  if (rel_dir.empty()) return Status();
  std::string at = root;
  size_t start = 0;
  while (start < rel_dir.size()) {
    size_t slash = rel_dir.find('/', start);
    if (slash == std::string::npos) slash = rel_dir.size();
    const std::string parent = at;
    at += "/" + rel_dir.substr(start, slash - start);
    if (::mkdir(at.c_str(), 0755) == 0) {
      RETURN_IF_ERROR(FsyncPath(parent));
    } else if (errno != EEXIST) {
      return ErrnoStatus(errno, "mkdir " + at);
    }
    start = slash + 1;
  }
  return Status();
}

std::string ParentOf(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string::npos ? "" : rel.substr(0, slash);
}

class PosixFileWriter : public StorageFileWriter {
 public:
  PosixFileWriter(std::string tmp, std::string final_path, std::string dir, int fd)
      : tmp_(std::move(tmp)), final_(std::move(final_path)), dir_(std::move(dir)), fd_(fd) {}
  ~PosixFileWriter() override {
    if (fd_.fd >= 0 && !committed_) ::unlink(tmp_.c_str());
  }

  Status Append(std::span<const uint8_t> bytes) override {
    const uint8_t* p = bytes.data();
    size_t left = bytes.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_.fd, p, std::min<size_t>(left, 1 << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "write " + tmp_);
      }
      p += n;
      left -= static_cast<size_t>(n);
      written_ += static_cast<uint64_t>(n);
    }
    if (written_ - started_ >= kWritebackBytes) {
      // Only a hint: the fsync at Commit makes the file durable whether or not this worked.
      (void)::sync_file_range(fd_.fd, static_cast<off_t>(started_),
                              static_cast<off_t>(written_ - started_), SYNC_FILE_RANGE_WRITE);
      started_ = written_;
    }
    return Status();
  }

  Status Commit() override {
    if (::fsync(fd_.fd) != 0) return ErrnoStatus(errno, "fsync " + tmp_);
    if (::rename(tmp_.c_str(), final_.c_str()) != 0)
      return ErrnoStatus(errno, "rename " + tmp_ + " to " + final_);
    committed_ = true;
    return FsyncPath(dir_);
  }

 private:
  std::string tmp_, final_, dir_;
  Fd fd_;
  bool committed_ = false;
  uint64_t written_ = 0;  // bytes appended
  uint64_t started_ = 0;  // bytes whose writeback was started
};

class PosixStorage : public Storage {
 public:
  PosixStorage(std::string root, std::string uri) : root_(std::move(root)), uri_(std::move(uri)) {}

  Result<std::unique_ptr<StorageFileWriter>> CreateFile(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    RETURN_IF_ERROR(MakeDirs(root_, ParentOf(path)));
    const std::string final_path = Abs(path);
    const std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." +
                            std::to_string(counter_.fetch_add(1));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, "create " + tmp);
    return std::unique_ptr<StorageFileWriter>(
        new PosixFileWriter(tmp, final_path, Abs(ParentOf(path)), fd));
  }

  Result<std::vector<uint8_t>> ReadFile(const std::string& path) override {
    ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
    std::vector<uint8_t> out(size);
    RETURN_IF_ERROR(ReadRange(path, 0, out));
    return out;
  }

  Status ReadRange(const std::string& path, uint64_t offset, std::span<uint8_t> out) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    const std::string abs = Abs(path);
    Fd fd(::open(abs.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) {
      if (errno == ENOENT) return NotFound("checkpoint file " + abs + " does not exist");
      return ErrnoStatus(errno, "open " + abs);
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n =
          ::pread(fd.fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "read " + abs);
      }
      if (n == 0) {
        struct stat st {};
        ::fstat(fd.fd, &st);
        return OutOfRange("file " + abs + " is " + std::to_string(st.st_size) + " bytes: range [" +
                          std::to_string(offset) + ", " + std::to_string(offset + out.size()) +
                          ") runs past its end (truncated?)");
      }
      done += static_cast<size_t>(n);
    }
    return Status();
  }

  Result<std::vector<std::string>> List(const std::string& dir) override {
    RETURN_IF_ERROR(CheckPath(dir, true));
    std::vector<std::string> names;
    std::error_code ec;
    fs::directory_iterator it(Abs(dir), ec);
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory) return names;
      return Status(StatusCode::kIoError, "list " + Abs(dir) + ": " + ec.message());
    }
    for (const auto& entry : it) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  Result<uint64_t> FileSize(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    struct stat st {};
    if (::stat(Abs(path).c_str(), &st) != 0) {
      if (errno == ENOENT) return NotFound("checkpoint file " + Abs(path) + " does not exist");
      return ErrnoStatus(errno, "stat " + Abs(path));
    }
    return static_cast<uint64_t>(st.st_size);
  }

  Status Remove(const std::string& path) override {
    RETURN_IF_ERROR(CheckPath(path, false));
    std::error_code ec;
    fs::remove_all(Abs(path), ec);
    if (ec) return Status(StatusCode::kIoError, "remove " + Abs(path) + ": " + ec.message());
    return FsyncPath(Abs(ParentOf(path)));
  }

  Status RenameAtomic(const std::string& from, const std::string& to) override {
    RETURN_IF_ERROR(CheckPath(from, false));
    RETURN_IF_ERROR(CheckPath(to, false));
    RETURN_IF_ERROR(MakeDirs(root_, ParentOf(to)));
    if (::rename(Abs(from).c_str(), Abs(to).c_str()) != 0)
      return ErrnoStatus(errno, "rename " + Abs(from) + " to " + Abs(to));
    RETURN_IF_ERROR(FsyncPath(Abs(ParentOf(to))));
    return ParentOf(from) == ParentOf(to) ? Status() : FsyncPath(Abs(ParentOf(from)));
  }

  std::string uri() const override { return uri_; }

 private:
  std::string Abs(const std::string& rel) const { return rel.empty() ? root_ : root_ + "/" + rel; }

  const std::string root_;
  const std::string uri_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace

Result<std::shared_ptr<Storage>> OpenPosixStorage(const std::string& root, std::string uri) {
  std::string dir = root;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status(StatusCode::kIoError, "create checkpoint folder " + dir + ": " + ec.message());
  if (!fs::is_directory(dir, ec))
    return InvalidArgument("checkpoint storage " + dir + " is not a folder");
  return std::shared_ptr<Storage>(new PosixStorage(dir, std::move(uri)));
}

}  // namespace rt::ckpt::internal
