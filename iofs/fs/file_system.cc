#include "iofs/file_system.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "base/bytes.h"
#include "base/crc32c.h"
#include "base/fault.h"

namespace rt::iofs {
namespace {

constexpr uint32_t kNamespaceMagic = 0x534e5452;  // "RTNS"
constexpr uint16_t kNamespaceVersion = 1;
constexpr uint64_t kRootIno = 1;
// Data keys must stay below the chain layer's pending bit (1 << 62).
constexpr uint64_t kMaxIno = (1ull << (62 - kChunkIndexBits)) - 1;
constexpr size_t kWriteBatch = 8;  // chunks per parallel put
// How far the persisted inode bound runs ahead of the next inode: PutFile hands out inodes below
// it without a namespace write of its own (ReserveInode writes one when they run out).
constexpr uint64_t kInodeReserve = 1024;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Splits a validated absolute path into components.
std::vector<std::string_view> Split(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t at = 1;
  while (at <= path.size()) {
    size_t slash = path.find('/', at);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > at) parts.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  return parts;
}

}  // namespace

Status ValidatePath(std::string_view path) {
  auto bad = [&](std::string why) {
    std::string shown(path.substr(0, 200));
    std::replace(shown.begin(), shown.end(), '\0', '?');
    return InvalidArgument("invalid path '" + shown + "': " + why);
  };
  if (path.empty()) return bad("empty");
  if (path.size() > 4096) return bad("longer than 4096 bytes");
  if (path.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (path[0] != '/') return bad("not absolute (must start with '/')");
  size_t at = 1;
  while (at < path.size()) {
    size_t slash = path.find('/', at);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view part = path.substr(at, slash - at);
    if (part.empty() && slash != path.size()) return bad("empty component ('//')");
    if (part == "." || part == "..") return bad("component '" + std::string(part) + "'");
    if (part.size() > 255) return bad("component longer than 255 bytes");
    at = slash + 1;
  }
  return Status();
}

FileSystem::FileSystem(ObjectStore* store, uint32_t chunk_size)
    : store_(store), chunk_size_(chunk_size) {}
FileSystem::~FileSystem() = default;

Result<std::unique_ptr<FileSystem>> FileSystem::Open(ObjectStore* store, uint32_t chunk_size) {
  if (chunk_size == 0 || chunk_size > store->max_object_size())
    return InvalidArgument("file chunk size " + std::to_string(chunk_size) + " must be in [1, " +
                           std::to_string(store->max_object_size()) + "]");
  std::unique_ptr<FileSystem> fs(new FileSystem(store, chunk_size));
  RETURN_IF_ERROR(fs->Load());
  return fs;
}

Status FileSystem::Load() {
  std::lock_guard lock(mu_);
  inodes_.clear();
  children_.clear();
  inodes_[kRootIno] = Inode{kRootIno, kRootIno, "", true, false, 0, 0, NowNs()};
  std::vector<std::byte> bytes;
  Status s = store_->Get(kNamespaceKey, 0, UINT64_MAX, &bytes);
  if (s.code() == StatusCode::kNotFound) return Persist();
  RETURN_IF_ERROR(s.WithContext("read the namespace"));
  if (bytes.size() < 4) return Corruption("namespace object: truncated");
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  if (Crc32c(bytes.data(), bytes.size() - 4) != crc)
    return Corruption("namespace object: CRC mismatch");
  ByteReader rd(std::span<const std::byte>(bytes.data(), bytes.size() - 4), "namespace object");
  ASSIGN_OR_RETURN(uint32_t magic, rd.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint16_t version, rd.Get<uint16_t>());
  if (magic != kNamespaceMagic || version != kNamespaceVersion)
    return Corruption("namespace object: bad magic or unknown version " + std::to_string(version));
  ASSIGN_OR_RETURN(next_ino_, rd.Get<uint64_t>());
  ino_bound_ = next_ino_;
  ASSIGN_OR_RETURN(uint32_t count, rd.Get<uint32_t>());
  for (uint32_t i = 0; i < count; ++i) {
    Inode n;
    ASSIGN_OR_RETURN(n.ino, rd.Get<uint64_t>());
    ASSIGN_OR_RETURN(n.parent, rd.Get<uint64_t>());
    ASSIGN_OR_RETURN(uint8_t flags, rd.Get<uint8_t>());
    n.is_dir = flags & 1;
    n.sealed = flags & 2;
    ASSIGN_OR_RETURN(n.chunk_size, rd.Get<uint32_t>());
    ASSIGN_OR_RETURN(n.size, rd.Get<uint64_t>());
    ASSIGN_OR_RETURN(n.mtime_ns, rd.Get<int64_t>());
    ASSIGN_OR_RETURN(n.name, rd.GetString(255));
    if (n.ino == kRootIno) continue;
    // A file never grows past (2^kChunkIndexBits − 1) chunks (Write refuses it).
    const uint64_t max_size = uint64_t{n.chunk_size} * ((1ull << kChunkIndexBits) - 1);
    if (n.ino > kMaxIno || n.ino >= next_ino_ || (!n.is_dir && n.chunk_size == 0) ||
        (!n.is_dir && n.size > max_size))
      return Corruption("namespace object: bad inode " + std::to_string(n.ino));
    if (inodes_.count(n.ino) || children_[n.parent].count(n.name))
      return Corruption("namespace object: inode " + std::to_string(n.ino) + " or its name twice");
    children_[n.parent][n.name] = n.ino;
    inodes_[n.ino] = std::move(n);
  }
  for (const auto& [parent, names] : children_)
    if (!inodes_.count(parent) || !inodes_.at(parent).is_dir)
      return Corruption("namespace object: entries under missing folder " + std::to_string(parent));
  // Every inode leads up to the root: a loop of parents would make its path endless.
  for (const auto& [ino, n] : inodes_) {
    uint64_t at = ino;
    for (size_t steps = 0; at != kRootIno && steps <= inodes_.size(); ++steps)
      at = inodes_.at(at).parent;
    if (at != kRootIno)
      return Corruption("namespace object: inode " + std::to_string(ino) +
                        " is not under the root");
  }
  return Status();
}

Result<std::vector<std::byte>> FileSystem::EncodeLocked() const {
  ByteWriter w;
  w.Put<uint32_t>(kNamespaceMagic);
  w.Put<uint16_t>(kNamespaceVersion);
  w.Put<uint64_t>(next_ino_ + kInodeReserve);
  w.Put<uint32_t>(static_cast<uint32_t>(inodes_.size()));
  for (const auto& [ino, n] : inodes_) {
    w.Put<uint64_t>(n.ino);
    w.Put<uint64_t>(n.parent);
    w.Put<uint8_t>(static_cast<uint8_t>((n.is_dir ? 1 : 0) | (n.sealed ? 2 : 0)));
    w.Put<uint32_t>(n.chunk_size);
    w.Put<uint64_t>(n.size);
    w.Put<int64_t>(n.mtime_ns);
    w.PutString(n.name);
  }
  w.Put<uint32_t>(Crc32c(w.bytes().data(), w.size()));
  if (w.size() > store_->max_object_size())
    return Status(StatusCode::kResourceExhausted,
                  "namespace of " + std::to_string(inodes_.size()) + " entries needs " +
                      std::to_string(w.size()) + " bytes, more than one object (" +
                      std::to_string(store_->max_object_size()) + ")");
  return w.Take();
}

Status FileSystem::PutNamespace(std::span<const std::byte> bytes) {
  ObjectPut put{kNamespaceKey, bytes};
  return store_->Put(std::span<const ObjectPut>(&put, 1)).WithContext("write the namespace");
}

Status FileSystem::Persist() {
  // Namespace writes are serialised and each carries the whole in-memory state, so a later write
  // never lands before an earlier one.
  std::lock_guard persist(persist_mu_);
  ASSIGN_OR_RETURN(std::vector<std::byte> bytes, EncodeLocked());
  RETURN_IF_ERROR(PutNamespace(bytes));
  persisted_gen_ = dirty_gen_;
  ino_bound_ = std::max(ino_bound_, next_ino_ + kInodeReserve);
  return Status();
}

Status FileSystem::CommitSizeChange(std::unique_lock<std::mutex>& lock) {
  // Group commit: concurrent writers share one namespace write.
  const uint64_t my_gen = ++dirty_gen_;
  while (persisted_gen_ < my_gen) {
    if (persisting_) {
      persist_cv_.wait(lock);
      if (failed_gen_ >= my_gen) return failed_status_;
      continue;
    }
    persisting_ = true;
    const uint64_t gen = dirty_gen_;
    const uint64_t bound = next_ino_ + kInodeReserve;
    std::unique_lock persist(persist_mu_);  // order: mu_, then persist_mu_
    Result<std::vector<std::byte>> bytes = EncodeLocked();
    lock.unlock();
    Status s = bytes.ok() ? PutNamespace(*bytes) : bytes.status();
    persist.unlock();  // released before mu_ is taken again
    lock.lock();
    persisting_ = false;
    if (s.ok()) {
      persisted_gen_ = std::max(persisted_gen_, gen);
      ino_bound_ = std::max(ino_bound_, bound);
    } else {
      failed_gen_ = gen;
      failed_status_ = s;
    }
    persist_cv_.notify_all();
    if (!s.ok()) return s;
  }
  return Status();
}

Result<uint64_t> FileSystem::Lookup(std::string_view path) const {
  RETURN_IF_ERROR(ValidatePath(path));
  uint64_t ino = kRootIno;
  for (std::string_view part : Split(path)) {
    auto dir = children_.find(ino);
    if (dir == children_.end()) return NotFound("no such file or folder: " + std::string(path));
    auto it = dir->second.find(std::string(part));
    if (it == dir->second.end()) return NotFound("no such file or folder: " + std::string(path));
    ino = it->second;
  }
  return ino;
}

Result<uint64_t> FileSystem::MakeParents(std::string_view path) {
  std::vector<std::string_view> parts = Split(path);
  if (parts.empty()) return InvalidArgument("path '/' has no parent");
  uint64_t ino = kRootIno;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto& names = children_[ino];
    auto it = names.find(std::string(parts[i]));
    if (it == names.end()) {
      if (next_ino_ > kMaxIno)
        return Status(StatusCode::kResourceExhausted, "inode numbers exhausted");
      const uint64_t child = next_ino_++;
      inodes_[child] = Inode{child, ino, std::string(parts[i]), true, false, 0, 0, NowNs()};
      names[std::string(parts[i])] = child;
      ino = child;
    } else {
      if (!inodes_.at(it->second).is_dir)
        return FailedPrecondition("'" + std::string(parts[i]) + "' in " + std::string(path) +
                                  " is a file, not a folder");
      ino = it->second;
    }
  }
  return ino;
}

std::string FileSystem::PathOf(uint64_t ino) const {
  if (ino == kRootIno) return "/";
  std::string path;
  while (ino != kRootIno) {
    const Inode& n = inodes_.at(ino);
    path = "/" + n.name + path;
    ino = n.parent;
  }
  return path;
}

FileStat FileSystem::ToStat(const Inode& n) const {
  return FileStat{PathOf(n.ino), n.ino, n.is_dir, n.size, n.sealed, n.chunk_size, n.mtime_ns};
}

Status FileSystem::ChangeNamespace(const std::function<Status()>& change) {
  auto saved_inodes = inodes_;
  auto saved_children = children_;
  const uint64_t saved_next = next_ino_;
  Status s = change();
  if (s.ok()) s = Persist();
  if (!s.ok()) {
    inodes_ = std::move(saved_inodes);
    children_ = std::move(saved_children);
    next_ino_ = saved_next;
  }
  return s;
}

Result<FileStat> FileSystem::Create(std::string_view path) {
  RETURN_IF_ERROR(ValidatePath(path));
  std::lock_guard lock(mu_);
  if (Lookup(path).ok()) return Status(StatusCode::kAlreadyExists, std::string(path) + " exists");
  uint64_t ino = 0;
  RETURN_IF_ERROR(ChangeNamespace([&]() -> Status {
    ASSIGN_OR_RETURN(const uint64_t parent, MakeParents(path));
    if (next_ino_ > kMaxIno)
      return Status(StatusCode::kResourceExhausted, "inode numbers exhausted");
    ino = next_ino_++;
    const std::string name(Split(path).back());
    inodes_[ino] = Inode{ino, parent, name, false, false, chunk_size_, 0, NowNs()};
    children_[parent][name] = ino;
    return Status();
  }));
  return ToStat(inodes_.at(ino));
}

Status FileSystem::Mkdir(std::string_view path) {
  RETURN_IF_ERROR(ValidatePath(path));
  std::lock_guard lock(mu_);
  if (Result<uint64_t> existing = Lookup(path); existing.ok())
    return inodes_.at(*existing).is_dir ? Status()
                                        : FailedPrecondition(std::string(path) + " is a file");
  std::string with_leaf = std::string(path);
  if (with_leaf.back() != '/') with_leaf += "/";
  return ChangeNamespace([&] { return MakeParents(with_leaf + "x").status(); });
}

Status FileSystem::Write(std::string_view path, uint64_t offset, std::span<const std::byte> data) {
  uint64_t ino = 0, size = 0;
  uint32_t cs = 0;
  uint64_t intent = 0;
  const uint64_t end = offset + data.size();
  {
    std::unique_lock lock(mu_);
    ASSIGN_OR_RETURN(ino, Lookup(path));
    const Inode& n = inodes_.at(ino);
    if (n.is_dir) return FailedPrecondition(std::string(path) + " is a folder");
    if (n.sealed) return FailedPrecondition(std::string(path) + " is sealed");
    cs = n.chunk_size;
    if (end < offset || (end + cs - 1) / cs >= (1ull << kChunkIndexBits))
      return OutOfRange("write of " + std::to_string(data.size()) + " bytes at " +
                        std::to_string(offset) + " exceeds the largest file");
    intent = BeginWriteIntent(lock, ino, offset / cs, (end + cs - 1) / cs);
    // The inode may have changed while BeginWriteIntent waited.
    auto it = inodes_.find(ino);
    if (it == inodes_.end()) {
      lock.unlock();
      EndWriteIntent(intent);
      return NotFound(std::string(path) + " was removed during the write");
    }
    size = it->second.size;
  }
  // Ends the intent on every return, after the new size is committed (or the write failed).
  const IntentScope intent_scope{this, intent};
  std::vector<std::vector<std::byte>> buffers;
  std::vector<ObjectPut> puts;
  auto flush = [&]() -> Status {
    Status s = store_->Put(puts);
    puts.clear();
    buffers.clear();
    return s.WithContext("write " + std::string(path));
  };
  for (uint64_t index = offset / cs; index * cs < end; ++index) {
    const uint64_t base = index * cs;
    const uint64_t a = std::max(offset, base) - base;  // new data range within the chunk
    const uint64_t b = std::min<uint64_t>(end, base + cs) - base;
    const uint64_t existing = size > base ? std::min<uint64_t>(size - base, cs) : 0;
    if (a == 0 && b >= existing) {
      // The write replaces everything the chunk holds: store the caller's bytes, no copy.
      puts.push_back(ObjectPut{DataKey(ino, index), data.subspan(base - offset, b)});
      if (puts.size() == kWriteBatch) RETURN_IF_ERROR(flush());
      continue;
    }
    std::vector<std::byte> chunk;
    if (a > 0 || b < existing) {
      Status s = store_->Get(DataKey(ino, index), 0, existing, &chunk);
      if (s.code() == StatusCode::kNotFound) {
        chunk.clear();
      } else {
        RETURN_IF_ERROR(
            s.WithContext("read chunk " + std::to_string(index) + " of " + std::string(path)));
      }
    }
    chunk.resize(std::max<uint64_t>(std::max<uint64_t>(existing, b), chunk.size()));
    std::memcpy(chunk.data() + a, data.data() + (base + a - offset), b - a);
    buffers.push_back(std::move(chunk));
    puts.push_back(ObjectPut{DataKey(ino, index), buffers.back()});
    // The spans stay valid when `buffers` grows: moving a vector keeps its heap block.
    if (puts.size() == kWriteBatch) RETURN_IF_ERROR(flush());
  }
  if (!puts.empty()) RETURN_IF_ERROR(flush());
  // Tests crash here: the chunks are stored, the file's new size is not (orphans to reclaim).
  RETURN_IF_ERROR(RT_FAULT_POINT("iofs.fs.before_size_commit"));
  std::unique_lock lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return NotFound(std::string(path) + " was removed during the write");
  // On an error the new size may still become durable with a later change: the content of a
  // failed write's range is unspecified, as with POSIX write().
  it->second.size = std::max(it->second.size, end);
  it->second.mtime_ns = NowNs();
  return CommitSizeChange(lock);
}

Result<uint64_t> FileSystem::ReserveInode() {
  if (next_ino_ > kMaxIno) return Status(StatusCode::kResourceExhausted, "inode numbers exhausted");
  if (next_ino_ >= ino_bound_) RETURN_IF_ERROR(Persist());
  return next_ino_++;
}

Result<FileStat> FileSystem::PutFile(std::string_view path, std::span<const std::byte> data) {
  RETURN_IF_ERROR(ValidatePath(path));
  const uint32_t cs = chunk_size_;
  const uint64_t chunks = (data.size() + cs - 1) / cs;
  if (chunks >= (1ull << kChunkIndexBits))
    return OutOfRange("file of " + std::to_string(data.size()) + " bytes exceeds the largest file");
  uint64_t ino = 0;
  uint64_t intent = 0;
  {
    std::unique_lock lock(mu_);
    if (Result<uint64_t> existing = Lookup(path); existing.ok() && inodes_.at(*existing).is_dir)
      return FailedPrecondition(std::string(path) + " is a folder");
    ASSIGN_OR_RETURN(ino, ReserveInode());
    intent = BeginWriteIntent(lock, ino, 0, chunks);
  }
  // The chunks are orphans until the namespace change below; the intent keeps the collector off
  // them meanwhile.
  const IntentScope intent_scope{this, intent};
  std::vector<ObjectPut> puts;
  for (uint64_t index = 0; index < chunks; ++index) {
    const uint64_t base = index * cs;
    puts.push_back(ObjectPut{DataKey(ino, index),
                             data.subspan(base, std::min<uint64_t>(cs, data.size() - base))});
    if (puts.size() == kWriteBatch || index + 1 == chunks) {
      RETURN_IF_ERROR(store_->Put(puts).WithContext("write " + std::string(path)));
      puts.clear();
    }
  }
  std::optional<Inode> replaced;
  FileStat stat;
  {
    std::lock_guard lock(mu_);
    RETURN_IF_ERROR(ChangeNamespace([&]() -> Status {
      if (Result<uint64_t> existing = Lookup(path); existing.ok()) {
        const Inode& e = inodes_.at(*existing);
        if (e.is_dir) return FailedPrecondition(std::string(path) + " is a folder");
        replaced = e;
        children_[e.parent].erase(e.name);
        inodes_.erase(*existing);
      }
      ASSIGN_OR_RETURN(const uint64_t parent, MakeParents(path));
      const std::string name(Split(path).back());
      inodes_[ino] = Inode{ino, parent, name, false, true, cs, data.size(), NowNs()};
      children_[parent][name] = ino;
      return Status();
    }));
    stat = ToStat(inodes_.at(ino));
  }
  // Committed: the replaced file's chunks are garbage now (the collector reclaims them after a
  // crash).
  if (replaced) RETURN_IF_ERROR(DeleteChunks(replaced->ino, replaced->size, replaced->chunk_size));
  return stat;
}

Status FileSystem::Seal(std::string_view path) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(uint64_t ino, Lookup(path));
  Inode& n = inodes_.at(ino);
  if (n.is_dir) return FailedPrecondition(std::string(path) + " is a folder");
  if (n.sealed) return Status();
  n.sealed = true;
  Status s = Persist();
  if (!s.ok()) n.sealed = false;
  return s;
}

