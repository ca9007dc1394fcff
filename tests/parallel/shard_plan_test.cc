// The shard plan (parallel/shard_plan.h): for every kind of layout, PlanStateShards names exactly
// the pieces the running engine's Shards() holds on each rank, and every piece's replica_count is
// the number of ranks holding it, with replica ids 0 .. replica_count−1.
#include "parallel/shard_plan.h"

#include <map>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "parallel/engine.h"
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

// The gradient norm's ranges against its definition, element by element: every element of the
// rank's norm pieces once, counted unless a replica group but the first, the tied copy or a
// tensor-parallel rank but the first holds it. Unmerged, one range per piece; merged, the same
// elements in fewer ranges, none of which could join its successor; one rank's whole stage
// (packed tensors) is one range.
TEST(ShardPlanTest, NormRangesCoverTheNormPiecesOnceMergedOrNot) {
  const char* specs[] = {"",     "dp=2",      "dp=2,zero=2",      "dp=4,zero=3,hsdp_shard=2",
                         "tp=2", "tp=2,pp=2", "pp=2,dp=2,zero=1", "pp=2,schedule=interleaved"};
  const RunConfig config = Config(1, 4);
  for (const char* spec : specs) {
    const ParallelLayout layout = Layout(spec);
    for (int rank = 0; rank < layout.world(); ++rank) {
      const std::string what = std::string(spec) + " rank " + std::to_string(rank);
      const RankCoords c = CoordsOf(layout, rank);
      const StageLayout stage = BuildStageLayout(config.model, layout.pp, c.pp, layout.dp_shard,
                                                 layout.tp, c.tp, layout.virtual_stages);
      const Ownership o = PlanOwnership(stage, layout.zero, layout.dp_shard, c.dp_shard);
      // Buffer element → counted, from the definition.
      std::map<int64_t, bool> want;
      for (const OwnedPiece& pc : o.norm) {
        const StageTensor& t = stage.tensors[static_cast<size_t>(pc.tensor)];
        const bool counted = c.dp_replicate == 0 && !t.tied_copy && (t.tp_sharded || c.tp == 0);
        const int64_t begin = layout.zero < 2 ? pc.flat : pc.own;
        for (int64_t e = begin; e < begin + pc.count; ++e)
          ASSERT_TRUE(want.emplace(e, counted).second) << what << ": element " << e << " twice";
      }
      for (const bool merge : {false, true}) {
        const std::vector<NormRange> ranges = PlanNormRanges(stage, o, layout.zero, c, merge);
        if (!merge) {
          ASSERT_EQ(ranges.size(), o.norm.size()) << what;
        }
        std::map<int64_t, bool> got;
        for (size_t i = 0; i < ranges.size(); ++i) {
          const NormRange& r = ranges[i];
          for (int64_t e = r.begin; e < r.begin + r.count; ++e)
            ASSERT_TRUE(got.emplace(e, r.counted).second) << what << ": element " << e << " twice";
          if (merge && i + 1 < ranges.size()) {
            EXPECT_FALSE(r.begin + r.count == ranges[i + 1].begin &&
                         r.counted == ranges[i + 1].counted)
                << what << ": ranges " << i << " and " << i + 1 << " could be one";
          }
        }
        EXPECT_EQ(got, want) << what << (merge ? " merged" : " unmerged");
      }
    }
  }
  const StageLayout whole = BuildStageLayout(config.model, 1, 0, 1);
  const std::vector<NormRange> one =
      PlanNormRanges(whole, PlanOwnership(whole, 0, 1, 0), 0, RankCoords{}, true);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].begin, 0);
  EXPECT_EQ(one[0].count, whole.total);
  EXPECT_TRUE(one[0].counted);
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
