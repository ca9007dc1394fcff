// `ringtrain data prepare`: tokenizes text files into token shards (docs/formats/tokens.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "data/tokenizer.h"

namespace rt {

// What PrepareData does.
struct PrepareOptions {
  std::vector<std::string> inputs;     // files or folders (walked recursively, name order)
  std::string out_dir;                 // created if absent; receives train_NNN.bin and val.bin
  double val_fraction = 0.1;           // tail of each file held out for validation; default 0.1
  int64_t shard_tokens = 100'000'000;  // tokens per training shard; default 100 M
};

// What PrepareData wrote.
struct PrepareSummary {
  int64_t files = 0;         // input files read
  int64_t train_tokens = 0;  // tokens over all train_NNN.bin
  int64_t val_tokens = 0;    // tokens in val.bin
  int train_shards = 0;      // number of train_NNN.bin files
};

// Reads the input files (skipping *.dat and *.u8, the fortune index files), tokenizes them with
// `tokenizer` and writes the shards. Errors: NotFound naming a missing input, InvalidArgument if
// no input file is found or a split would leave the training or validation stream empty, and
// IoError naming a file that cannot be read or written.
Result<PrepareSummary> PrepareData(const PrepareOptions& options, Tokenizer& tokenizer);

// The training shard files of `dir` (train_*.bin in name order). Errors: NotFound if none.
Result<std::vector<std::string>> ListTrainShards(const std::string& dir);

}  // namespace rt
