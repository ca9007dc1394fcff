// The ringtrain release version: printed by every binary's --version and used as the Debian
// package's version (cmake/Packaging.cmake reads it from this file).
#pragma once

namespace rt {

// Semantic version of this source tree, "MAJOR.MINOR.PATCH".
inline constexpr char kRingtrainVersion[] = "0.1.0";

}  // namespace rt
