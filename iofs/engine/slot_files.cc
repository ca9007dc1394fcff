#include "iofs/engine/slot_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>

namespace rt::iofs {

SlotFiles::SlotFiles(std::string dir, uint32_t small_size, uint32_t large_size,
                     uint32_t slots_per_file, uint64_t capacity_bytes, UringExecutor* executor)
    : dir_(std::move(dir)),
      small_size_(small_size),
      large_size_(large_size),
      slots_per_file_(slots_per_file),
      capacity_bytes_(capacity_bytes),
      executor_(executor) {}

SlotFiles::~SlotFiles() {
  for (auto& [id, f] : files_) close(f.fd);
}

uint32_t SlotFiles::SlotSize(SizeClass c) const {
  return c == SizeClass::kSmall ? small_size_ : large_size_;
}

uint64_t SlotFiles::FileSize(SizeClass c) const {
  return static_cast<uint64_t>(SlotSize(c)) * slots_per_file_;
}

std::string SlotFiles::PathOf(uint32_t file) const {
  auto it = files_.find(file);
  const int c = it == files_.end() ? 9 : static_cast<int>(it->second.size_class);
  return dir_ + "/" + std::to_string(file) + "." + std::to_string(c) + ".dat";
}

Status SlotFiles::OpenExisting() {
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "opendir " + dir_);
  std::vector<std::pair<uint32_t, int>> found;
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.ends_with(".dat")) continue;
    uint32_t id = 0;
    int c = 0;
    auto r1 = std::from_chars(name.data(), name.data() + name.size(), id);
    if (r1.ec != std::errc() || *r1.ptr != '.') continue;
    auto r2 = std::from_chars(r1.ptr + 1, name.data() + name.size(), c);
    if (r2.ec != std::errc() || c < 0 || c > 1) continue;
    found.emplace_back(id, c);
  }
  closedir(d);
  for (auto [id, c] : found) {
    if (id >= 1024)
      return Corruption("data file id " + std::to_string(id) + " exceeds the file table (1024)");
    File f;
    f.size_class = static_cast<SizeClass>(c);
    const std::string path = dir_ + "/" + std::to_string(id) + "." + std::to_string(c) + ".dat";
    f.fd = open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    if (f.fd < 0) return ErrnoStatus(errno, "open data file " + path + " with O_DIRECT");
    const uint64_t want = FileSize(f.size_class);
    struct stat st {};
    if (fstat(f.fd, &st) != 0) {
      close(f.fd);
      return ErrnoStatus(errno, "fstat " + path);
    }
    if (static_cast<uint64_t>(st.st_size) != want) {
      // Creation was interrupted before fallocate finished; finish it now.
      if (fallocate(f.fd, 0, 0, static_cast<off_t>(want)) != 0) {
        const int err = errno;
        close(f.fd);
        return ErrnoStatus(err, "fallocate " + path);
      }
    }
    f.used.assign(slots_per_file_, false);
    Status s = executor_->RegisterFile(static_cast<int>(id), f.fd);
    if (!s.ok()) {
      close(f.fd);
      return s;
    }
    file_bytes_ += want;
    next_file_ = std::max(next_file_, id + 1);
    files_.emplace(id, std::move(f));
  }
  return Status();
}

Status SlotFiles::MarkUsed(const ChunkLocation& loc, std::string_view what) {
  auto it = files_.find(loc.file);
  if (it == files_.end())
    return Corruption(std::string(what) + " refers to missing data file " + PathOf(loc.file));
  if (it->second.size_class != loc.size_class || loc.slot >= slots_per_file_)
    return Corruption(std::string(what) + " refers to slot " + std::to_string(loc.slot) +
                      " outside data file " + PathOf(loc.file));
  if (it->second.used[loc.slot])
    return Corruption(std::string(what) + ": slot " + std::to_string(loc.slot) + " of " +
                      PathOf(loc.file) + " is held by two chunks");
  it->second.used[loc.slot] = true;
  return Status();
}

