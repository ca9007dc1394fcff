// The safetensors file format (docs/formats/safetensors.md): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then
// the tensor bytes packed without holes.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/dtype.h"

namespace rt {

// One tensor to write: a borrowed view of host memory holding numel(shape) elements of `dtype`.
struct SafetensorsInput {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// One tensor of a parsed file: a view into SafetensorsFile::bytes.
struct SafetensorsEntry {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
};

// A parsed file. Movable; entries view `bytes`, which the file owns.
struct SafetensorsFile {
  std::string what;                             // names the file in errors
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::map<std::string, SafetensorsEntry> tensors;
  std::vector<std::byte> bytes;

  // The tensor `name` with exactly `shape`. Errors: NotFound if missing, InvalidArgument naming
  // the expected and actual shape (or dtype) otherwise.
  Result<const SafetensorsEntry*> Find(const std::string& name,
                                       const std::vector<int64_t>& shape) const;
};

// Encodes tensors (in the given order) and string metadata as a file image. Errors:
// InvalidArgument for a repeated or empty name or a dtype safetensors cannot name.
Result<std::vector<std::byte>> EncodeSafetensors(
    const std::vector<SafetensorsInput>& tensors,
    const std::map<std::string, std::string>& metadata);

// Parses a file image; `what` names it in errors. Errors: Corruption for a short file, a header
// length beyond the file, invalid JSON, an unknown dtype, a bad shape, offsets that do not match
// the shape, overlap, leave holes or run past the file.
Result<SafetensorsFile> DecodeSafetensors(std::vector<std::byte> bytes, std::string what);

// Reads and parses a file. Errors: NotFound / IoError naming the path and those of decoding.
Result<SafetensorsFile> ReadSafetensors(const std::string& path);

// Encodes and writes a file atomically. Errors: those of encoding and IoError naming the path.
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                        const std::map<std::string, std::string>& metadata);

}  // namespace rt