Status FileSystem::FileOf(std::string_view path, uint64_t* ino, uint64_t* size,
                          uint32_t* chunk_size) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(*ino, Lookup(path));
  const Inode& n = inodes_.at(*ino);
  if (n.is_dir) return FailedPrecondition(std::string(path) + " is a folder");
  *size = n.size;
  *chunk_size = n.chunk_size;
  return Status();
}

Status FileSystem::Read(std::string_view path, uint64_t offset, uint64_t length,
                        std::vector<std::byte>* out) {
  uint64_t ino = 0, size = 0;
  uint32_t cs = 0;
  RETURN_IF_ERROR(FileOf(path, &ino, &size, &cs));
  out->clear();
  if (offset >= size) return Status();
  const uint64_t end = offset + std::min(length, size - offset);
  if (const uint64_t index = offset / cs; end <= (index + 1) * cs) {
    // The whole request lies in one chunk: read straight into `out` (not zero-filled first).
    Status s = store_->Get(DataKey(ino, index), offset - index * cs, end - offset, out);
    if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kOutOfRange) {
      out->clear();
    } else {
      RETURN_IF_ERROR(
          s.WithContext("read chunk " + std::to_string(index) + " of " + std::string(path)));
    }
    out->resize(end - offset, std::byte{0});  // a hole or a short chunk reads as zeros
    return Status();
  }
  out->resize(end - offset);
  ASSIGN_OR_RETURN(uint64_t n, ReadInto(path, offset, *out));
  out->resize(n);
  return Status();
}

