#include "data/token_shard.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/bytes.h"
#include "base/crc32c.h"

namespace rt {
namespace {

constexpr char kMagic[8] = {'R', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kTokenWidth = 2;
constexpr size_t kHeaderBytes = 32;

}  // namespace

Result<std::vector<std::byte>> EncodeTokenShard(std::span<const uint16_t> tokens,
                                                uint32_t vocab_size) {
  if (vocab_size == 0 || vocab_size > 65536)
    return InvalidArgument("token shard: vocab size " + std::to_string(vocab_size) +
                           " does not fit uint16 tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size)
      return InvalidArgument("token shard: token " + std::to_string(tokens[i]) + " at index " +
                             std::to_string(i) + " is not below the vocab size " +
                             std::to_string(vocab_size));
  }
  const size_t payload = tokens.size() * kTokenWidth;
  ByteWriter w;
  w.PutBytes(kMagic, sizeof(kMagic));
  w.Put<uint32_t>(kVersion);
  w.Put<uint32_t>(kTokenWidth);
  w.Put<uint32_t>(vocab_size);
  w.Put<uint32_t>(Crc32c(tokens.data(), payload));
  w.Put<uint64_t>(tokens.size());
  w.PutBytes(tokens.data(), payload);
  return w.Take();
}

Result<TokenShard> DecodeTokenShard(std::span<const std::byte> bytes, const std::string& what) {
  ByteReader r(bytes, what);
  ASSIGN_OR_RETURN(auto magic, r.GetBytes(sizeof(kMagic)));
  if (std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0)
    return Corruption(what + ": not a token shard (wrong magic; expected 'RTTOKENS')");
  ASSIGN_OR_RETURN(uint32_t version, r.Get<uint32_t>());
  if (version != kVersion)
    return Corruption(what + ": unknown token shard version " + std::to_string(version));
  ASSIGN_OR_RETURN(uint32_t width, r.Get<uint32_t>());
  if (width != kTokenWidth)
    return Corruption(what + ": unsupported token width " + std::to_string(width) + " bytes");
  TokenShard shard;
  ASSIGN_OR_RETURN(shard.vocab_size, r.Get<uint32_t>());
  if (shard.vocab_size == 0 || shard.vocab_size > 65536)
    return Corruption(what + ": vocab size " + std::to_string(shard.vocab_size) +
                      " does not fit uint16 tokens");
  ASSIGN_OR_RETURN(uint32_t crc, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint64_t count, r.Get<uint64_t>());
  const uint64_t have = r.remaining();
  if (count > have / kTokenWidth || have != count * kTokenWidth)
    return Corruption(what + ": header says " + std::to_string(count) + " tokens (" +
                      std::to_string(kHeaderBytes + count * kTokenWidth) +
                      " bytes) but the file has " + std::to_string(bytes.size()) + " bytes" +
                      (have < count * kTokenWidth ? " (truncated)" : " (trailing bytes)"));
  ASSIGN_OR_RETURN(auto payload, r.GetBytes(have));
  if (Crc32c(payload.data(), payload.size()) != crc)
    return Corruption(what + ": token CRC32C mismatch");
  shard.tokens.resize(count);
  if (count) std::memcpy(shard.tokens.data(), payload.data(), payload.size());
  for (size_t i = 0; i < shard.tokens.size(); ++i) {
    if (shard.tokens[i] >= shard.vocab_size)
      return Corruption(what + ": token " + std::to_string(shard.tokens[i]) + " at index " +
                        std::to_string(i) + " is not below the vocab size " +
                        std::to_string(shard.vocab_size));
  }
  return shard;
}

Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens,
                       uint32_t vocab_size) {
  ASSIGN_OR_RETURN(auto bytes, EncodeTokenShard(tokens, vocab_size));
  return WriteFileBytes(path, bytes).WithContext("token shard");
}

Result<TokenShard> ReadTokenShard(const std::string& path) {
  ASSIGN_OR_RETURN(auto bytes, ReadFileBytes(path));
  return DecodeTokenShard(bytes, "token shard '" + path + "'");
}

}  // namespace rt
