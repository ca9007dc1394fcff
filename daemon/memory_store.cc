#include "daemon/memory_store.h"

#include <set>

#include "ckpt/manifest.h"
#include "ckpt/storage/backends.h"

namespace rt::daemon {

int64_t SnapshotStepOf(const std::string& path) {
  const size_t slash = path.find('/');
  if (slash == std::string::npos) return -1;
  const std::optional<int64_t> step = ckpt::ParseStepDir(path.substr(0, slash));
  return step ? *step : -1;
}

bool IsSharedSnapshotFile(const std::string& path) { return path.find('/') == std::string::npos; }

Status MemoryStore::Put(uint64_t job, const std::string& path, SnapshotBytes bytes) {
  RETURN_IF_ERROR(ckpt::internal::CheckPath(path, false).WithContext("memory tier put"));
  Job& j = jobs_[job];
  const int64_t step = SnapshotStepOf(path);
  if (step >= 0 && step < j.newest_complete)
    return FailedPrecondition("memory tier: job " + std::to_string(job) + " file " + path +
                              " is older than its complete snapshot of step " +
                              std::to_string(j.newest_complete) + " (dropped)");
  auto [it, fresh] = j.files.try_emplace(path, bytes);
  if (!fresh) {
    bytes_ -= it->second->size();
    it->second = bytes;
  }
  bytes_ += bytes->size();
  if (path == ckpt::kLatestFile) {
    // The commit point of a snapshot: `latest` names it first. Older step folders go.
    Result<std::vector<int64_t>> steps = ckpt::DecodeLatest(*bytes);
    if (steps.ok() && !steps->empty()) {
      j.newest_complete = steps->front();
      std::set<std::string> older;
      for (const auto& [name, data] : j.files) {
        const int64_t s = SnapshotStepOf(name);
        if (s >= 0 && s < j.newest_complete) older.insert(name.substr(0, name.find('/') + 1));
      }
      for (const std::string& prefix : older) Drop(j, prefix);
    }
  }
  return Status();
}

SnapshotBytes MemoryStore::Get(uint64_t job, const std::string& path) const {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return nullptr;
  auto it = j->second.files.find(path);
  return it == j->second.files.end() ? nullptr : it->second;
}

std::vector<std::string> MemoryStore::List(uint64_t job, const std::string& dir) const {
  std::set<std::string> names;
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return {};
  const std::string prefix = dir.empty() ? "" : dir + "/";
  for (auto it = j->second.files.lower_bound(prefix);
       it != j->second.files.end() && it->first.starts_with(prefix); ++it) {
    const std::string rest = it->first.substr(prefix.size());
    names.insert(rest.substr(0, rest.find('/')));
  }
  return {names.begin(), names.end()};
}

void MemoryStore::Remove(uint64_t job, const std::string& path) {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return;
  if (path.empty()) {
    Drop(j->second, "");
    jobs_.erase(j);
    return;
  }
  auto it = j->second.files.find(path);
  if (it != j->second.files.end()) {
    bytes_ -= it->second->size();
    j->second.files.erase(it);
  }
  Drop(j->second, path + "/");
  if (path == ckpt::kLatestFile) j->second.newest_complete = -1;
}

void MemoryStore::Drop(Job& job, const std::string& prefix) {
  auto it = job.files.lower_bound(prefix);
  while (it != job.files.end() && it->first.starts_with(prefix)) {
    bytes_ -= it->second->size();
    it = job.files.erase(it);
  }
}

size_t MemoryStore::files() const {
  size_t n = 0;
  for (const auto& [id, job] : jobs_) n += job.files.size();
  return n;
}

int64_t MemoryStore::NewestComplete(uint64_t job) const {
  auto j = jobs_.find(job);
  return j == jobs_.end() ? -1 : j->second.newest_complete;
}

}  // namespace rt::daemon