Result<uint64_t> FileSystem::ReadInto(std::string_view path, uint64_t offset,
                                      std::span<std::byte> out) {
  uint64_t ino = 0, size = 0;
  uint32_t cs = 0;
  RETURN_IF_ERROR(FileOf(path, &ino, &size, &cs));
  if (offset >= size) return uint64_t{0};
  const uint64_t end = offset + std::min<uint64_t>(out.size(), size - offset);
  for (uint64_t index = offset / cs; index * cs < end; ++index) {
    const uint64_t base = index * cs;
    const uint64_t a = std::max(offset, base) - base;
    const uint64_t b = std::min(end, base + cs) - base;
    std::span<std::byte> dst = out.subspan(base + a - offset, b - a);
    Result<size_t> got = store_->GetInto(DataKey(ino, index), a, dst);
    size_t n = 0;
    if (got.ok()) {
      n = *got;
    } else if (got.status().code() != StatusCode::kNotFound &&
               got.status().code() != StatusCode::kOutOfRange) {
      return got.status().WithContext("read chunk " + std::to_string(index) + " of " +
                                      std::string(path));
    }
    std::fill(dst.begin() + n, dst.end(), std::byte{0});  // a hole or a short chunk reads as zeros
  }
  return end - offset;
}

Result<std::vector<ReadPiece>> FileSystem::TryPlanRead(std::string_view path, uint64_t offset,
                                                       uint64_t length) {
  uint64_t ino = 0, size = 0;
  uint32_t cs = 0;
  {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return Status(StatusCode::kUnavailable, "the namespace is busy", true);
    ASSIGN_OR_RETURN(ino, Lookup(path));
    const Inode& n = inodes_.at(ino);
    if (n.is_dir) return FailedPrecondition(std::string(path) + " is a folder");
    size = n.size;
    cs = n.chunk_size;
  }
  std::vector<ReadPiece> pieces;
  if (offset >= size) return pieces;
  const uint64_t end = offset + std::min(length, size - offset);
  for (uint64_t index = offset / cs; index * cs < end; ++index) {
    const uint64_t base = index * cs;
    const uint64_t a = std::max(offset, base) - base;
    const uint64_t b = std::min(end, base + cs) - base;
    pieces.push_back(ReadPiece{DataKey(ino, index), a, b - a, base + a - offset});
  }
  return pieces;
}

