// Token shards: the on-disk format of tokenized training data (docs/formats/tokens.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/status.h"

namespace rt {

// A decoded token shard.
struct TokenShard {
  uint32_t vocab_size = 0;       // every token is below this
  std::vector<uint16_t> tokens;  // the token ids in order
};

// Encodes `tokens` (each < vocab_size) as a shard file image. Errors: InvalidArgument if a token
// is not below vocab_size or vocab_size exceeds 65,536.
Result<std::vector<std::byte>> EncodeTokenShard(std::span<const uint16_t> tokens,
                                                uint32_t vocab_size);

// Decodes a shard image; `what` names it in errors. Errors: Corruption for a short header, wrong
// magic, unknown version or width, wrong length (truncated or trailing bytes), a CRC mismatch,
// or a token not below the vocab size.
Result<TokenShard> DecodeTokenShard(std::span<const std::byte> bytes, const std::string& what);

// Writes a shard file atomically (a temporary file renamed into place). Errors: those of
// EncodeTokenShard, IoError naming the path.
Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens,
                       uint32_t vocab_size);

// Reads and decodes a shard file. Errors: NotFound / IoError naming the path, and those of
// DecodeTokenShard.
Result<TokenShard> ReadTokenShard(const std::string& path);

}  // namespace rt
