#include "elastic/membership/state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "base/file.h"
#include "elastic/membership/codec.h"

namespace rt::elastic::membership {
namespace {

Status WriteAllAndSync(int fd, std::span<const std::byte> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "write '" + path + "'");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return ErrnoStatus(errno, "fsync '" + path + "'");
  return Status();
}

}  // namespace

Result<std::optional<DurableState>> LoadDurableState(const std::string& state_dir) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "create membership state_dir '" + state_dir + "'");
  const std::string path = state_dir + "/" + kStateFileName;
  auto bytes = ReadFileBytes(path);
  if (!bytes.ok() && bytes.status().code() == StatusCode::kNotFound)
    return std::optional<DurableState>();
  if (!bytes.ok()) return bytes.status();
  auto state = DecodeDurableState(*bytes);
  if (!state.ok()) return state.status().WithContext("file '" + path + "'");
  return std::optional<DurableState>(std::move(*state));
}

Status SaveDurableState(const std::string& state_dir, const DurableState& state) {
  const std::string path = state_dir + "/" + kStateFileName;
  const std::string tmp = path + ".tmp";
  const std::vector<std::byte> bytes = EncodeDurableState(state);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, "create '" + tmp + "'");
  Status written = WriteAllAndSync(fd, bytes, tmp);
  ::close(fd);
  if (!written.ok()) return written;
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return ErrnoStatus(errno, "rename '" + tmp + "' to '" + path + "'");
  const int dir = ::open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return ErrnoStatus(errno, "open folder '" + state_dir + "'");
  const int synced = ::fsync(dir);
  const int err = errno;
  ::close(dir);
  if (synced != 0) return ErrnoStatus(err, "fsync folder '" + state_dir + "'");
  return Status();
}

}  // namespace rt::elastic::membership