void SlotFiles::FinishRebuild() {
  free_[0].clear();
  free_[1].clear();
  // In reverse, so that Allocate() hands out low slots first.
  for (auto it = files_.rbegin(); it != files_.rend(); ++it)
    for (uint32_t s = slots_per_file_; s-- > 0;)
      if (!it->second.used[s])
        free_[static_cast<int>(it->second.size_class)].push_back(
            ChunkLocation{it->second.size_class, it->first, s});
}

Status SlotFiles::CreateFile(SizeClass c) {
  const uint64_t size = FileSize(c);
  if (file_bytes_ + size > capacity_bytes_)
    return Status(StatusCode::kNoSpace, "chunk engine capacity " + std::to_string(capacity_bytes_) +
                                            " bytes reached (" + std::to_string(file_bytes_) +
                                            " in data files)");
  if (next_file_ >= 1024) return Status(StatusCode::kNoSpace, "data file table (1024) is full");
  const uint32_t id = next_file_;
  const std::string path =
      dir_ + "/" + std::to_string(id) + "." + std::to_string(static_cast<int>(c)) + ".dat";
  File f;
  f.size_class = c;
  f.fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0644);
  if (f.fd < 0) return ErrnoStatus(errno, "create data file " + path + " with O_DIRECT");
  if (fallocate(f.fd, 0, 0, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(f.fd);
    unlink(path.c_str());
    return ErrnoStatus(err, "fallocate " + std::to_string(size) + " bytes for " + path);
  }
  // Make the new file's name and size durable before any chunk metadata can point into it.
  if (fsync(f.fd) != 0) {
    const int err = errno;
    close(f.fd);
    unlink(path.c_str());
    return ErrnoStatus(err, "fsync new data file " + path);
  }
  int dfd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  RETURN_IF_ERROR(executor_->RegisterFile(static_cast<int>(id), f.fd));
  f.used.assign(slots_per_file_, false);
  for (uint32_t s = slots_per_file_; s-- > 0;)
    free_[static_cast<int>(c)].push_back(ChunkLocation{c, id, s});
  files_.emplace(id, std::move(f));
  file_bytes_ += size;
  ++next_file_;
  return Status();
}

bool SlotFiles::HasFree(SizeClass c) const { return !free_[static_cast<int>(c)].empty(); }

Result<ChunkLocation> SlotFiles::Allocate(SizeClass c) {
  auto& list = free_[static_cast<int>(c)];
  if (list.empty()) RETURN_IF_ERROR(CreateFile(c));
  ChunkLocation loc = list.back();
  list.pop_back();
  files_.at(loc.file).used[loc.slot] = true;
  return loc;
}

void SlotFiles::Free(const ChunkLocation& loc) {
  files_.at(loc.file).used[loc.slot] = false;
  free_[static_cast<int>(loc.size_class)].push_back(loc);
}

void SlotFiles::Quarantine(const ChunkLocation& loc) { quarantine_.push_back(loc); }

void SlotFiles::RecycleQuarantine() {
  for (const ChunkLocation& loc : quarantine_) Free(loc);
  quarantine_.clear();
}

int SlotFiles::RegisteredSlot(const ChunkLocation& loc) const { return static_cast<int>(loc.file); }

int SlotFiles::Fd(const ChunkLocation& loc) const {
  auto it = files_.find(loc.file);
  return it == files_.end() ? -1 : it->second.fd;
}

uint64_t SlotFiles::Offset(const ChunkLocation& loc) const {
  return static_cast<uint64_t>(loc.slot) * SlotSize(loc.size_class);
}

uint64_t SlotFiles::total_slots() const { return files_.size() * uint64_t{slots_per_file_}; }

uint64_t SlotFiles::used_slots() const {
  uint64_t n = 0;
  // Quarantined slots are free space waiting for readers; they do not count as used.
  n -= quarantine_.size();
  for (const auto& [id, f] : files_)
    for (bool u : f.used) n += u;
  return n;
}

std::vector<ChunkLocation> SlotFiles::UsedLocations() const {
  std::vector<ChunkLocation> out;
  for (const auto& [id, f] : files_)
    for (uint32_t s = 0; s < slots_per_file_; ++s)
      if (f.used[s]) out.push_back(ChunkLocation{f.size_class, id, s});
  return out;
}

}  // namespace rt::iofs
