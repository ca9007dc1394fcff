// Fuzz target: the text that `ringtrain data prepare` tokenizes is any bytes a user has. GPT-2's
// pre-tokenizer must split it into pieces that cover it exactly, in order, without crashing (on
// invalid UTF-8 too), and the byte tokenizer must decode its encoding back to the same bytes.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const char* next = text.data();
  for (std::string_view piece : rt::Gpt2PreTokenize(text)) {
    if (piece.empty() || piece.data() != next) __builtin_trap();
    next += piece.size();
  }
  if (next != text.data() + text.size()) __builtin_trap();
  static const std::unique_ptr<rt::Tokenizer> byte_tokenizer = rt::MakeByteTokenizer();
  auto decoded = byte_tokenizer->Decode(byte_tokenizer->Encode(text));
  if (!decoded.ok() || *decoded != text) __builtin_trap();
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::string> texts = {
      "Hello world! It's 2026, isn't it?  \n\n  tabs\tand   spaces ",
      "Grüße, 世界 — naïve café ١٢٣ 😀 they'll we've I'm you'd",
      "bad utf-8: \xff\xfe \xc3 \xe2\x82 end",
  };
  std::vector<std::vector<uint8_t>> seeds;
  for (const std::string& t : texts) seeds.emplace_back(t.begin(), t.end());
  return seeds;
}
