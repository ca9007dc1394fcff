// Whole-file reads and atomic whole-file writes.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rt {

// Reads a whole file into memory. Errors: NotFound if it does not exist, IoError naming the path.
Result<std::vector<std::byte>> ReadFileBytes(const std::string& path);

// Writes `bytes` to `path` through a temporary file and a rename, so a reader sees the old or the
// new content, never a mix; concurrent writers from different processes each rename a file of
// their own (the last one wins). Errors: IoError naming the path.
Status WriteFileBytes(const std::string& path, std::span<const std::byte> bytes);

// Creates `path` holding `text` with permission bits `mode` (e.g. 0600 for a key) and syncs it,
// never replacing a file: AlreadyExists ("'PATH' exists already; not replacing it") when one is
// there. A failed write removes the new file. Errors: IoError naming the path.
Status CreateNewFile(const std::string& path, std::string_view text, unsigned mode);

}  // namespace rt