Result<FileStat> FileSystem::Stat(std::string_view path) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(uint64_t ino, Lookup(path));
  return ToStat(inodes_.at(ino));
}

Result<std::vector<FileStat>> FileSystem::List(std::string_view path) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(uint64_t ino, Lookup(path));
  if (!inodes_.at(ino).is_dir) return FailedPrecondition(std::string(path) + " is a file");
  std::vector<FileStat> out;
  auto it = children_.find(ino);
  if (it != children_.end())
    for (const auto& [name, child] : it->second) out.push_back(ToStat(inodes_.at(child)));
  return out;
}

void FileSystem::AppendChunkKeys(uint64_t ino, uint64_t size, uint32_t cs,
                                 std::vector<ObjectKey>& keys) {
  for (uint64_t index = 0; index * cs < size; ++index) keys.push_back(DataKey(ino, index));
}

Status FileSystem::DeleteChunks(uint64_t ino, uint64_t size, uint32_t cs) {
  std::vector<ObjectKey> keys;
  AppendChunkKeys(ino, size, cs, keys);
  return store_->Delete(keys);
}

Status FileSystem::Rename(std::string_view from, std::string_view to) {
  RETURN_IF_ERROR(ValidatePath(to));
  std::optional<Inode> replaced;
  {
    std::lock_guard lock(mu_);
    ASSIGN_OR_RETURN(uint64_t ino, Lookup(from));
    if (ino == kRootIno) return InvalidArgument("cannot rename /");
    const std::string src = PathOf(ino);
    std::string dst(to);
    while (dst.size() > 1 && dst.back() == '/') dst.pop_back();
    if (dst == src) return Status();
    if (inodes_.at(ino).is_dir && dst.starts_with(src + "/"))
      return InvalidArgument("cannot move folder " + src + " into itself (" + dst + ")");
    RETURN_IF_ERROR(ChangeNamespace([&]() -> Status {
      if (Result<uint64_t> existing = Lookup(dst); existing.ok()) {
        const Inode& e = inodes_.at(*existing);
        if (e.is_dir) return FailedPrecondition("destination " + dst + " is a folder");
        if (inodes_.at(ino).is_dir)
          return FailedPrecondition("cannot replace file " + dst + " with a folder");
        replaced = e;
        children_[e.parent].erase(e.name);
        inodes_.erase(*existing);
      }
      ASSIGN_OR_RETURN(const uint64_t parent, MakeParents(dst));
      Inode& n = inodes_.at(ino);
      children_[n.parent].erase(n.name);
      n.parent = parent;
      n.name = std::string(Split(dst).back());
      n.mtime_ns = NowNs();
      children_[parent][n.name] = ino;
      return Status();
    }));
  }
  // Committed: the replaced file's chunks are garbage now (fsck reclaims them after a crash).
  if (replaced) return DeleteChunks(replaced->ino, replaced->size, replaced->chunk_size);
  return Status();
}

