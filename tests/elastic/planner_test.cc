// The layout planner as a table (nodes and policy → layout, micro-batches, placement or the
// reason the job waits), and properties over random node sets.
#include "elastic/planner.h"

#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace rt::elastic {
namespace {

// DESIGN.md's tiny model (L=2, C=64, H=4, T=32, V=256), batch 8 in one micro-batch.
JobSpec TinyJob() {
  JobSpec job;
  job.run.model = {2, 64, 4, 32, 256};
  job.run.train.batch_size = 8;
  job.run.train.micro_batches = 1;
  return job;
}

std::vector<NodeSlots> Nodes(int count, int slots, uint64_t first_id = 1) {
  std::vector<NodeSlots> n;
  for (int i = 0; i < count; ++i) n.push_back({first_id + static_cast<uint64_t>(i), slots});
  return n;
}

struct Case {
  std::string name;
  std::vector<NodeSlots> nodes;
  ElasticPolicy policy;
  std::string layout;       // expected DescribeLayout, or "" when the job waits
  int micro = 0;            // expected micro-batches
  std::string used_nodes;   // expected nodes of the ranks, in rank order ("1,1,2,2")
  std::string wait_reason;  // a part of the waiting message
};

ElasticPolicy Policy(int tp, int pp, int pp_max = 0) {
  ElasticPolicy p;
  p.tp = tp;
  p.pp = pp;
  p.pp_max = pp_max;
  return p;
}

std::string NodesOf(const JobPlan& plan) {
  std::string s;
  for (const RankPlace& r : plan.ranks) s += (s.empty() ? "" : ",") + std::to_string(r.node);
  return s;
}

TEST(Planner, Table) {
  ElasticPolicy hsdp = Policy(1, 1);
  hsdp.zero = 3;
  hsdp.hsdp_shard = 2;
  ElasticPolicy interleaved = Policy(1, 2);
  interleaved.schedule = "interleaved";
  ElasticPolicy small_micro = Policy(1, 1);
  small_micro.micro_rows = 1;
  ElasticPolicy at_least_two = Policy(1, 1);
  at_least_two.min_nodes = 2;
  ElasticPolicy at_least_three = Policy(1, 1);
  at_least_three.min_nodes = 3;
  ElasticPolicy two_nodes = Policy(2, 1);
  two_nodes.max_nodes = 2;
  const Case cases[] = {
      {"tp2 over four nodes of two", Nodes(4, 2), Policy(2, 1),
       "tp=2,pp=1,dp=4,zero=0,sp=0,schedule=1f1b", 1, "1,1,2,2,3,3,4,4", ""},
      {"three groups: dp=3 does not divide the batch, dp=2", Nodes(3, 2), Policy(2, 1),
       "tp=2,pp=1,dp=2,zero=0,sp=0,schedule=1f1b", 1, "1,1,2,2", ""},
      {"pp2 fixed: a micro-batch per stage", Nodes(4, 2), Policy(1, 2),
       "tp=1,pp=2,dp=4,zero=0,sp=0,schedule=1f1b", 2, "1,1,2,2,3,3,4,4", ""},
      {"pp range: the most ranks, then the deepest pipeline", Nodes(3, 1), Policy(1, 1, 4),
       "tp=1,pp=3,dp=1,zero=0,sp=0,schedule=1f1b", 4, "1,2,3", ""},
      {"pp range with spare ranks: deeper pipeline on a tie", Nodes(4, 1), Policy(1, 1, 2),
       "tp=1,pp=2,dp=2,zero=0,sp=0,schedule=1f1b", 2, "1,2,3,4", ""},
      {"HSDP", Nodes(2, 2), hsdp, "tp=1,pp=1,dp=4,zero=3,hsdp_shard=2,sp=0,schedule=1f1b", 1,
       "1,1,2,2", ""},
      {"interleaved: a multiple of pp", Nodes(4, 1), interleaved,
       "tp=1,pp=2,dp=2,zero=0,sp=0,schedule=interleaved,vpp=2", 2, "1,2,3,4", ""},
      {"micro_rows bounds the micro-batch", Nodes(4, 1), small_micro,
       "tp=1,pp=1,dp=4,zero=0,sp=0,schedule=1f1b", 2, "1,2,3,4", ""},
      {"max_nodes takes the lowest ids",
       {{7, 2}, {3, 2}, {9, 2}, {5, 2}},
       two_nodes,
       "tp=2,pp=1,dp=2,zero=0,sp=0,schedule=1f1b",
       1,
       "3,3,5,5",
       ""},
      {"nodes too small for tp are skipped",
       {{1, 1}, {2, 2}, {3, 2}},
       Policy(2, 1),
       "tp=2,pp=1,dp=2,zero=0,sp=0,schedule=1f1b",
       1,
       "2,2,3,3",
       ""},
      {"a witness (0 slots) runs no rank",
       {{1, 2}, {2, 0}, {3, 2}},
       Policy(1, 1),
       "tp=1,pp=1,dp=4,zero=0,sp=0,schedule=1f1b",
       1,
       "1,1,3,3",
       ""},
      {"a witness does not count for min_nodes",
       {{1, 2}, {2, 0}},
       at_least_two,
       "",
       0,
       "",
       "1 live"},
      {"min_nodes not met", Nodes(2, 4), at_least_three, "", 0, "", "elastic.min_nodes = 3"},
      {"tp larger than every node", Nodes(4, 2), Policy(4, 1), "", 0, "", "min_nodes"},
      {"tp does not divide the heads", Nodes(2, 3), Policy(3, 1), "", 0, "",
       "must divide model.n_head"},
      {"more stages than blocks + 2", Nodes(5, 1), Policy(1, 5), "", 0, "",
       "exceeds model.n_layer + 2"},
  };
  for (const Case& c : cases) {
    JobSpec job = TinyJob();
    job.elastic = c.policy;
    Result<JobPlan> plan = PlanJob(c.nodes, job);
    if (c.layout.empty()) {
      ASSERT_FALSE(plan.ok()) << c.name << ": " << plan->Describe();
      EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition) << c.name;
      EXPECT_NE(plan.status().message().find(c.wait_reason), std::string::npos)
          << c.name << ": " << plan.status().ToString();
      continue;
    }
    ASSERT_TRUE(plan.ok()) << c.name << ": " << plan.status().ToString();
    EXPECT_EQ(parallel::DescribeLayout(plan->layout), c.layout) << c.name;
    EXPECT_EQ(plan->micro_batches, c.micro) << c.name;
    EXPECT_EQ(NodesOf(*plan), c.used_nodes) << c.name;
  }
}

