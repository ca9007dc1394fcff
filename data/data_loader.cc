#include "data/data_loader.h"

#include "base/bytes.h"
#include "data/data_prepare.h"
#include "data/token_shard.h"
#include "model/rng.h"

namespace rt {

Result<DataOrder> ParseDataOrder(std::string_view name) {
  if (name == "sequential") return DataOrder::kSequential;
  if (name == "shuffled") return DataOrder::kShuffled;
  return InvalidArgument("unknown data order '" + std::string(name) +
                         "' (expected sequential or shuffled)");
}

std::vector<std::byte> LoaderState::Serialize() const {
  ByteWriter w;
  w.Put<uint64_t>(rows);
  w.Put<uint64_t>(seed);
  return w.Take();
}

Result<LoaderState> LoaderState::Deserialize(std::span<const std::byte> bytes) {
  if (bytes.size() != 16)
    return Corruption("loader state: " + std::to_string(bytes.size()) + " bytes, expected 16");
  ByteReader r(bytes, "loader state");
  LoaderState s;
  ASSIGN_OR_RETURN(s.rows, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(s.seed, r.Get<uint64_t>());
  return s;
}

DataLoader::DataLoader(std::shared_ptr<const std::vector<uint16_t>> tokens, int batch, int seq_len,
                       DataOrder order, uint64_t seed)
    : tokens_(std::move(tokens)),
      batch_(batch),
      seq_len_(seq_len),
      order_(order),
      windows_((tokens_->size() - 1) / seq_len) {
  state_.seed = seed;
}

Result<DataLoader> DataLoader::Create(std::shared_ptr<const std::vector<uint16_t>> tokens,
                                      int batch, int seq_len, DataOrder order, uint64_t seed) {
  if (batch <= 0 || seq_len <= 0)
    return InvalidArgument("data loader: batch " + std::to_string(batch) + " and sequence length " +
                           std::to_string(seq_len) + " must be positive");
  if (tokens == nullptr || tokens->size() < static_cast<size_t>(seq_len) + 1)
    return InvalidArgument("data loader: " + std::to_string(tokens ? tokens->size() : 0) +
                           " tokens are fewer than one window of " + std::to_string(seq_len + 1));
  return DataLoader(std::move(tokens), batch, seq_len, order, seed);
}

uint64_t DataLoader::RowStart(uint64_t row) {
  const uint64_t n = tokens_->size();
  if (order_ == DataOrder::kSequential) return (row % n) * static_cast<uint64_t>(seq_len_) % n;
  const uint64_t epoch = row / windows_;
  if (epoch != perm_epoch_) {
    perm_.resize(windows_);
    for (uint64_t w = 0; w < windows_; ++w) perm_[w] = static_cast<uint32_t>(w);
    Rng rng(MixSeed(state_.seed, epoch));
    for (uint64_t i = windows_ - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.Below(i + 1)]);
    perm_epoch_ = epoch;
  }
  return static_cast<uint64_t>(perm_[row % windows_]) * seq_len_;
}

void DataLoader::Next(std::span<int32_t> inputs, std::span<int32_t> targets) {
  const std::vector<uint16_t>& t = *tokens_;
  const uint64_t n = t.size();
  for (int b = 0; b < batch_; ++b) {
    const uint64_t s = RowStart(state_.rows + b);
    for (int j = 0; j < seq_len_; ++j) {
      inputs[static_cast<size_t>(b) * seq_len_ + j] = t[(s + j) % n];
      targets[static_cast<size_t>(b) * seq_len_ + j] = t[(s + j + 1) % n];
    }
  }
  state_.rows += batch_;
}

namespace {
Status CheckVocab(const TokenShard& shard, const std::string& path, uint32_t max_vocab) {
  if (shard.vocab_size > max_vocab)
    return InvalidArgument("token shard '" + path + "' has vocabulary " +
                           std::to_string(shard.vocab_size) + ", larger than the model's " +
                           std::to_string(max_vocab));
  return Status();
}
}  // namespace

Result<std::shared_ptr<const std::vector<uint16_t>>> LoadTrainTokens(const std::string& dir,
                                                                     uint32_t max_vocab) {
  ASSIGN_OR_RETURN(auto paths, ListTrainShards(dir));
  auto all = std::make_shared<std::vector<uint16_t>>();
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(TokenShard shard, ReadTokenShard(path));
    RETURN_IF_ERROR(CheckVocab(shard, path, max_vocab));
    all->insert(all->end(), shard.tokens.begin(), shard.tokens.end());
  }
  return std::shared_ptr<const std::vector<uint16_t>>(std::move(all));
}

Result<std::shared_ptr<const std::vector<uint16_t>>> LoadShardTokens(const std::string& path,
                                                                     uint32_t max_vocab) {
  ASSIGN_OR_RETURN(TokenShard shard, ReadTokenShard(path));
  RETURN_IF_ERROR(CheckVocab(shard, path, max_vocab));
  return std::make_shared<const std::vector<uint16_t>>(std::move(shard.tokens));
}

}  // namespace rt