Status FileSystem::Remove(std::string_view path) {
  Inode removed;
  {
    std::lock_guard lock(mu_);
    ASSIGN_OR_RETURN(uint64_t ino, Lookup(path));
    if (ino == kRootIno) return InvalidArgument("cannot remove /");
    auto kids = children_.find(ino);
    if (kids != children_.end() && !kids->second.empty())
      return FailedPrecondition("folder " + std::string(path) + " is not empty");
    removed = inodes_.at(ino);
    children_[removed.parent].erase(removed.name);
    children_.erase(ino);
    inodes_.erase(ino);
    if (Status s = Persist(); !s.ok()) {
      inodes_[ino] = removed;
      children_[removed.parent][removed.name] = ino;
      return s;
    }
  }
  if (removed.is_dir) return Status();
  return DeleteChunks(removed.ino, removed.size, removed.chunk_size);
}

Result<uint64_t> FileSystem::RemoveTrees(std::span<const std::string> paths) {
  std::vector<Inode> removed;
  {
    std::lock_guard lock(mu_);
    RETURN_IF_ERROR(ChangeNamespace([&]() -> Status {
      for (const std::string& path : paths) {
        Result<uint64_t> top = Lookup(path);
        if (!top.ok() && top.status().code() == StatusCode::kNotFound) continue;
        RETURN_IF_ERROR(top.status());
        if (*top == kRootIno) return InvalidArgument("cannot remove /");
        children_[inodes_.at(*top).parent].erase(inodes_.at(*top).name);
        std::vector<uint64_t> pending = {*top};
        while (!pending.empty()) {
          const uint64_t ino = pending.back();
          pending.pop_back();
          if (auto kids = children_.find(ino); kids != children_.end()) {
            for (const auto& [name, kid] : kids->second) pending.push_back(kid);
            children_.erase(kids);
          }
          removed.push_back(inodes_.at(ino));
          inodes_.erase(ino);
        }
      }
      return Status();
    }));
  }
  std::vector<ObjectKey> keys;
  for (const Inode& n : removed)
    if (!n.is_dir) AppendChunkKeys(n.ino, n.size, n.chunk_size, keys);
  RETURN_IF_ERROR(store_->Delete(keys));
  return removed.size();
}

