// Token shards, data preparation, the loader's orders and state, and run configs.
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "data/data_loader.h"
#include "data/data_prepare.h"
#include "data/token_shard.h"

namespace rt {
namespace {

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/parallel_data_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(TokenShard, RoundTrip) {
  std::vector<uint16_t> tokens = {0, 1, 255, 7, 42};
  const std::string path = TempDir("rt") + "/s.bin";
  ASSERT_TRUE(WriteTokenShard(path, tokens, 256).ok());
  auto shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->vocab_size, 256u);
  EXPECT_EQ(shard->tokens, tokens);
}

TEST(TokenShard, RejectsBadFiles) {
  std::vector<uint16_t> tokens(100);
  std::iota(tokens.begin(), tokens.end(), 0);
  auto bytes = EncodeTokenShard(tokens, 256);
  ASSERT_TRUE(bytes.ok());
  // Truncated anywhere.
  for (size_t n : {size_t{0}, size_t{5}, size_t{31}, size_t{32}, bytes->size() - 1}) {
    auto r = DecodeTokenShard(std::span(*bytes).first(n), "shard x");
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().message().find("shard x"), std::string::npos);
  }
  auto truncated = DecodeTokenShard(std::span(*bytes).first(bytes->size() - 2), "shard x");
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  // Wrong magic.
  auto bad = *bytes;
  bad[0] = std::byte{'X'};
  auto r = DecodeTokenShard(bad, "shard x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("magic"), std::string::npos);
  // Flipped token bit → CRC.
  bad = *bytes;
  bad[40] ^= std::byte{1};
  EXPECT_NE(DecodeTokenShard(bad, "s").status().message().find("CRC"), std::string::npos);
  // Token out of vocabulary at encode time.
  EXPECT_FALSE(EncodeTokenShard(tokens, 50).ok());
  // Missing file.
  EXPECT_EQ(ReadTokenShard("/nonexistent/x.bin").status().code(), StatusCode::kNotFound);
}

TEST(PrepareData, SplitsFilesIntoTrainAndVal) {
  const std::string dir = TempDir("prep");
  std::filesystem::create_directories(dir + "/in");
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + "\n";
  std::ofstream(dir + "/in/a") << text;
  std::ofstream(dir + "/in/a.dat") << "index file, skipped";
  std::ofstream(dir + "/in/b") << text;
  auto tok = MakeByteTokenizer();
  PrepareOptions opt{{dir + "/in"}, dir + "/out", 0.1, 500};
  auto summary = PrepareData(opt, *tok);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->files, 2);
  EXPECT_EQ(summary->train_tokens + summary->val_tokens, 2 * static_cast<int64_t>(text.size()));
  EXPECT_GT(summary->val_tokens, 0);
  EXPECT_EQ(summary->train_shards, static_cast<int>((summary->train_tokens + 499) / 500));
  auto train = LoadTrainTokens(dir + "/out", 256);
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(static_cast<int64_t>((*train)->size()), summary->train_tokens);
  // The head of file a is the beginning of the stream, cut at a line break.
  std::string head((*train)->begin(), (*train)->begin() + 7);
  EXPECT_EQ(head, "line 0\n");
  auto val = LoadShardTokens(dir + "/out/val.bin", 256);
  ASSERT_TRUE(val.ok());
  EXPECT_EQ((*val)->front(), 'l');
  // A model vocabulary smaller than the shard's is an error naming the shard.
  auto small = LoadShardTokens(dir + "/out/val.bin", 128);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("val.bin"), std::string::npos);
  // Missing input.
  PrepareOptions missing{{dir + "/nope"}, dir + "/out2", 0.1, 500};
  EXPECT_EQ(PrepareData(missing, *tok).status().code(), StatusCode::kNotFound);
}

std::shared_ptr<const std::vector<uint16_t>> Iota(size_t n) {
  auto v = std::make_shared<std::vector<uint16_t>>(n);
  std::iota(v->begin(), v->end(), 0);
  return v;
}

TEST(DataLoader, SequentialMatchesTheFormula) {
  const int B = 3, T = 4;
  const size_t n = 50;
  auto loader = DataLoader::Create(Iota(n), B, T, DataOrder::kSequential, 1);
  ASSERT_TRUE(loader.ok());
  std::vector<int32_t> x(B * T), y(B * T);
  for (int i = 0; i < 10; ++i) {
    loader->Next(x, y);
    for (int b = 0; b < B; ++b) {
      const size_t s = static_cast<size_t>(i * B + b) * T;
      for (int j = 0; j < T; ++j) {
        EXPECT_EQ(x[b * T + j], static_cast<int32_t>((s + j) % n)) << i << " " << b << " " << j;
        EXPECT_EQ(y[b * T + j], static_cast<int32_t>((s + j + 1) % n));
      }
    }
  }
}

TEST(DataLoader, ShuffledVisitsEveryWindowOncePerEpoch) {
  const int B = 2, T = 5;
  const size_t n = 61;  // W = 12 windows
  auto loader = DataLoader::Create(Iota(n), B, T, DataOrder::kShuffled, 7);
  ASSERT_TRUE(loader.ok());
  ASSERT_EQ(loader->windows(), 12u);
  std::vector<int32_t> x(B * T), y(B * T);
  std::vector<int32_t> epoch0, epoch1;
  for (int i = 0; i < 12; ++i) {
    loader->Next(x, y);
    for (int b = 0; b < B; ++b) {
      EXPECT_EQ(x[b * T] % T, 0);
      for (int j = 0; j < T; ++j) EXPECT_EQ(y[b * T + j], x[b * T + j] + 1);
      (i < 6 ? epoch0 : epoch1).push_back(x[b * T] / T);
    }
  }
  EXPECT_EQ(std::set<int32_t>(epoch0.begin(), epoch0.end()).size(), 12u);
  EXPECT_EQ(std::set<int32_t>(epoch1.begin(), epoch1.end()).size(), 12u);
  EXPECT_NE(epoch0, epoch1);
  std::vector<int32_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, epoch0);  // really shuffled
}

TEST(DataLoader, ResumedStateGivesTheSameBatches) {
  const int B = 4, T = 8;
  auto tokens = Iota(1000);
  for (DataOrder order : {DataOrder::kSequential, DataOrder::kShuffled}) {
    auto a = DataLoader::Create(tokens, B, T, order, 99);
    ASSERT_TRUE(a.ok());
    std::vector<int32_t> x(B * T), y(B * T), x2(B * T), y2(B * T);
    for (int i = 0; i < 37; ++i) a->Next(x, y);
    auto bytes = a->state().Serialize();
    auto state = LoaderState::Deserialize(bytes);
    ASSERT_TRUE(state.ok());
    auto b = DataLoader::Create(tokens, B, T, order, 0);
    ASSERT_TRUE(b.ok());
    b->Restore(*state);
    for (int i = 0; i < 50; ++i) {
      a->Next(x, y);
      b->Next(x2, y2);
      ASSERT_EQ(x, x2);
      ASSERT_EQ(y, y2);
    }
  }
  EXPECT_FALSE(LoaderState::Deserialize(std::vector<std::byte>(3)).ok());
  EXPECT_FALSE(DataLoader::Create(Iota(8), 1, 8, DataOrder::kSequential, 0).ok());
}

}  // namespace
}  // namespace rt
