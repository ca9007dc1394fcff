#include "base/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace rt {

Result<std::vector<std::byte>> ReadFileBytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    if (errno == ENOENT) return NotFound("file '" + path + "' does not exist");
    return ErrnoStatus(errno, "open '" + path + "'");
  }
  std::vector<std::byte> bytes;
  std::byte chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0)
    bytes.insert(bytes.end(), chunk, chunk + n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return ErrnoStatus(EIO, "read '" + path + "'");
  return bytes;
}

Status WriteFileBytes(const std::string& path, std::span<const std::byte> bytes) {
  // A name of this process's own, so that concurrent writers of one path never share it.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return ErrnoStatus(errno, "create '" + tmp + "'");
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    return ErrnoStatus(errno ? errno : EIO, "write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return ErrnoStatus(errno, "rename '" + tmp + "' to '" + path + "'");
  return Status();
}

Status CreateNewFile(const std::string& path, std::string_view text, unsigned mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST)
      return Status(StatusCode::kAlreadyExists, "'" + path + "' exists already; not replacing it");
    return ErrnoStatus(errno, "create '" + path + "'");
  }
  const bool wrote = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!wrote || !synced) {
    const int err = errno ? errno : EIO;
    unlink(path.c_str());
    return ErrnoStatus(err, "write '" + path + "'");
  }
  return Status();
}

}  // namespace rt
