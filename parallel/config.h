// The configuration of one training run: a struct per component (STYLE.md rule 12), each field
// with its default and unit, bound to the TOML keys of configs/*.toml by BindRunConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/status.h"
#include "kernels/tensor.h"
#include "model/config.h"

namespace rt {

// [train]: the step loop.
struct TrainConfig {
  int batch_size = 8;              // rows B per optimizer step; default 8 sequences
  int micro_batches = 1;           // gradient-accumulation splits of a batch; default 1; divides B
  int64_t steps = 1000;            // optimizer steps; default 1000
  int64_t seed = 1337;             // seed of initialisation and data order; default 1337
  std::string precision = "fp32";  // "fp32", "bf16" or "fp16"; default "fp32"
  std::string device = "cpu";      // where the model, optimizer and activations live: "cpu" or
                                   // "cuda" (the current CUDA device); default "cpu"
  bool recompute = false;          // recompute block activations in backward; default false
  int log_every = 10;  // plain-text progress line every N steps (no terminal); default 10
  double loss_scale_init = 65536;  // fp16 only: initial dynamic loss scale; default 65536 (2^16)
  int loss_scale_window = 1000;    // fp16 only: clean steps before the scale doubles; default 1000
};

// [data]: token shards written by `ringtrain data prepare`.
struct DataConfig {
  std::string dir =
      "data/fortunes";             // folder with train_*.bin and val.bin; default "data/fortunes"
  std::string order = "shuffled";  // "sequential" or "shuffled" windows; default "shuffled"
};

// [eval]: validation.
struct EvalConfig {
  int64_t every = 100;  // evaluate every N steps and after the last, 0 = never; default 100
  int batches = 20;     // sequential validation batches per evaluation; default 20
};

// [metrics]: the JSONL metrics file.
struct MetricsConfig {
  std::string path;  // one JSON line per step and evaluation; default "" (no file)
};

// [ckpt]: checkpoints of the whole training state (README "Checkpoints", ckpt/writer.h).
struct CkptConfig {
  std::string dir;             // where checkpoints live: a folder, file://PATH or
                               // ringfs://HOST:PORT/PATH; default "" (no checkpoints)
  int64_t every = 0;           // save every N steps and after the last, 0 = never; default 0
  int keep = 2;                // newest committed checkpoints kept; default 2
  std::string codec = "none";  // "none", "zstd" or "bgzstd" (byte planes, then zstd)
  bool async = true;           // write in the background while training goes on; default true
  int64_t memory_every = 0;    // daemon: snapshot into the daemons' memory (the memory tier,
                               // docs/daemon.md) every N steps, 0 = off; default 0
  int memory_copies = 1;       // daemon: copies of each rank's memory snapshot on other daemons
                               // (the next ones in ring order): 1 survives the loss of any one
                               // daemon, 2 of any two at once; default 1
  int max_failed_saves = 3;    // the run stops with an error after this many consecutive failed
                               // checkpoint saves (each failed one is dropped and training goes
                               // on: docs/formats/checkpoint.md "Failed saves"), 0 = never;
                               // default 3
};

// Everything one run reads from its config file.
struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  OptimConfig optim;
  DataConfig data;
  EvalConfig eval;
  MetricsConfig metrics;
  CkptConfig ckpt;
};

// Binds every field of `config` (its current values become the defaults) to `schema`.
// `config` must outlive `schema`.
void BindRunConfig(RunConfig* config, ConfigSchema* schema);

// Marks the architecture keys (model.n_layer, n_embd, n_head, seq_len) required: a config file
// must state the model; everything else has a default.
void RequireModelKeys(ConfigSchema* schema);

// Checks relations between fields that one key's range cannot express (n_embd divisible by
// n_head, batch_size divisible by micro_batches). Errors: InvalidArgument naming the keys.
Status ValidateRunConfig(const RunConfig& config);

// Loads `path` (empty: only defaults), applies each "key=value" of `overrides` on top, reads it
// into a RunConfig and validates it. Errors name the file, line and key.
Result<RunConfig> LoadRunConfig(const std::string& path, const std::vector<std::string>& overrides);

// The effective config as TOML, for the log at start.
std::string DescribeRunConfig(const RunConfig& config);

// The device train.device names, checked to be usable here (kernels' CheckDeviceAvailable).
// Errors: InvalidArgument, Unimplemented or Unavailable, naming train.device and its value.
Result<Device> TrainDevice(const TrainConfig& config);

}  // namespace rt
