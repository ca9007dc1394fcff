#include "bench/chaos/ckpt_files.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace rt::chaos {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFiller = "/filler";

// "step-000000000030" → 30; -1 for other names.
int64_t StepOfName(const std::string& name) {
  if (name.size() != 17 || !name.starts_with("step-")) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string StepName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%012lld", static_cast<long long>(step));
  return name;
}

// The step folders newer than every committed step, with their file names.
std::vector<std::pair<int64_t, std::set<std::string>>> PendingSaves(const std::string& dir) {
  const std::vector<int64_t> committed = CommittedSteps(dir);
  const int64_t newest = committed.empty() ? -1 : committed.front();
  std::vector<std::pair<int64_t, std::set<std::string>>> saves;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t step = StepOfName(entry.path().filename().string());
    if (step <= newest) continue;
    std::set<std::string> names;
    for (const auto& file : fs::directory_iterator(entry.path(), ec))
      names.insert(file.path().filename().string());
    saves.emplace_back(step, std::move(names));
  }
  return saves;
}

}  // namespace

std::vector<int64_t> CommittedSteps(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::vector<int64_t> steps;
  for (std::string line; std::getline(in, line);) {
    const int64_t step = StepOfName(line);
    if (step < 0) return {};
    steps.push_back(step);
  }
  return steps;
}

int64_t NewestIntact(const std::string& dir, const std::set<int64_t>& corrupted) {
  for (int64_t step : CommittedSteps(dir))
    if (!corrupted.contains(step)) return step;
  return -1;
}

std::optional<SaveWindow> FindShardWrite(const std::string& dir) {
  for (const auto& [step, names] : PendingSaves(dir)) {
    for (const std::string& name : names) {
      int rank = 0;
      if (std::sscanf(name.c_str(), "rank-%d.data", &rank) != 1 || !name.ends_with(".data"))
        continue;
      char frag[32];
      std::snprintf(frag, sizeof(frag), "rank-%05d.frag", rank);
      if (!names.contains(frag)) return SaveWindow{step, rank};
    }
  }
  return std::nullopt;
}

std::optional<SaveWindow> FindManifestWrite(const std::string& dir, int world) {
  for (const auto& [step, names] : PendingSaves(dir)) {
    const auto frags = std::count_if(names.begin(), names.end(), [](const std::string& n) {
      return n.starts_with("rank-") && n.ends_with(".frag");
    });
    if (frags == world && !names.contains("MANIFEST")) return SaveWindow{step, 0};
  }
  return std::nullopt;
}

Result<std::string> FlipByte(const std::string& dir, int64_t step, size_t pick, uint64_t offset) {
  const std::string folder = dir + "/" + StepName(step);
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("rank-") && name.ends_with(".data") && entry.file_size(ec) > 0)
      files.push_back(name);
  }
  if (files.empty()) return NotFound("no non-empty data file in " + folder);
  std::sort(files.begin(), files.end());
  const std::string path = folder + "/" + files[pick % files.size()];
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return ErrnoStatus(errno, "open " + path);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  const off_t at = static_cast<off_t>(offset % static_cast<uint64_t>(size));
  unsigned char byte = 0;
  bool ok = ::pread(fd, &byte, 1, at) == 1;
  byte ^= 0xFF;
  ok = ok && ::pwrite(fd, &byte, 1, at) == 1 && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return ErrnoStatus(err, "flip a byte of " + path);
  return StepName(step) + "/" + files[pick % files.size()] + " at byte " + std::to_string(at);
}

Status FillDisk(const std::string& dir) {
  const std::string path = dir + kFiller;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create " + path);
  struct statvfs st {};
  if (::fstatvfs(fd, &st) == 0 && st.f_bavail > 0)
    (void)::posix_fallocate(fd, 0, static_cast<off_t>(st.f_bavail * st.f_frsize));
  // Whatever fallocate left (metadata blocks, rounding): plain writes until ENOSPC.
  std::vector<char> zeros(64 << 10, 0);
  ::lseek(fd, 0, SEEK_END);
  for (size_t chunk = zeros.size(); chunk > 0;) {
    const ssize_t n = ::write(fd, zeros.data(), chunk);
    if (n >= 0) continue;
    if (errno == ENOSPC) {
      chunk /= 2;
      continue;
    }
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "fill " + path);
  }
  ::close(fd);
  return Status();
}

Status FreeDisk(const std::string& dir) {
  const std::string path = dir + kFiller;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, "remove " + path);
  return Status();
}

}  // namespace rt::chaos
