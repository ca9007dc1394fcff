// The checkpoints in a storage. The `latest` file lists the committed checkpoints, newest first
// (docs/formats/checkpoint.md "Commit"); every other step folder is a leftover of an aborted
// save (or one being written) and is removed by the next commit of a newer step.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/status.h"
#include "ckpt/storage.h"

namespace rt::ckpt {

// The committed checkpoints' steps, newest first: those `latest` lists whose folder holds a
// MANIFEST. When `latest` is unreadable, every folder with a MANIFEST (with a warning); when
// there is no `latest`, none. Errors: those of the storage.
Result<std::vector<int64_t>> ListCommitted(Storage& storage);

// The steps `latest` lists, newest first; nullopt when there is no `latest`. Errors: Corruption
// for a damaged one, those of the storage.
Result<std::optional<std::vector<int64_t>>> ReadLatest(Storage& storage);

// Every step folder in the storage (committed or not), ascending.
Result<std::vector<int64_t>> ListStepDirs(Storage& storage);

}  // namespace rt::ckpt
