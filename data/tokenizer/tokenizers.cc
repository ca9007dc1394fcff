// The byte and GPT-2 BPE tokenizers.
#include <climits>
#include <cstdlib>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/token_shard.h"
#include "data/tokenizer.h"

namespace rt {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string_view name() const override { return "byte"; }
  uint32_t vocab_size() const override { return 256; }
  std::optional<int32_t> end_of_text() const override { return std::nullopt; }
  std::vector<int32_t> Encode(std::string_view text) override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
    return ids;
  }
  Result<std::string> Decode(std::span<const int32_t> tokens) const override {
    std::string out;
    out.reserve(tokens.size());
    for (int32_t t : tokens) {
      if (t < 0 || t > 255)
        return InvalidArgument("byte tokenizer: token " + std::to_string(t) + " is not a byte");
      out.push_back(static_cast<char>(t));
    }
    return out;
  }
};

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others to 256 + n.
std::vector<uint32_t> ByteToCodePoint() {
  std::vector<uint32_t> map(256, 0);
  std::vector<bool> printable(256, false);
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) map[b] = printable[b] ? b : next++;
  return map;
}

// Decodes a byte-encoded vocabulary string (UTF-8 of mapped code points) to raw bytes.
Result<std::string> UnmapBytes(std::string_view s, const std::unordered_map<uint32_t, char>& inv,
                               const std::string& what) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    uint32_t cp;
    size_t len;
    if (c < 0x80) {
      cp = c;
      len = 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1F) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3F);
      len = 2;
    } else {
      return Corruption(what + ": entry '" + std::string(s) + "' is not a byte-level token");
    }
    auto it = inv.find(cp);
    if (it == inv.end())
      return Corruption(what + ": entry '" + std::string(s) + "' is not a byte-level token");
    out.push_back(it->second);
    i += len;
  }
  return out;
}

class Gpt2Tokenizer final : public Tokenizer {
 public:
  std::string_view name() const override { return "gpt2"; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(id_to_bytes_.size()); }
  std::optional<int32_t> end_of_text() const override { return end_of_text_; }

  std::vector<int32_t> Encode(std::string_view text) override {
    std::vector<int32_t> ids;
    for (std::string_view piece : Gpt2PreTokenize(text)) {
      auto cached = cache_.find(std::string(piece));
      if (cached == cache_.end()) cached = cache_.emplace(std::string(piece), Bpe(piece)).first;
      ids.insert(ids.end(), cached->second.begin(), cached->second.end());
    }
    return ids;
  }

  Result<std::string> Decode(std::span<const int32_t> tokens) const override {
    std::string out;
    for (int32_t t : tokens) {
      if (t < 0 || t >= static_cast<int32_t>(id_to_bytes_.size()))
        return InvalidArgument("gpt2 tokenizer: token " + std::to_string(t) +
                               " is outside the vocabulary of " +
                               std::to_string(id_to_bytes_.size()));
      out += id_to_bytes_[t];
    }
    return out;
  }

  Status Load(const std::string& dir) {
    const std::string enc_path = dir + "/encoder.json";
    const std::string bpe_path = dir + "/vocab.bpe";
    ASSIGN_OR_RETURN(auto enc_bytes, ReadFileBytes(enc_path));
    ASSIGN_OR_RETURN(auto bpe_bytes, ReadFileBytes(bpe_path));
    const std::vector<uint32_t> to_cp = ByteToCodePoint();
    std::unordered_map<uint32_t, char> inv;
    for (int b = 0; b < 256; ++b) inv[to_cp[b]] = static_cast<char>(b);

    nlohmann::json encoder = nlohmann::json::parse(
        reinterpret_cast<const char*>(enc_bytes.data()),
        reinterpret_cast<const char*>(enc_bytes.data()) + enc_bytes.size(), nullptr, false);
    if (!encoder.is_object()) return Corruption(enc_path + ": not a JSON object");
    id_to_bytes_.assign(encoder.size(), std::string());
    std::vector<bool> seen(encoder.size(), false);
    for (auto it = encoder.begin(); it != encoder.end(); ++it) {
      if (!it.value().is_number_integer())
        return Corruption(enc_path + ": id of '" + it.key() + "' is not an integer");
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id >= static_cast<int64_t>(encoder.size()) || seen[id])
        return Corruption(enc_path + ": id " + std::to_string(id) + " is out of range or repeated");
      seen[id] = true;
      if (it.key() == "<|endoftext|>") {
        end_of_text_ = static_cast<int32_t>(id);
        id_to_bytes_[id] = it.key();
        continue;
      }
      ASSIGN_OR_RETURN(id_to_bytes_[id], UnmapBytes(it.key(), inv, enc_path));
      bytes_to_id_[id_to_bytes_[id]] = static_cast<int32_t>(id);
    }
    if (id_to_bytes_.size() > 65536)
      return Corruption(enc_path + ": " + std::to_string(id_to_bytes_.size()) +
                        " tokens do not fit uint16");
    for (int b = 0; b < 256; ++b) {
      auto it = bytes_to_id_.find(std::string(1, static_cast<char>(b)));
      if (it == bytes_to_id_.end())
        return Corruption(enc_path + ": byte " + std::to_string(b) + " has no token");
      byte_id_[b] = it->second;
    }

