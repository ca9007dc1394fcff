// OpenStorage: the URI forms, and the helpers shared by the backends.
#include "ckpt/storage.h"

#include <charconv>

#include "ckpt/storage/backends.h"

namespace rt::ckpt {

Status Storage::WriteFile(const std::string& path, std::span<const uint8_t> bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<StorageFileWriter> file, CreateFile(path));
  RETURN_IF_ERROR(file->Append(bytes));
  return file->Commit();
}

Status Storage::RemoveAll(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) RETURN_IF_ERROR(Remove(path));
  return Status();
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "/" + b;
}

namespace internal {

Status CheckPath(const std::string& path, bool allow_root) {
  if (path.empty()) {
    if (allow_root) return Status();
    return InvalidArgument("storage path is empty");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    const std::string_view part(path.data() + start, slash - start);
    if (part.empty() || part == "." || part == "..")
      return InvalidArgument("storage path '" + path +
                             "' must be relative without empty, '.' or '..' parts");
    start = slash + 1;
  }
  return Status();
}

}  // namespace internal

Result<std::shared_ptr<Storage>> OpenStorage(const std::string& uri) {
  return OpenStorage(uri, StorageOptions{});
}

Result<std::shared_ptr<Storage>> OpenStorage(const std::string& uri,
                                             const StorageOptions& options) {
  constexpr std::string_view kFile = "file://";
  constexpr std::string_view kRingfs = "ringfs://";
  constexpr std::string_view kMem = "mem://";
  if (uri.empty()) return InvalidArgument("checkpoint storage URI is empty");
  if (uri.starts_with(kMem)) {
    const std::string name = uri.substr(kMem.size());
    if (name.empty()) return InvalidArgument("storage URI '" + uri + "': mem:// needs a NAME");
    return internal::OpenMemoryStorage(name);
  }
  if (uri.starts_with(kRingfs)) {
    const std::string rest = uri.substr(kRingfs.size());
    const size_t slash = rest.find('/');
    const std::string authority = rest.substr(0, slash);
    if (authority.empty())
      return InvalidArgument("storage URI '" + uri +
                             "': ringfs:///PATH names the embedded chunk store of the ringtraind "
                             "that runs a job; elsewhere give ringfs://HOST:PORT/PATH");
    const size_t colon = authority.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return InvalidArgument("storage URI '" + uri + "': expected ringfs://HOST:PORT/PATH");
    const std::string host = authority.substr(0, colon);
    const std::string port_text = authority.substr(colon + 1);
    uint32_t port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535)
      return InvalidArgument("storage URI '" + uri + "': bad port '" + port_text + "'");
    std::string root = slash == std::string::npos ? "" : rest.substr(slash + 1);
    while (!root.empty() && root.back() == '/') root.pop_back();
    RETURN_IF_ERROR(internal::CheckPath(root, true).WithContext("storage URI '" + uri + "'"));
    return internal::OpenRingfsStorage(host, static_cast<uint16_t>(port), root, uri, options.secret,
                                       options.connect_lazily);
  }
  std::string dir = uri;
  if (uri.starts_with(kFile)) {
    dir = uri.substr(kFile.size());
    if (dir.empty() || dir[0] != '/')
      return InvalidArgument("storage URI '" + uri + "': file:// needs an absolute path");
  } else if (uri.find("://") != std::string::npos) {
    return InvalidArgument("storage URI '" + uri +
                           "': unknown scheme (expected a folder, file://, ringfs:// or mem://)");
  }
  return internal::OpenPosixStorage(dir, uri);
}

bool StorageOutOfReach(const Status& s) {
  switch (s.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kNotServing:
    case StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

}  // namespace rt::ckpt
