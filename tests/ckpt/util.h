// Helpers of the ckpt tests: temp folders, saving and loading synthetic layouts in-process (one
// CheckpointWriter per rank, all on one storage), and byte surgery on stored files.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ckpt/reader.h"
#include "ckpt/writer.h"
#include "tests/ckpt/synthetic.h"
#include "tests/iofs/test_util.h"

namespace rt::ckpt::testing {

// Temp folders: the iofs tests' (the ringfs backend needs a real filesystem too).
using ::rt::iofs::testing::TempDir;

// Save options of the tests.
struct SaveSpec {
  Codec codec = Codec::kNone;
  size_t piece_bytes = 4 << 20;
  int keep = 3;
  std::string run_id = "test-run";
};

// Saves the reference state of `layout` as `step` from every rank (async writers, then Wait).
inline Status SaveLayout(std::shared_ptr<Storage> storage, const SynthLayout& layout, int64_t step,
                         const SaveSpec& spec = {}) {
  std::vector<SynthRank> ranks;
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < layout.world(); ++r) {
    ranks.push_back(MakeRank(layout, r, true));
    WriterOptions o;
    o.storage = storage;
    o.rank = r;
    o.world = layout.world();
    o.run_id = spec.run_id;
    o.layout = layout.Name();
    o.config_toml = "[model]\nname = \"synthetic\"\n";
    o.codec = spec.codec;
    o.piece_bytes = spec.piece_bytes;
    o.keep = spec.keep;
    o.commit_timeout_ms = 60000;
    ASSIGN_OR_RETURN(auto w, CheckpointWriter::Create(o));
    writers.push_back(std::move(w));
  }
  for (int r = 0; r < layout.world(); ++r)
    RETURN_IF_ERROR(writers[r]->Save(step, ranks[r].shards, EngineStateOf(step)));
  Status first;
  for (auto& w : writers) {
    Status s = w->Wait(Deadline::AfterMs(120000));
    if (first.ok()) first = s;
  }
  return first;
}

// Loads `step` into every rank of `layout` and checks every element against the reference.
inline Status LoadAndCheck(std::shared_ptr<Storage> storage, const SynthLayout& layout,
                           int64_t step) {
  for (int r = 0; r < layout.world(); ++r) {
    SynthRank rank = MakeRank(layout, r, false);
    ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(storage, step));
    RETURN_IF_ERROR(reader->Load(rank.shards));
    const std::string bad = CheckRank(rank);
    if (!bad.empty())
      return Internal("rank " + std::to_string(r) + " of " + layout.Name() + ": " + bad);
  }
  return Status();
}

// A whole text file (for printing logs on failure).
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Flips one byte of a file.
inline void FlipByte(const std::string& path, uint64_t offset) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr) << path;
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  std::fputc(c ^ 0x40, f);
  std::fclose(f);
}

}  // namespace rt::ckpt::testing
