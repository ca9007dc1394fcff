// The interleaved 1F1B schedule (virtual pipeline stages): the Megatron ordering, parity with one
// process for pp=2 and pp=4 with two chunks per rank, and the shard contract.
#include <set>
#include <utility>

#include <gtest/gtest.h>

#include "parallel/schedule.h"
#include "parallel/stage_layout.h"
#include "tests/parallel/parity.h"

namespace rt::parallel {
namespace {

using testing::Assemble;
using testing::CheckParity;
using testing::CompareParams;
using testing::Config;
using testing::DistRun;
using testing::kTolerance;
using testing::Layout;
using testing::ParamDiff;
using testing::RunLayout;
using testing::Tokens;

TEST(ScheduleTest, InterleavedIsMegatronsOrder) {
  // Megatron-LM's forward_backward_pipelining_with_interleaving for p=2, v=2, m=4 on rank 0:
  // (p−1−0)·2 + (v−1)·p = 4 warm-up forwards, F(k+4) B(k) pairs, then 4 backwards.
  const std::vector<PipelineOp> ops =
      BuildPipelineSchedule(PipelineSchedule::kInterleaved, 2, 0, 4, 2);
  const std::vector<PipelineOp> expected = {
      {true, 0, 0},  {true, 0, 1},  {true, 1, 0},  {true, 1, 1},  {true, 0, 2}, {false, 1, 0},
      {true, 0, 3},  {false, 1, 1}, {true, 1, 2},  {false, 0, 0}, {true, 1, 3}, {false, 0, 1},
      {false, 1, 2}, {false, 1, 3}, {false, 0, 2}, {false, 0, 3}};
  ASSERT_EQ(ops.size(), expected.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(ops[i].forward, expected[i].forward) << i;
    EXPECT_EQ(ops[i].chunk, expected[i].chunk) << i;
    EXPECT_EQ(ops[i].micro, expected[i].micro) << i;
  }
  // The last rank warms up (v−1)·p forwards (then the steady state's first forward); with
  // m = p every forward comes first.
  const std::vector<PipelineOp> last =
      BuildPipelineSchedule(PipelineSchedule::kInterleaved, 2, 1, 4, 2);
  int warmup = 0;
  while (last[static_cast<size_t>(warmup)].forward) ++warmup;
  EXPECT_EQ(warmup, 2 + 1);
  const std::vector<PipelineOp> equal =
      BuildPipelineSchedule(PipelineSchedule::kInterleaved, 4, 3, 4, 2);
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(equal[i].forward) << i;
}

TEST(ScheduleTest, EveryScheduleRunsEachPassOnceAfterItsForward) {
  for (PipelineSchedule s :
       {PipelineSchedule::kGpipe, PipelineSchedule::kOneFOneB, PipelineSchedule::kInterleaved}) {
    const int v = s == PipelineSchedule::kInterleaved ? 3 : 1;
    for (int p : {2, 4}) {
      for (int stage = 0; stage < p; ++stage) {
        std::set<std::pair<int, int>> forwards, backwards;
        for (const PipelineOp& op : BuildPipelineSchedule(s, p, stage, 2 * p, v)) {
          if (op.forward) {
            EXPECT_TRUE(forwards.insert({op.chunk, op.micro}).second);
          } else {
            EXPECT_TRUE(forwards.count({op.chunk, op.micro})) << "backward before forward";
            EXPECT_TRUE(backwards.insert({op.chunk, op.micro}).second);
          }
        }
        EXPECT_EQ(forwards.size(), static_cast<size_t>(2 * p * v));
        EXPECT_EQ(backwards.size(), static_cast<size_t>(2 * p * v));
      }
    }
  }
}

TEST(StageLayoutTest, InterleavedChunksAreVirtualStagesRoundRobin) {
  ModelConfig m = rt::testing::TinyConfig().model;
  m.n_layer = 6;
  // pp=4, v=2: 8 virtual stages; the 6 blocks go to virtual stages 1..6.
  const StageLayout s0 = BuildStageLayout(m, 4, 0, 1, 1, 0, 2);
  ASSERT_EQ(s0.chunks.size(), 2u);
  EXPECT_EQ(s0.chunks[0].virtual_stage, 0);
  EXPECT_TRUE(s0.chunks[0].has_embedding);
  EXPECT_EQ(s0.chunks[0].layers(), 0);
  EXPECT_EQ(s0.chunks[1].virtual_stage, 4);
  EXPECT_EQ(s0.chunks[1].first_layer, 3);
  EXPECT_EQ(s0.chunks[1].first_unit, s0.aux_units);
  const StageLayout s3 = BuildStageLayout(m, 4, 3, 1, 1, 0, 2);
  EXPECT_EQ(s3.chunks[0].first_layer, 2);
  EXPECT_EQ(s3.chunks[0].layers(), 1);
  EXPECT_TRUE(s3.chunks[1].has_head);
  EXPECT_EQ(s3.chunks[1].layers(), 0);
  int layers = 0;
  for (int s = 0; s < 4; ++s) layers += BuildStageLayout(m, 4, s, 1, 1, 0, 2).layers();
  EXPECT_EQ(layers, 6);
}

TEST(LayoutTest, InterleavedNeedsVirtualStagesAndPipeline) {
  Result<ParallelLayout> l = ParseLayout("pp=2,schedule=interleaved");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->virtual_stages, 2);
  EXPECT_EQ(DescribeLayout(*l), "tp=1,pp=2,dp=1,zero=0,sp=0,schedule=interleaved,vpp=2");
  EXPECT_EQ(ParseLayout("pp=2,vpp=3,schedule=interleaved")->virtual_stages, 3);
  for (const char* bad : {"pp=2,vpp=2", "schedule=interleaved", "pp=2,vpp=0,schedule=interleaved"})
    EXPECT_EQ(ParseLayout(bad).status().code(), StatusCode::kInvalidArgument) << bad;
}

TEST(InterleavedParityTest, MatchesOneProcess) {
  CheckParity("pp=2,vpp=2,schedule=interleaved", Config(4), kTolerance);
  CheckParity("pp=4,vpp=2,schedule=interleaved", Config(4, 6), kTolerance);
  CheckParity("pp=2,vpp=2,dp=2,zero=3,schedule=interleaved", Config(2), kTolerance);
}

TEST(InterleavedParityTest, RejectsMicroBatchesNotAMultipleOfStages) {
  std::unique_ptr<DistRun> run =
      RunLayout(Config(3), Layout("pp=2,schedule=interleaved"), Tokens(), 1);
  EXPECT_EQ(run->status.code(), StatusCode::kInvalidArgument) << run->status.ToString();
}

TEST(ShardContractTest, InterleavedStateIsTheSingleProcessState) {
  Result<std::unique_ptr<Trainer>> fresh = Trainer::Create(Config(4, 6), Tokens(), "");
  ASSERT_TRUE(fresh.ok());
  for (const char* spec :
       {"pp=4,vpp=2,schedule=interleaved", "pp=2,vpp=3,dp=2,zero=2,schedule=interleaved"}) {
    std::unique_ptr<DistRun> run = RunLayout(Config(4, 6), Layout(spec), Tokens(), 0);
    ASSERT_TRUE(run->status.ok()) << spec << ": " << run->status.ToString();
    const AdamWOptimizer& opt = (*fresh)->optimizer();
    for (const auto& [kind, arena] : {std::pair{ckpt::StateKind::kMaster, &opt.master()},
                                      std::pair{ckpt::StateKind::kAdamM, &opt.m()}}) {
      std::string error;
      const auto got = Assemble(*run, kind, &error);
      EXPECT_EQ(error, "") << spec;
      EXPECT_EQ(got.size(), static_cast<size_t>(arena->size())) << spec;
      EXPECT_EQ(CompareParams(got, *arena, &error).per_tensor, 0.0) << spec;
      EXPECT_EQ(error, "") << spec;
    }
  }
}

}  // namespace
}  // namespace rt::parallel
