// Layout parsing, rank coordinates and stage layouts.
#include "parallel/layout.h"

#include <set>

#include <gtest/gtest.h>

#include "parallel/stage_layout.h"
#include "tests/parallel/test_util.h"

namespace rt::parallel {
namespace {

TEST(LayoutTest, ParsesEveryKey) {
  Result<ParallelLayout> l = ParseLayout("tp=2,pp=2,dp=4,zero=3,hsdp_shard=2,sp=1,schedule=gpipe");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->tp, 2);
  EXPECT_EQ(l->pp, 2);
  EXPECT_EQ(l->dp_shard, 2);
  EXPECT_EQ(l->dp_replicate, 2);
  EXPECT_EQ(l->zero, 3);
  EXPECT_TRUE(l->sequence_parallel);
  EXPECT_EQ(l->schedule, PipelineSchedule::kGpipe);
  EXPECT_EQ(l->world(), 16);
  EXPECT_EQ(DescribeLayout(*l), "tp=2,pp=2,dp=4,zero=3,hsdp_shard=2,sp=1,schedule=gpipe");
  Result<ParallelLayout> one = ParseLayout("");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->world(), 1);
}

TEST(LayoutTest, RejectsBadInputNamingIt) {
  for (const char* bad : {"tp=0", "zero=4", "dp=4,hsdp_shard=3,zero=3", "dp=2,hsdp_shard=2",
                          "tpp=2", "pp", "schedule=zigzag", "sp=2", "dp=x"}) {
    Result<ParallelLayout> l = ParseLayout(bad);
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseLayout("tpp=2").status().ToString().find("tpp"), std::string::npos);
}

TEST(LayoutTest, RankOrderIsTpThenShardThenReplicateThenPp) {
  ParallelLayout l;
  l.tp = 2;
  l.dp_shard = 3;
  l.dp_replicate = 2;
  l.pp = 2;
  std::set<int> seen;
  for (int r = 0; r < l.world(); ++r) {
    const RankCoords c = CoordsOf(l, r);
    EXPECT_EQ(RankOf(l, c), r);
    seen.insert(r);
  }
  EXPECT_EQ(CoordsOf(l, 1).tp, 1);
  EXPECT_EQ(CoordsOf(l, 2).dp_shard, 1);
  EXPECT_EQ(CoordsOf(l, 6).dp_replicate, 1);
  EXPECT_EQ(CoordsOf(l, 12).pp, 1);
  EXPECT_EQ(CoordsOf(l, 7).dp, 3);
}

TEST(StageLayoutTest, StagesCoverEveryTensorOnceExceptTheTiedCopy) {
  const ModelConfig m = rt::testing::TinyConfig().model;
  for (int p : {1, 2, 3, 4}) {
    std::multiset<std::string> names;
    int layers = 0;
    for (int s = 0; s < p; ++s) {
      const StageLayout l = BuildStageLayout(m, p, s, 4);
      layers += l.layers();
      for (const StageUnit& u : l.units) EXPECT_EQ(u.size % 4, 0);
      for (const StageTensor& t : l.tensors)
        if (!t.tied_copy) names.insert(t.name);
      EXPECT_EQ(l.has_embedding, s == 0);
      EXPECT_EQ(l.has_head, s == p - 1);
    }
    EXPECT_EQ(layers, m.n_layer);
    EXPECT_EQ(names.size(), static_cast<size_t>(2 + 12 * m.n_layer + 2)) << p;
    EXPECT_EQ(names.count("wte"), 1u);
  }
  // Two blocks over four stages go to the middle ones.
  EXPECT_EQ(BuildStageLayout(m, 4, 0, 1).layers(), 0);
  EXPECT_EQ(BuildStageLayout(m, 4, 1, 1).layers(), 1);
  EXPECT_EQ(BuildStageLayout(m, 4, 2, 1).layers(), 1);
  EXPECT_EQ(BuildStageLayout(m, 4, 3, 1).layers(), 0);
}

}  // namespace
}  // namespace rt::parallel