TEST(Planner, DescribeNamesLayoutNodesAndMicroBatches) {
  JobSpec job = TinyJob();
  job.elastic = Policy(2, 1);
  Result<JobPlan> plan = PlanJob(Nodes(2, 2), job);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->Describe(),
            "tp=2,pp=1,dp=2,zero=0,sp=0,schedule=1f1b on nodes 1,2, 1 micro-batch");
}

// Over random clusters and policies: every plan keeps tensor-parallel groups on one node, uses
// each slot at most once, keeps the global batch, fits the model, and does not depend on the
// order the nodes are listed in.
TEST(Planner, PropertiesOverRandomClusters) {
  std::mt19937_64 rng(7);
  int planned = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<NodeSlots> nodes;
    const int count = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < count; ++i)
      nodes.push_back({100 + rng() % 50 * 2 + static_cast<uint64_t>(i) * 1000,
                       1 + static_cast<int>(rng() % 4)});
    JobSpec job = TinyJob();
    job.run.train.batch_size = 1 + static_cast<int>(rng() % 16);
    job.elastic.tp = 1 << (rng() % 3);
    job.elastic.pp = 1 + static_cast<int>(rng() % 2);
    job.elastic.pp_max = job.elastic.pp + static_cast<int>(rng() % 3);
    job.elastic.zero = static_cast<int>(rng() % 4);
    Result<JobPlan> plan = PlanJob(nodes, job);
    std::vector<NodeSlots> shuffled = nodes;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    Result<JobPlan> again = PlanJob(shuffled, job);
    ASSERT_EQ(plan.ok(), again.ok());
    if (!plan.ok()) {
      EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
      continue;
    }
    ++planned;
    EXPECT_EQ(plan->Describe(), again->Describe());
    const parallel::ParallelLayout& l = plan->layout;
    ASSERT_EQ(static_cast<int>(plan->ranks.size()), l.world());
    EXPECT_EQ(job.run.train.batch_size % (l.dp() * plan->micro_batches), 0);
    RunConfig run = job.run;
    run.train.micro_batches = plan->micro_batches;
    EXPECT_TRUE(parallel::CheckLayoutFits(run, l).ok());
    std::map<uint64_t, int> slots;
    for (const NodeSlots& n : nodes) slots[n.id] = n.slots;
    std::set<std::pair<uint64_t, int>> used;
    for (int r = 0; r < l.world(); ++r) {
      const RankPlace& p = plan->ranks[static_cast<size_t>(r)];
      EXPECT_TRUE(used.insert({p.node, p.slot}).second) << "slot used twice";
      EXPECT_LT(p.slot, slots[p.node]);
      EXPECT_EQ(p.node, plan->ranks[static_cast<size_t>(r - r % l.tp)].node)
          << "a tensor-parallel group spans nodes";
    }
  }
  EXPECT_GT(planned, 500);  // the properties were checked on many plans, not vacuously
}

}  // namespace
}  // namespace rt::elastic
