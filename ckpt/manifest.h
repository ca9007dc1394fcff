// The checkpoint's metadata formats (docs/formats/checkpoint.md): the manifest that commits a
// checkpoint, the per-rank fragments it is assembled from, the `latest` pointer, and the names of
// the files of a checkpoint folder. Decoders check every bound and the CRC32C, so any byte string
// decodes to a valid value or to an error (fuzzed in tests/fuzz).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "ckpt/codec.h"
#include "ckpt/shard.h"

namespace rt::ckpt {

// The newest format version this build writes and reads.
constexpr uint32_t kFormatVersion = 1;

// One stored piece of a tensor: the elements of `box` (narrowed to [flat_begin, flat_end) of the
// box in row-major order when has_flat_range), stored as bytes [offset, offset + length) of
// files[file], encoded with `codec` from raw_length bytes.
struct StoredPiece {
  Shape box_offset;
  Shape box_size;
  bool has_flat_range = false;
  int64_t flat_begin = 0;
  int64_t flat_end = 0;
  uint32_t file = 0;    // index into the file table of the manifest or fragment
  uint64_t offset = 0;  // byte offset of the stored bytes in the file
  uint64_t length = 0;  // stored bytes
  uint32_t crc32c = 0;  // CRC32C of the stored bytes
  Codec codec = Codec::kNone;
  uint64_t raw_length = 0;  // bytes after decoding (numel() * dtype size)

  // Elements held.
  int64_t numel() const { return has_flat_range ? flat_end - flat_begin : box_size.numel(); }
};

// One global tensor and every stored piece of it.
struct TensorEntry {
  StateKind kind = StateKind::kParam;
  std::string name;
  Shape global_shape;
  DType dtype = DType::kF32;
  std::vector<StoredPiece> pieces;
};

// The committed description of a whole checkpoint (written by rank 0).
struct Manifest {
  int64_t step = 0;
  std::string run_id;
  std::string config_toml;         // the run config that wrote it
  std::string layout;              // the layout string that wrote it
  std::string engine_state;        // opaque trainer state (loader, RNG, lr position, ...)
  int32_t world = 1;               // ranks that wrote it
  std::vector<std::string> files;  // data files, relative to the checkpoint folder
  std::vector<TensorEntry> tensors;

  // The tensor (kind, name), or nullptr.
  const TensorEntry* Find(StateKind kind, const std::string& name) const;
};

// What one rank stored (written next to its data file; rank 0 merges them into the manifest).
struct Fragment {
  int64_t step = 0;
  std::string run_id;
  int32_t rank = 0;
  std::vector<std::string> files;  // the rank's data files (pieces index into this)
  std::vector<TensorEntry> tensors;
};

// Encodes a manifest (magic, version, body, CRC32C).
std::vector<uint8_t> EncodeManifest(const Manifest& manifest);
// Decodes and checks a manifest; `what` names it in errors. Errors: Corruption naming the bad
// field or the CRC; FailedPrecondition for a newer format version.
Result<Manifest> DecodeManifest(std::span<const uint8_t> bytes, const std::string& what);
// The same for fragments.
std::vector<uint8_t> EncodeFragment(const Fragment& fragment);
Result<Fragment> DecodeFragment(std::span<const uint8_t> bytes, const std::string& what);

// The content of the `latest` file: the committed checkpoints' folders, one a line, newest first
// (the first line names the latest checkpoint). `steps` must be non-empty and decreasing.
std::string EncodeLatest(const std::vector<int64_t>& steps);
// The steps listed by a `latest` file, newest first. Errors: Corruption naming the bad line.
Result<std::vector<int64_t>> DecodeLatest(std::span<const uint8_t> bytes);

// File and folder names in a checkpoint storage.
inline constexpr const char* kLatestFile = "latest";
inline constexpr const char* kManifestFile = "MANIFEST";
// "step-000000000042".
std::string StepDir(int64_t step);
// The step of a folder named by StepDir, or nullopt for any other name.
std::optional<int64_t> ParseStepDir(const std::string& name);
// "rank-00003.data" and "rank-00003.frag".
std::string DataFile(int rank);
std::string FragmentFile(int rank);

}  // namespace rt::ckpt
