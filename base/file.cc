#include "base/file.h"

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

}  // namespace rt
