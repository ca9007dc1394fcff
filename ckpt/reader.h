// CheckpointReader: loads a committed checkpoint into any layout's shards (DESIGN.md
// "Checkpoints"). Every destination shard is filled from the stored pieces it intersects
// (boxes x flat ranges); only those pieces are read, each verified against its CRC32C.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "ckpt/shard.h"
#include "ckpt/storage.h"

namespace rt::ckpt {

// Reads one checkpoint. Thread-compatible (Load from one thread at a time).
class CheckpointReader {
 public:
  // Reads and checks the MANIFEST of `step`. Errors: NotFound when there is none; Corruption /
  // FailedPrecondition (newer format version) from decoding, naming the file.
  static Result<std::unique_ptr<CheckpointReader>> Open(std::shared_ptr<Storage> storage,
                                                        int64_t step);

  // step, run id, config_toml, layout, engine_state, tensors.
  const Manifest& manifest() const { return manifest_; }

  // Fills every dest shard's view (any replica, any device) in place from the stored pieces it
  // intersects, checking every CRC32C. Errors name the file, tensor and byte range: NotFound for
  // a tensor the checkpoint lacks, FailedPrecondition for a shape or dtype that differs,
  // Corruption for a CRC mismatch, a bad encoding or a destination the pieces do not cover
  // exactly, OutOfRange for a truncated file, NotFound for a missing file.
  Status Load(const StateShards& dest);

  // Pieces of at least this many bytes that go verbatim (codec none) into one contiguous stretch
  // of a destination are read straight into it; smaller ones are read together with their
  // neighbours into a buffer and copied (default 256 KiB; tests set 0 to read every such piece
  // straight).
  void set_direct_read_bytes(uint64_t bytes) { direct_read_bytes_ = bytes; }

  // Bytes read from the storage so far: the MANIFEST and every stored piece read (as stored,
  // before decoding), with the few bytes between neighbouring pieces read together. Thread-safe.
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }

  // Checks the whole checkpoint: every piece's CRC32C and encoding, every tensor element stored
  // exactly once, no file in the folder that the manifest does not name. Returns the problems
  // found (empty: clean). Errors: only those of listing the folder.
  Result<std::vector<std::string>> Verify();

 private:
  CheckpointReader(std::shared_ptr<Storage> storage, Manifest manifest, uint64_t manifest_bytes)
      : storage_(std::move(storage)), manifest_(std::move(manifest)), bytes_read_(manifest_bytes) {}
  // One stored piece to read: the tensor and the index of its piece.
  struct PieceRef {
    const TensorEntry* tensor;
    size_t piece;
  };
  // Reads `pieces` and calls use(k, raw) with the raw bytes of pieces[k] (decoded, CRC32C
  // checked), from up to kReadThreads threads at once. Neighbouring pieces of one file are read
  // with one storage call (a call per piece costs a round trip on the chunk store and the memory
  // tier); when such a merged read fails, its pieces are read one by one, so that an error names
  // the piece — unless the storage is out of reach (StorageOutOfReach): that error, naming the
  // first piece and how many more, is the read's. Without `on_error`, stops at the first error (of
  // a read, a check or `use`) and returns it; with it, passes it every piece's error (from any of
  // the threads, one call at a time) and reads on. `direct`, when set, may name for piece k
  // the memory its stored bytes belong in verbatim (codec none, one contiguous destination):
  // a piece of at least direct_read_bytes_ is then read straight into it and checked there, and
  // `use` is not called for it (a piece that fails its check leaves that memory undefined).
  Status ReadPieces(const std::vector<PieceRef>& pieces,
                    const std::function<Status(size_t k, std::span<const uint8_t> raw)>& use,
                    const std::function<void(Status)>& on_error = {},
                    const std::function<uint8_t*(size_t k)>& direct = {});
  // The raw bytes of `piece` of `tensor` from its stored bytes: checks the CRC32C, then decodes
  // into `scratch` (codec none: `stored` itself). Errors name the piece.
  Result<std::span<const uint8_t>> DecodePiece(const TensorEntry& tensor, const StoredPiece& piece,
                                               std::span<const uint8_t> stored,
                                               std::vector<uint8_t>* scratch) const;
  // "<uri>/step-.../rank-00001.data bytes [a, b) (adam_m 'wte' box ... )" for errors.
  std::string Where(const TensorEntry& tensor, const StoredPiece& piece) const;
  // The path of data file `file` of the manifest.
  std::string FilePath(uint32_t file) const;

  std::shared_ptr<Storage> storage_;
  Manifest manifest_;
  std::atomic<uint64_t> bytes_read_;
  uint64_t direct_read_bytes_ = 256 << 10;
};

// Loads the newest committed checkpoint that opens and loads (logging why any newer one was
// skipped) into `dest`; sets `engine_state` (if not null) and returns its step. Errors: NotFound
// when the storage holds no committed checkpoint; otherwise the error of the oldest one tried.
Result<int64_t> LoadNewest(std::shared_ptr<Storage> storage, const StateShards& dest,
                           std::string* engine_state);

}  // namespace rt::ckpt
