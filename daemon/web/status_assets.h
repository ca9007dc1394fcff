// The status page's files (daemon/web/assets/), compiled into the binary by embed_assets.cmake.
#pragma once

#include <string_view>
#include <vector>

namespace rt::web {

// One embedded file.
struct EmbeddedAsset {
  std::string_view path;     // as served: "/index.html", "/status.js"
  std::string_view content;  // the file's bytes
};

// Every embedded file, in the order of daemon/web/CMakeLists.txt. Thread-safe.
const std::vector<EmbeddedAsset>& StatusAssets();

}  // namespace rt::web
