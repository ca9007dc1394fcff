// daemon/worker_counters: the counters of a worker's reports through their JSON and back, the
// deltas a worker sends (comm totals turned into growth, durations and failures from rank 0
// only), and reports with bad counters refused naming the key.
#include "daemon/worker_counters.h"

#include <gtest/gtest.h>

namespace rt::daemon {
namespace {

using parallel::CheckpointTransfer;
using parallel::GroupBytes;
using parallel::RankActivity;

bool Same(const CheckpointTransfer& a, const CheckpointTransfer& b) {
  return a.memory == b.memory && a.step == b.step && a.bytes == b.bytes && a.seconds == b.seconds;
}

TEST(WorkerCountersTest, RoundTripThroughAReport) {
  WorkerCounters c;
  c.saves = {{.memory = false, .step = 40, .bytes = 1234567, .seconds = 0.25},
             {.memory = true, .step = 50, .bytes = 99, .seconds = -1}};
  c.loads = {{.memory = true, .step = 50, .bytes = 7, .seconds = 1.5}};
  c.failed = {{.memory = false, .step = 60, .bytes = 0, .seconds = 3}};
  c.comm = {{"world", 16, 24}, {"dp_shard", 1 << 20, 1 << 20}};
  Json report = {{"generation", "1.2.0"}, {"rank", 0}, {"step", 60}};
  AddCounters(c, &report);
  EXPECT_FALSE(report["saves"][1].contains("seconds")) << "not timed: no key";
  Result<WorkerCounters> back = ParseCounters(Json::parse(report.dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->saves.size(), 2u);
  EXPECT_TRUE(Same(back->saves[0], c.saves[0]));
  EXPECT_TRUE(Same(back->saves[1], c.saves[1]));
  ASSERT_EQ(back->loads.size(), 1u);
  EXPECT_TRUE(Same(back->loads[0], c.loads[0]));
  ASSERT_EQ(back->failed.size(), 1u);
  EXPECT_TRUE(Same(back->failed[0], c.failed[0]));
  ASSERT_EQ(back->comm.size(), 2u);
  for (const GroupBytes& g : back->comm) {
    const GroupBytes& sent = g.group == "world" ? c.comm[0] : c.comm[1];
    EXPECT_EQ(g.group, sent.group);
    EXPECT_EQ(g.sent, sent.sent);
    EXPECT_EQ(g.received, sent.received);
  }
  // A report without counters (an older worker's) has none; an empty set adds no key.
  Json plain = {{"generation", "1.2.0"}, {"step", 3}};
  EXPECT_TRUE(ParseCounters(plain).value().empty());
  AddCounters({}, &plain);
  EXPECT_EQ(plain.size(), 2u);
}

TEST(WorkerCountersTest, BadCountersAreRefusedNamingTheKey) {
  const std::pair<const char*, const char*> bad[] = {
      {R"({"saves": {}})", "'saves' is not an array"},
      {R"({"saves": [{"tier": "disk", "step": 1, "bytes": 1}]})", "'tier' = 'disk'"},
      {R"({"loads": [{"tier": "store", "step": 1, "bytes": -1}]})", "'bytes'"},
      {R"({"loads": [{"tier": "store", "bytes": 1}]})", "'step'"},
      {R"({"failed_saves": [{"tier": "store", "step": 1, "seconds": -2}]})", "'seconds'"},
      {R"({"comm": {"rogue": {"sent": 1}}})", "'rogue' is not a process group"},
      {R"({"comm": {"world": {"sent": "1"}}})", "'sent'"},
      {R"({"comm": []})", "'comm' is not an object"},
  };
  for (const auto& [text, says] : bad) {
    Result<WorkerCounters> c = ParseCounters(Json::parse(text));
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(c.status().message().find(says), std::string::npos)
        << text << ": " << c.status().ToString();
  }
}

TEST(WorkerCountersTest, DeltasSendGrowthAndLeaveTimingToRankZero) {
  RankActivity first;
  first.checkpoints.saves = {{.step = 10, .bytes = 500, .seconds = 0.5}};
  first.checkpoints.failed = {{.step = 5, .seconds = 0.1}};
  first.comm = {{"world", 100, 90}, {"dp_shard", 1000, 1000}};
  RankActivity second;
  second.checkpoints.loads = {{.memory = true, .step = 10, .bytes = 700, .seconds = 0.2}};
  second.comm = {{"world", 100, 90}, {"dp_shard", 1600, 1500}};

  CounterDeltas lead(/*lead=*/true);
  lead.Add(first);
  lead.Add(second);
  WorkerCounters c = lead.Take();
  ASSERT_EQ(c.saves.size(), 1u);
  EXPECT_EQ(c.saves[0].seconds, 0.5);
  ASSERT_EQ(c.failed.size(), 1u);
  ASSERT_EQ(c.loads.size(), 1u);
  EXPECT_EQ(c.loads[0].bytes, 700u);
  ASSERT_EQ(c.comm.size(), 2u);  // the totals of the last Add
  EXPECT_EQ(c.comm[0].group, "world");
  EXPECT_EQ(c.comm[0].sent, 100u);
  EXPECT_EQ(c.comm[1].sent, 1600u);
  EXPECT_EQ(c.comm[1].received, 1500u);
  EXPECT_TRUE(lead.Take().empty());
  // Unchanged totals send nothing; growth sends only the growth.
  RankActivity same;
  same.comm = second.comm;
  lead.Add(same);
  EXPECT_TRUE(lead.Take().empty());
  RankActivity third;
  third.comm = {{"world", 100, 90}, {"dp_shard", 1700, 1500}};
  lead.Add(third);
  c = lead.Take();
  ASSERT_EQ(c.comm.size(), 1u);
  EXPECT_EQ(c.comm[0].group, "dp_shard");
  EXPECT_EQ(c.comm[0].sent, 100u);
  EXPECT_EQ(c.comm[0].received, 0u);

  CounterDeltas other(/*lead=*/false);
  other.Add(first);
  c = other.Take();
  ASSERT_EQ(c.saves.size(), 1u);
  EXPECT_EQ(c.saves[0].bytes, 500u);
  EXPECT_LT(c.saves[0].seconds, 0) << "timed by rank 0 only";
  EXPECT_TRUE(c.failed.empty()) << "counted by rank 0 only";
}

}  // namespace
}  // namespace rt::daemon
