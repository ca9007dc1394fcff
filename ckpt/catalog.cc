#include "ckpt/catalog.h"

#include <algorithm>

#include "base/log.h"
#include "ckpt/manifest.h"

namespace rt::ckpt {

Result<std::optional<int64_t>> ReadLatest(Storage& storage) {
  auto bytes = storage.ReadFile(kLatestFile);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound) return std::optional<int64_t>();
    return bytes.status();
  }
  auto step = DecodeLatest(*bytes);
  RETURN_IF_ERROR(step.status().WithContext(storage.uri() + "/" + kLatestFile));
  return std::optional<int64_t>(*step);
}

Result<std::vector<int64_t>> ListStepDirs(Storage& storage) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, storage.List(""));
  std::vector<int64_t> steps;
  for (const std::string& name : names)
    if (auto step = ParseStepDir(name)) steps.push_back(*step);
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<std::vector<int64_t>> ListCommitted(Storage& storage) {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListStepDirs(storage));
  auto latest = ReadLatest(storage);
  if (!latest.ok())
    LOG_WARN("checkpoint storage {}: {}; taking every folder with a {}", storage.uri(),
             latest.status().ToString(), kManifestFile);
  std::vector<int64_t> committed;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (latest.ok() && (!latest->has_value() || *it > **latest)) continue;
    ASSIGN_OR_RETURN(std::vector<std::string> files, storage.List(StepDir(*it)));
    if (std::find(files.begin(), files.end(), kManifestFile) != files.end())
      committed.push_back(*it);
  }
  return committed;
}

}  // namespace rt::ckpt
