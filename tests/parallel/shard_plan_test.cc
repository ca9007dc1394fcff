// The shard plan (parallel/shard_plan.h): for every kind of layout, PlanStateShards names exactly
// the pieces the running engine's Shards() holds on each rank, and every piece's replica_count is
// the number of ranks holding it, with replica ids 0 .. replica_count−1.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "parallel/engine.h"
#include "parallel/shard_plan.h"
#include "tests/parallel/harness.h"
#include "tests/parallel/parity.h"

namespace rt::parallel {
namespace {

using testing::Config;
using testing::DistRun;
using testing::Layout;
using testing::RunLayout;
using testing::Tokens;

bool SameShape(const Shape& a, const Shape& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.dims[d] != b.dims[d]) return false;
  return true;
}

// Everything but the view.
std::string Describe(const ckpt::TensorShard& s) {
  std::string out = std::string(ckpt::StateKindName(s.kind)) + " " + s.name + " dtype " +
                    std::to_string(static_cast<int>(s.dtype)) + " box";
  for (int d = 0; d < s.box_offset.ndim; ++d)
    out += " " + std::to_string(s.box_offset.dims[d]) + "+" + std::to_string(s.box_size.dims[d]);
  if (s.has_flat_range)
    out += " flat " + std::to_string(s.flat_begin) + ".." + std::to_string(s.flat_end);
  return out + " replica " + std::to_string(s.replica);
}

struct Case {
  const char* spec;
  const char* precision;
  int n_layer;
};

TEST(ShardPlanTest, PlanEqualsTheEngineShardsForEveryLayoutKind) {
  const Case cases[] = {
      {"", "fp32", 2},
      {"dp=2", "fp32", 2},
      {"dp=2,zero=1", "bf16", 2},
      {"dp=2,zero=2", "fp32", 2},
      {"dp=4,zero=3", "fp32", 2},
      {"dp=4,zero=3,hsdp_shard=2", "fp32", 2},
      {"tp=2,sp=1", "fp32", 2},
      {"tp=2,pp=2", "bf16", 2},
      {"pp=2,dp=2,zero=3", "fp32", 2},
      {"pp=2,schedule=interleaved", "fp32", 4},
  };
  for (const Case& c : cases) {
    const ParallelLayout layout = Layout(c.spec);
    const RunConfig config = Config(layout.pp, c.n_layer, c.precision);
    std::unique_ptr<DistRun> run = RunLayout(config, layout, Tokens(), 0);
    ASSERT_TRUE(run->status.ok()) << c.spec << ": " << run->status.ToString();
    const Result<Precision> precision = ParsePrecision(c.precision);
    ASSERT_TRUE(precision.ok());
    // (kind, name, box, flat range) → replica ids seen, and the planned replica count.
    std::map<std::string, std::set<int>> holders;
    std::map<std::string, int> counts;
    for (int rank = 0; rank < layout.world(); ++rank) {
      const ckpt::StateShards engine = run->engines[static_cast<size_t>(rank)]->Shards();
      const Result<ckpt::StateShards> planned =
          PlanStateShards(config.model, *precision, layout, rank);
      ASSERT_TRUE(planned.ok()) << c.spec << ": " << planned.status().ToString();
      const ckpt::StateShards& plan = *planned;
      ASSERT_EQ(plan.shards.size(), engine.shards.size()) << c.spec << " rank " << rank;
      for (size_t i = 0; i < plan.shards.size(); ++i) {
        const ckpt::TensorShard& p = plan.shards[i];
        const ckpt::TensorShard& e = engine.shards[i];
        EXPECT_EQ(Describe(p), Describe(e)) << c.spec << " rank " << rank;
        EXPECT_TRUE(SameShape(p.global_shape, e.global_shape)) << c.spec << " " << p.name;
        EXPECT_EQ(p.view.data(), nullptr);
        const int64_t held = p.has_flat_range ? p.flat_end - p.flat_begin : p.box_size.numel();
        EXPECT_EQ(held, e.numel()) << c.spec << " " << Describe(e);
        std::string key = Describe(p);
        key = key.substr(0, key.rfind(" replica"));
        holders[key].insert(p.replica);
        EXPECT_EQ(p.replica_count, e.replica_count) << c.spec << " " << key;
        counts[key] = p.replica_count;
      }
    }
    for (const auto& [key, ids] : holders) {
      EXPECT_EQ(static_cast<int>(ids.size()), counts[key]) << c.spec << ": " << key;
      EXPECT_EQ(*ids.begin(), 0) << c.spec << ": " << key;
      EXPECT_EQ(*ids.rbegin(), counts[key] - 1) << c.spec << ": " << key;
    }
  }
}

TEST(ShardPlanTest, RefusesRanksAndLayoutsThatDoNotFit) {
  const RunConfig config = Config(1);
  EXPECT_FALSE(PlanStateShards(config.model, Precision::kFp32, Layout("dp=2"), 2).ok());
  EXPECT_FALSE(PlanStateShards(config.model, Precision::kFp32, Layout("dp=2"), -1).ok());
  const Status tp = PlanStateShards(config.model, Precision::kFp32, Layout("tp=3"), 0).status();
  EXPECT_NE(tp.ToString().find("tp=3"), std::string::npos) << tp.ToString();
  EXPECT_FALSE(PlanStateShards(config.model, Precision::kFp32, Layout("pp=8"), 0).ok());
}

}  // namespace
}  // namespace rt::parallel