    std::string_view text(reinterpret_cast<const char*>(bpe_bytes.data()), bpe_bytes.size());
    int32_t rank = 0;
    int line_no = 0;
    while (!text.empty()) {
      const size_t nl = text.find('\n');
      std::string_view line = text.substr(0, nl);
      text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
      ++line_no;
      if (line.empty() || line.starts_with("#version")) continue;
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos)
        return Corruption(bpe_path + ":" + std::to_string(line_no) + ": expected 'a b'");
      ASSIGN_OR_RETURN(std::string a, UnmapBytes(line.substr(0, sp), inv, bpe_path));
      ASSIGN_OR_RETURN(std::string b, UnmapBytes(line.substr(sp + 1), inv, bpe_path));
      auto ia = bytes_to_id_.find(a), ib = bytes_to_id_.find(b), im = bytes_to_id_.find(a + b);
      if (ia == bytes_to_id_.end() || ib == bytes_to_id_.end() || im == bytes_to_id_.end())
        return Corruption(bpe_path + ":" + std::to_string(line_no) +
                          ": merge of tokens missing from encoder.json");
      merges_[PairKey(ia->second, ib->second)] = {rank++, im->second};
    }
    return Status();
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // GPT-2's bpe(): repeatedly merge every occurrence of the lowest-ranked adjacent pair.
  std::vector<int32_t> Bpe(std::string_view piece) const {
    std::vector<int32_t> word;
    for (char c : piece) word.push_back(byte_id_[static_cast<uint8_t>(c)]);
    while (word.size() > 1) {
      int32_t best_rank = INT32_MAX;
      Merge best{};
      int32_t first = 0, second = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        auto it = merges_.find(PairKey(word[i], word[i + 1]));
        if (it != merges_.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank;
          best = it->second;
          first = word[i];
          second = word[i + 1];
        }
      }
      if (best_rank == INT32_MAX) break;
      std::vector<int32_t> merged;
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
          merged.push_back(best.result);
          i += 2;
        } else {
          merged.push_back(word[i++]);
        }
      }
      word = std::move(merged);
    }
    return word;
  }

  std::vector<std::string> id_to_bytes_;
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_id_[256] = {};
  std::optional<int32_t> end_of_text_;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

Result<std::unique_ptr<Tokenizer>> MakeGpt2Tokenizer(const std::string& vocab_dir) {
  auto tokenizer = std::make_unique<Gpt2Tokenizer>();
  RETURN_IF_ERROR(
      tokenizer->Load(vocab_dir).WithContext("GPT-2 vocabulary in '" + vocab_dir + "'"));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

Result<std::unique_ptr<Tokenizer>> MakeTokenizer(std::string_view kind,
                                                 const std::string& vocab_dir) {
  if (kind == "byte") return MakeByteTokenizer();
  if (kind == "gpt2")
    return MakeGpt2Tokenizer(vocab_dir.empty() ? DefaultGpt2VocabDir() : vocab_dir);
  return InvalidArgument("unknown tokenizer '" + std::string(kind) + "' (expected byte or gpt2)");
}

std::string DefaultGpt2VocabDir() {
  if (const char* env = std::getenv("RINGTRAIN_GPT2_VOCAB"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/ringtrain/gpt2";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/ringtrain/gpt2";
}

}  // namespace rt
