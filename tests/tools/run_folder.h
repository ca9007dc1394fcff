// The folder of a `ringtrain train` CLI test: token data to train on, and the per-step losses of
// the metrics files the runs write there.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "data/token_shard.h"
#include "tests/parallel/test_util.h"

namespace rt::testing {

// Creates `dir` afresh (removing what was there) with data/train_000.bin and data/val.bin: the
// learnable PatternTokens(20000, 97, 3) stream, vocabulary 256. Errors: those of writing.
inline Status MakeRunFolder(const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "data");
  auto tokens = PatternTokens(20000, 97, 3);
  RETURN_IF_ERROR(WriteTokenShard((dir / "data/train_000.bin").string(), *tokens, 256));
  return WriteTokenShard((dir / "data/val.bin").string(), *tokens, 256);
}

// Per step, the last loss the metrics file `path` recorded for it (a resumed run appends).
inline std::map<int, double> StepLosses(const std::filesystem::path& path) {
  std::map<int, double> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j["step"].get<int>()] = j["loss"].get<double>();
  }
  return out;
}

}  // namespace rt::testing