uint64_t FileSystem::BeginWriteIntent(std::unique_lock<std::mutex>& lock, uint64_t ino,
                                      uint64_t first, uint64_t end) {
  collected_cv_.wait(lock, [&] { return !collecting_.contains(ino); });
  const uint64_t id = next_intent_++;
  intents_[id] = WriteIntent{ino, first, end};
  return id;
}

void FileSystem::EndWriteIntent(uint64_t id) {
  std::lock_guard lock(mu_);
  intents_.erase(id);
}

bool FileSystem::IsOrphanLocked(ObjectKey key) const {
  const uint64_t ino = key >> kChunkIndexBits;
  const uint64_t index = key & ((1ull << kChunkIndexBits) - 1);
  for (const auto& [id, w] : intents_)
    if (w.ino == ino && index >= w.first && index < w.end) return false;
  auto it = inodes_.find(ino);
  return it == inodes_.end() || it->second.is_dir ||
         index * it->second.chunk_size >= it->second.size;
}

Status FileSystem::FindOrphans(std::vector<ObjectKey>* orphans, std::vector<ObjectKey>* owned) {
  // Keys first, then the namespace: a chunk written after the listing is not in it, and one
  // whose write committed since is judged by the size it committed.
  ASSIGN_OR_RETURN(std::vector<ObjectKey> keys, store_->Keys());
  std::lock_guard lock(mu_);
  for (ObjectKey key : keys) {
    if (key == kNamespaceKey) continue;
    if (IsOrphanLocked(key)) {
      orphans->push_back(key);
    } else if (owned) {
      owned->push_back(key);
    }
  }
  return Status();
}

