// The checkpoints in a storage: which are committed (docs/formats/checkpoint.md "Commit"), and
// which folders and files are leftovers of aborted saves.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/status.h"
#include "ckpt/storage.h"

namespace rt::ckpt {

// The committed checkpoints' steps, newest first: folders holding a MANIFEST whose step is at
// most the one `latest` names (when `latest` is missing or unreadable, every folder with a
// MANIFEST, with a warning). Errors: those of the storage.
Result<std::vector<int64_t>> ListCommitted(Storage& storage);

// The step `latest` names; nullopt when there is no `latest`. Errors: Corruption for a bad one.
Result<std::optional<int64_t>> ReadLatest(Storage& storage);

// Every step folder in the storage (committed or not), ascending.
Result<std::vector<int64_t>> ListStepDirs(Storage& storage);

}  // namespace rt::ckpt
