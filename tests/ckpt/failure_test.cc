// Damaged checkpoints: a flipped byte in a data file or the manifest, a truncated or missing data
// file, a newer format version, a missing tensor — each a clear error naming what is wrong, and
// LoadNewest falls back to the previous checkpoint.
#include <filesystem>

#include <gtest/gtest.h>

#include "base/crc32c.h"
#include "ckpt/catalog.h"
#include "ckpt/manifest.h"
#include "tests/ckpt/util.h"

namespace rt::ckpt {
namespace {

using testing::SynthLayout;
using testing::TempDir;

class DamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage_ = OpenStorage(dir_.path()).value();
    ASSERT_TRUE(testing::SaveLayout(storage_, layout_, 10).ok());
    ASSERT_TRUE(testing::SaveLayout(storage_, layout_, 20, {.codec = codec_}).ok());
  }
  std::string File(const std::string& name) const {
    return dir_.path() + "/" + StepDir(20) + "/" + name;
  }
  // Load of step 20 into layout tp=1,dp=1 (touches every piece).
  Status Load20() {
    auto reader = CheckpointReader::Open(storage_, 20);
    if (!reader.ok()) return reader.status();
    auto rank = testing::MakeRank({}, 0, false);
    return (*reader)->Load(rank.shards);
  }
  // LoadNewest must fall back to step 10 and load it correctly.
  void ExpectFallback() {
    auto rank = testing::MakeRank({}, 0, false);
    std::string state;
    auto step = LoadNewest(storage_, rank.shards, &state);
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    EXPECT_EQ(*step, 10);
    EXPECT_EQ(state, testing::EngineStateOf(10));
    EXPECT_EQ(testing::CheckRank(rank), "");
  }

  TempDir dir_{"damage"};
  SynthLayout layout_{.tp = 2, .dp = 1};
  Codec codec_ = Codec::kNone;
  std::shared_ptr<Storage> storage_;
};

TEST_F(DamageTest, FlippedDataByteNamesFileTensorAndRange) {
  testing::FlipByte(File(DataFile(1)), 50);
  Status s = Load20();
  ASSERT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.ToString().find(DataFile(1) + " bytes ["), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("CRC32C"), std::string::npos) << s.ToString();
  auto problems = CheckpointReader::Open(storage_, 20).value()->Verify().value();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(DataFile(1)), std::string::npos) << problems[0];
  ExpectFallback();
}

TEST_F(DamageTest, FlippedManifestByte) {
  testing::FlipByte(File(kManifestFile), 40);
  Status s = Load20();
  ASSERT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.ToString().find(kManifestFile), std::string::npos) << s.ToString();
  ExpectFallback();
}

TEST_F(DamageTest, TruncatedDataFile) {
  const std::string path = File(DataFile(0));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  Status s = Load20();
  ASSERT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  EXPECT_NE(s.ToString().find("truncated"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find(DataFile(0)), std::string::npos) << s.ToString();
  ExpectFallback();
}

TEST_F(DamageTest, MissingDataFile) {
  std::filesystem::remove(File(DataFile(1)));
  Status s = Load20();
  ASSERT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.ToString().find(DataFile(1)), std::string::npos) << s.ToString();
  auto problems = CheckpointReader::Open(storage_, 20).value()->Verify().value();
  EXPECT_FALSE(problems.empty());
  ExpectFallback();
}

TEST_F(DamageTest, NewerFormatVersion) {
  std::vector<uint8_t> bytes = storage_->ReadFile(StepDir(20) + "/" + kManifestFile).value();
  bytes[8] = kFormatVersion + 1;
  const uint32_t crc = Crc32c(bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  ASSERT_TRUE(storage_->WriteFile(StepDir(20) + "/" + kManifestFile, bytes).ok());
  Status s = Load20();
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.ToString().find("newer than this build reads"), std::string::npos) << s.ToString();
  ExpectFallback();
}

TEST_F(DamageTest, MissingTensorAndWrongShape) {
  auto rank = testing::MakeRank({}, 0, false);
  rank.shards.shards[0].name = "not-there";
  auto reader = CheckpointReader::Open(storage_, 20).value();
  Status s = reader->Load(rank.shards);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.ToString().find("not-there"), std::string::npos) << s.ToString();
  rank = testing::MakeRank({}, 0, false);
  rank.shards.shards[0].global_shape.dims[0] += 1;
  rank.shards.shards[0].box_size.dims[0] += 1;
  testing::SynthRank bigger;
  bigger.memory.push_back(std::make_unique<std::vector<uint8_t>>(2 * 38 * 12));
  rank.shards.shards[0].view = Tensor(bigger.memory.back()->data(), DType::kBF16, Shape{38 * 12});
  s = reader->Load(rank.shards);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
}

class CompressedDamageTest : public DamageTest {
 public:
  CompressedDamageTest() { codec_ = Codec::kByteGroupedZstd; }
};

TEST_F(CompressedDamageTest, FlippedCompressedByte) {
  testing::FlipByte(File(DataFile(0)), 30);
  Status s = Load20();
  ASSERT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.ToString().find(DataFile(0)), std::string::npos) << s.ToString();
  ExpectFallback();
}

TEST(EmptyStorageTest, NothingCommitted) {
  auto storage = OpenStorage("mem://empty").value();
  auto rank = testing::MakeRank({}, 0, false);
  auto step = LoadNewest(storage, rank.shards, nullptr);
  EXPECT_EQ(step.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(CheckpointReader::Open(storage, 5).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace rt::ckpt