Result<uint64_t> FileSystem::DeleteOrphans(const std::vector<ObjectKey>& candidates) {
  std::vector<ObjectKey> doomed;
  std::vector<uint64_t> inos;
  {
    // Judged again now: a write may have begun or committed since the candidates were found.
    // Writes into these inodes wait until the deletions are done (BeginWriteIntent).
    std::lock_guard lock(mu_);
    for (ObjectKey key : candidates) {
      if (!IsOrphanLocked(key)) continue;
      doomed.push_back(key);
      const uint64_t ino = key >> kChunkIndexBits;
      if (inos.empty() || inos.back() != ino) {
        inos.push_back(ino);
        ++collecting_[ino];
      }
    }
  }
  Status s = doomed.empty() ? Status() : store_->Delete(doomed);
  {
    std::lock_guard lock(mu_);
    for (uint64_t ino : inos)
      if (--collecting_[ino] == 0) collecting_.erase(ino);
  }
  collected_cv_.notify_all();
  RETURN_IF_ERROR(s.WithContext("delete " + std::to_string(doomed.size()) + " orphan chunks"));
  return static_cast<uint64_t>(doomed.size());
}

Result<uint64_t> FileSystem::CollectOrphans() {
  std::vector<ObjectKey> orphans;
  RETURN_IF_ERROR(FindOrphans(&orphans, nullptr));
  if (orphans.empty()) return uint64_t{0};
  return DeleteOrphans(orphans);
}

