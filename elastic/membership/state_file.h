// The durable protocol state of one node in its state_dir (docs/formats/membership_state.md):
// one file, replaced atomically and durably (written to a temporary file, fsynced, renamed over
// the old one, the folder fsynced), so a crash at any point leaves the old or the new state.
#pragma once

#include <optional>
#include <string>

#include "base/status.h"
#include "elastic/membership/types.h"

namespace rt::elastic::membership {

// The file's name inside state_dir.
inline constexpr const char* kStateFileName = "membership.state";

// Reads the state under `state_dir` (creating the folder if missing). nullopt when there is no
// state yet. Errors: Corruption naming the file when it does not verify; IoError naming the path.
Result<std::optional<DurableState>> LoadDurableState(const std::string& state_dir);

// Replaces the state under `state_dir` durably. Blocks for the fsyncs. Errors: IoError naming
// the path and the call that failed.
Status SaveDurableState(const std::string& state_dir, const DurableState& state);

}  // namespace rt::elastic::membership
