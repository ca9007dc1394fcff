// The training data loader: cuts a token stream into (inputs, targets) batches in a sequential
// or a seeded shuffled order. Its whole position is a small serialisable state, so a resumed run
// sees exactly the batches an uninterrupted run would.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace rt {

// Order of the training windows.
enum class DataOrder : uint8_t {
  // Batch i, row b covers tokens [s, s+T] with s = (i·B + b)·T: inputs tokens[s .. s+T−1],
  // targets tokens[s+1 .. s+T]; every index is taken modulo the stream length (wrapping).
  kSequential = 0,
  // The stream is cut into W = ⌊(N−1)/T⌋ non-overlapping windows [w·T, w·T+T]; each epoch visits
  // all of them in a permutation (Fisher–Yates) seeded by (seed, epoch). Row r of the run is
  // window perm_{r / W}[r mod W].
  kShuffled = 1,
};

// Parses "sequential" or "shuffled". Errors: InvalidArgument naming the value.
Result<DataOrder> ParseDataOrder(std::string_view name);

// Everything that determines the loader's next batch besides the data and the batch shape.
struct LoaderState {
  uint64_t rows = 0;  // rows (sequences) handed out since the start of the run; a shuffled
                      // loader is in epoch rows / W
  uint64_t seed = 0;  // seed of the shuffled order

  // 16 bytes, little-endian: rows, seed.
  std::vector<std::byte> Serialize() const;
  // Errors: Corruption if `bytes` is not 16 bytes.
  static Result<LoaderState> Deserialize(std::span<const std::byte> bytes);
  bool operator==(const LoaderState&) const = default;
};

// Produces batches of B rows of T tokens. Thread-compatible.
class DataLoader {
 public:
  // `tokens` is the whole stream (at least T+1 tokens). Errors: InvalidArgument if it is too short
  // for one window or B, T are not positive.
  static Result<DataLoader> Create(std::shared_ptr<const std::vector<uint16_t>> tokens, int batch,
                                   int seq_len, DataOrder order, uint64_t seed);

  // Writes the next batch: inputs[B·T] and targets[B·T] (row-major), and advances by B rows.
  void Next(std::span<int32_t> inputs, std::span<int32_t> targets);

  // The position (after the last batch handed out).
  const LoaderState& state() const { return state_; }
  // Continues from `state` (e.g. from a checkpoint).
  void Restore(const LoaderState& state) { state_ = state; }

  int batch() const { return batch_; }
  int seq_len() const { return seq_len_; }
  // Number of shuffled windows W.
  uint64_t windows() const { return windows_; }

 private:
  DataLoader(std::shared_ptr<const std::vector<uint16_t>> tokens, int batch, int seq_len,
             DataOrder order, uint64_t seed);
  uint64_t RowStart(uint64_t row);

  std::shared_ptr<const std::vector<uint16_t>> tokens_;
  int batch_;
  int seq_len_;
  DataOrder order_;
  uint64_t windows_;
  LoaderState state_;
  uint64_t perm_epoch_ = UINT64_MAX;  // epoch whose permutation is in perm_
  std::vector<uint32_t> perm_;
};

// Reads every train_*.bin of `dir` (in order) into one stream. Errors: those of
// ListTrainShards and ReadTokenShard; InvalidArgument if a shard's vocabulary exceeds
// `max_vocab` (the model's vocab_size).
Result<std::shared_ptr<const std::vector<uint16_t>>> LoadTrainTokens(const std::string& dir,
                                                                     uint32_t max_vocab);
// Reads one shard file as a stream (e.g. val.bin), with the same vocabulary check.
Result<std::shared_ptr<const std::vector<uint16_t>>> LoadShardTokens(const std::string& path,
                                                                     uint32_t max_vocab);

}  // namespace rt
