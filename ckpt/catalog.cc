#include "ckpt/catalog.h"

#include <algorithm>

#include "base/log.h"
#include "ckpt/manifest.h"

namespace rt::ckpt {

Result<std::optional<std::vector<int64_t>>> ReadLatest(Storage& storage) {
  auto bytes = storage.ReadFile(kLatestFile);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound)
      return std::optional<std::vector<int64_t>>();
    return bytes.status();
  }
  auto steps = DecodeLatest(*bytes);
  RETURN_IF_ERROR(steps.status().WithContext(storage.uri()));
  return std::optional<std::vector<int64_t>>(std::move(*steps));
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
  auto latest = ReadLatest(storage);
  std::vector<int64_t> candidates;
  if (latest.ok()) {
    if (!latest->has_value()) return candidates;
    candidates = **latest;
  } else {
    LOG_WARN("checkpoint storage {}: {}; taking every folder with a {}", storage.uri(),
             latest.status().ToString(), kManifestFile);
    ASSIGN_OR_RETURN(candidates, ListStepDirs(storage));
    std::reverse(candidates.begin(), candidates.end());
  }
  std::vector<int64_t> committed;
  for (int64_t step : candidates) {
    ASSIGN_OR_RETURN(std::vector<std::string> files, storage.List(StepDir(step)));
    if (std::find(files.begin(), files.end(), kManifestFile) != files.end())
      committed.push_back(step);
  }
  return committed;
}

}  // namespace rt::ckpt
