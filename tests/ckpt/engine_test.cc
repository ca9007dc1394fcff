// The real engine: DistTrainer's Shards() under one layout saved (with the replica counts of
// parallel/shard_plan.h, so replicated pieces are written by all their holders) and loaded into
// the Shards() of engines of another layout — parameters, master weights and AdamW moments equal
// bit for bit.
#include <algorithm>
#include <cstring>

#include <gtest/gtest.h>

#include "ckpt/reader.h"
#include "ckpt/writer.h"
#include "parallel/shard_plan.h"
#include "tests/parallel/harness.h"
#include "tests/parallel/parity.h"

namespace rt::ckpt {
namespace {

using parallel::testing::Assemble;
using parallel::testing::DistRun;

struct EngineCase {
  const char* from;
  const char* to;
  const char* precision;
};

class EngineRoundTripTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(EngineRoundTripTest, SavedUnderOneLayoutLoadsBitwiseIntoAnother) {
  const EngineCase c = GetParam();
  const RunConfig config = parallel::testing::Config(2, 2, c.precision);
  const parallel::ParallelLayout from = parallel::testing::Layout(c.from);
  const parallel::ParallelLayout to = parallel::testing::Layout(c.to);
  const Precision precision = ParsePrecision(c.precision).value();
  auto trained = parallel::testing::RunLayout(config, from, parallel::testing::Tokens(), 3);
  ASSERT_TRUE(trained->status.ok()) << trained->status.ToString();

  auto storage = OpenStorage(std::string("mem://engine-") + c.from + "-" + c.precision).value();
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int rank = 0; rank < from.world(); ++rank) {
    StateShards shards = trained->engines[rank]->Shards();
    auto planned = parallel::PlanRankShardsOf(config.model, precision, from, rank).value();
    ASSERT_EQ(planned.size(), shards.shards.size());
    for (size_t i = 0; i < planned.size(); ++i)
      EXPECT_EQ(shards.shards[i].replica_count, planned[i].shard.replica_count);
    WriterOptions o;
    o.storage = storage;
    o.rank = rank;
    o.world = from.world();
    o.run_id = "engine";
    o.layout = c.from;
    o.codec = Codec::kByteGroupedZstd;
    o.piece_bytes = 4096;
    writers.push_back(CheckpointWriter::Create(o).value());
    ASSERT_TRUE(writers.back()->Save(3, shards, "state").ok());
  }
  for (auto& w : writers) ASSERT_TRUE(w->Wait(Deadline::AfterMs(120000)).ok());
  auto problems = CheckpointReader::Open(storage, 3).value()->Verify().value();
  ASSERT_TRUE(problems.empty()) << problems.front();

  auto loaded = parallel::testing::RunLayout(
      config, to, parallel::testing::Tokens(), 0, true, WeightInit::kForLoad,
      [&](parallel::DistTrainer& engine) -> Status {
        ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(storage, 3));
        return reader->Load(engine.Shards());
      });
  ASSERT_TRUE(loaded->status.ok()) << loaded->status.ToString();
  for (StateKind kind :
       {StateKind::kParam, StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV}) {
    std::string error_a, error_b;
    auto a = Assemble(*trained, kind, &error_a);
    auto b = Assemble(*loaded, kind, &error_b);
    ASSERT_EQ(error_a, "");
    ASSERT_EQ(error_b, "") << StateKindName(kind);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, tensor] : a) {
      ASSERT_TRUE(b.contains(name)) << name;
      const auto& other = b.at(name).values;
      ASSERT_EQ(tensor.values.size(), other.size()) << name;
      if (kind != StateKind::kAdamV) {  // trained values: a load that did nothing would show
        EXPECT_TRUE(std::any_of(other.begin(), other.end(), [](float v) { return v != 0; }))
            << name;
      }
      EXPECT_EQ(std::memcmp(tensor.values.data(), other.data(), other.size() * sizeof(float)), 0)
          << StateKindName(kind) << " " << name << " differs after " << c.from << " -> " << c.to;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, EngineRoundTripTest,
                         ::testing::Values(EngineCase{"tp=2,pp=2", "dp=4,zero=3", "fp32"},
                                           EngineCase{"dp=2,zero=1", "pp=2,tp=2", "bf16"},
                                           EngineCase{"dp=4,zero=3,hsdp_shard=2", "", "fp32"},
                                           EngineCase{"", "tp=2,dp=2,zero=2", "bf16"}),
                         [](const ::testing::TestParamInfo<EngineCase>& info) {
                           return "case" + std::to_string(info.index);
                         });

}  // namespace
}  // namespace rt::ckpt