Result<FsckReport> FileSystem::Fsck(bool repair) {
  FsckReport report;
  std::map<uint64_t, Inode> inodes;
  {
    std::lock_guard lock(mu_);
    inodes = inodes_;
  }
  for (const auto& [ino, n] : inodes) {
    if (ino == kRootIno) continue;
    if (n.is_dir) {
      ++report.dirs;
      continue;
    }
    ++report.files;
  }
  std::vector<ObjectKey> orphans, owned;
  RETURN_IF_ERROR(FindOrphans(&orphans, &owned));
  report.orphan_chunks = orphans.size();
  std::vector<std::byte> data;
  for (ObjectKey key : owned) {
    const uint64_t ino = key >> kChunkIndexBits;
    const uint64_t index = key & ((1ull << kChunkIndexBits) - 1);
    // Verified whether or not a write runs on it (a running write's chunk may not exist yet).
    if (!inodes.contains(ino)) continue;
    ++report.chunks;
    Status s = store_->Get(key, 0, UINT64_MAX, &data);
    if (s.ok() || s.code() == StatusCode::kNotFound) continue;
    std::lock_guard lock(mu_);
    report.problems.push_back(
        (inodes_.contains(ino) ? PathOf(ino) : "inode " + std::to_string(ino)) + " chunk " +
        std::to_string(index) + ": " + s.ToString());
  }
  for (std::string& p : store_->CheckStorage()) report.problems.push_back(std::move(p));
  if (repair && !orphans.empty()) RETURN_IF_ERROR(DeleteOrphans(orphans).status());
  return report;
}

}  // namespace rt::iofs
