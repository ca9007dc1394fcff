// GPT-2's regex pre-tokenizer, written out by hand (see Gpt2PreTokenize in data/tokenizer.h).
#include <algorithm>
#include <cstdint>

#include "data/tokenizer.h"

namespace rt {
namespace {

struct CodePointRange {
  uint32_t first;
  uint32_t last;
};
#include "data/tokenizer/unicode_classes.inc"

template <size_t N>
bool InRanges(const CodePointRange (&ranges)[N], uint32_t cp) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                             [](uint32_t v, const CodePointRange& r) { return v < r.first; });
  return it != std::begin(ranges) && cp <= (it - 1)->last;
}

enum class Class { kLetter, kNumber, kSpace, kOther };

// One decoded character: its class and its length in bytes.
struct Char {
  Class cls;
  uint32_t cp;
  size_t len;
};

// Decodes the UTF-8 character at `text[i]`; an invalid sequence is one byte of class kOther.
Char DecodeAt(std::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t c = b(i);
  uint32_t cp = c;
  size_t len = 1;
  if (c >= 0x80) {
    uint32_t min;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
      min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
      min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
      min = 0x10000;
    } else
      return {Class::kOther, c, 1};
    if (i + len > text.size()) return {Class::kOther, c, 1};
    for (size_t k = 1; k < len; ++k) {
      if ((b(i + k) & 0xC0) != 0x80) return {Class::kOther, c, 1};
      cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {Class::kOther, c, 1};
  }
  Class cls = Class::kOther;
  if (InRanges(kLetterRanges, cp))
    cls = Class::kLetter;
  else if (InRanges(kNumberRanges, cp))
    cls = Class::kNumber;
  else if (InRanges(kSpaceRanges, cp))
    cls = Class::kSpace;
  return {cls, cp, len};
}

// Length of the contraction ('s 't 're 've 'm 'll 'd) at text[i], or 0.
size_t ContractionAt(std::string_view text, size_t i) {
  if (text[i] != '\'') return 0;
  for (std::string_view c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
    if (text.substr(i + 1, c.size()) == c) return 1 + c.size();
  }
  return 0;
}

// End of the run of characters of class `cls` starting at i (i itself if none).
size_t RunEnd(std::string_view text, size_t i, Class cls) {
  while (i < text.size()) {
    const Char ch = DecodeAt(text, i);
    if (ch.cls != cls) break;
    i += ch.len;
  }
  return i;
}

}  // namespace

std::vector<std::string_view> Gpt2PreTokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = i;
    if (size_t n = ContractionAt(text, i); n) {
      end = i + n;
    } else {
      // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional ASCII space, then a run.
      const size_t start = text[i] == ' ' && i + 1 < text.size() ? i + 1 : i;
      const Char first = DecodeAt(text, start);
      if (first.cls != Class::kSpace) {
        end = RunEnd(text, start, first.cls);
      } else {
        // "\s+(?!\S)" then "\s+": a whitespace run, giving back its last character when a
        // non-space follows and the run is longer than one character.
        size_t last_start = i;
        end = i;
        while (end < text.size()) {
          const Char ch = DecodeAt(text, end);
          if (ch.cls != Class::kSpace) break;
          last_start = end;
          end += ch.len;
        }
        if (end < text.size() && last_start > i) end = last_start;
      }
    }
    pieces.push_back(text.substr(i, end - i));
    i = end;
  }
  return pieces;
}

}  // namespace rt
