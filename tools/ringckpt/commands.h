// The subcommands of `ringckpt` (tools/ringckpt/main.cc parses the command line).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ckpt/reader.h"
#include "ckpt/storage.h"
#include "parallel/config.h"

namespace ringckpt {

// A checkpoint to read: a storage URI and a step (-1: the newest committed one).
struct Source {
  std::string uri;
  int64_t step = -1;
  rt::ckpt::StorageOptions storage;  // how `uri` is opened (the cluster secret of ringfs://)
};

// Opens the storage and the checkpoint of `source` (the newest committed when step is -1).
rt::Result<std::unique_ptr<rt::ckpt::CheckpointReader>> OpenSource(const Source& source);

// One whole tensor of a checkpoint as float64 values (converted from its dtype).
rt::Result<std::vector<double>> LoadWhole(rt::ckpt::CheckpointReader& reader,
                                          const rt::ckpt::TensorEntry& tensor);

// The run config recorded in checkpoint `m`, or the one in file `path` when given; its text in
// *text. Errors: NotFound for an unreadable file; the config's own (file, line, key).
rt::Result<rt::RunConfig> ConfigOf(const rt::ckpt::Manifest& m, const std::string& path,
                                   std::string* text);

// `inspect`: the committed steps, then step, run, layout, tensors, pieces, sizes and codecs (or
// the whole manifest as JSON). Returns the exit code.
int Inspect(const Source& source, bool json);
// `verify`: every checksum, every element stored exactly once, no stray files; exit 1 naming
// each problem.
int Verify(const Source& source);
// `export`: the fp32 weights (master, or the parameters converted) as a safetensors file whose
// metadata records the architecture of the recorded run config, so `ringtrain eval` and
// `ringtrain sample` read it (tokenizer "byte" for a vocabulary of 256, else "gpt2").
int Export(const Source& source, const std::string& out);
// `diff`: per tensor present in either, the max absolute and relative difference.
int Diff(const Source& a, const Source& b);

// `reshard` options.
struct ReshardOptions {
  std::string to;      // the target layout ("tp=2,dp=2,zero=1")
  std::string out;     // the destination storage URI
  std::string config;  // a run config file overriding the one recorded in the checkpoint
  std::string codec = "none";
  rt::ckpt::StorageOptions storage;  // how `out` is opened (the cluster secret of ringfs://)
};
// `reshard`: writes the checkpoint laid out for the target layout (every target rank's pieces
// stored as that rank holds them), so that loading it there is a straight read.
int Reshard(const Source& source, const ReshardOptions& options);

// Prints "ringckpt: <status>" to stderr; returns 1.
int Fail(const rt::Status& status);

}  // namespace ringckpt
