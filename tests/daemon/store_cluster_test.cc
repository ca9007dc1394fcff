// The embedded chunk store (node.toml [store]) on a local cluster of real ringtraind processes:
// three daemons whose stores form one iofs cluster (replication 2) hold the job's checkpoints
// (ckpt.dir = "ringfs:///ckpt"); kill -9 of a daemon that is not the store's metadata node: its
// chains lose it at the view change, the job resumes from the newest checkpoint in the store,
// the node comes back and its chains heal; `ringckpt verify` of the stored checkpoint passes.
// kill -9 of the metadata node moves its role to the next node.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "base/net/http_client.h"
#include "base/wall_clock.h"
#include "tests/base/net/loop.h"
#include "tests/daemon/local_cluster.h"

namespace rt::daemon {
namespace {

using std::chrono::milliseconds;

class StoreClusterTest : public LocalCluster {
 protected:
  // Starts daemon `id` with 2 slots, /metrics, and a [store] in a 3-node store of replication 2.
  void StartStoreNode(int id) {
    if (store_ports_.empty())
      for (int n = 1; n <= 3; ++n) {
        store_ports_[n] = FreePort();
        http_ports_[n] = FreePort();
      }
    std::string nodes;
    for (const auto& [n, port] : store_ports_)
      nodes +=
          (nodes.empty() ? "" : ",") + std::to_string(n) + "@127.0.0.1:" + std::to_string(port);
    StartNode(id, 2,
              "[http]\nlisten = \"127.0.0.1:" + std::to_string(http_ports_[id]) +
                  "\"\n[store]\nlisten = \"" + StoreAddress(id) + "\"\nnodes = \"" + nodes +
                  "\"\nreplication = 2\nchains = 6\ncapacity_gib = 1\n");
  }
  // The value of series `name` (no labels) in node `id`'s /metrics; -1 when absent.
  double Metric(int id, const std::string& name) {
    net::HttpCallRequest request;
    request.port = http_ports_.at(id);
    request.target = "/metrics";
    auto reply = loop_.Run<Result<net::HttpResponse>>(
        [&]() { return net::HttpCall(request, Deadline::AfterMs(10'000)); });
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) return -1;
    std::istringstream lines(reply->body);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind(name + " ", 0) == 0) return std::atof(line.c_str() + name.size() + 1);
    return -1;
  }
  // Metric(id, name) once `done` holds for it (the gauges follow the store once a second), or
  // the last value after 10 s.
  double MetricOnce(int id, const std::string& name, const std::function<bool(double)>& done) {
    const Deadline deadline = Deadline::AfterMs(10'000);
    double value = Metric(id, name);
    while (!done(value) && !deadline.Expired()) {
      std::this_thread::sleep_for(milliseconds(200));
      value = Metric(id, name);
    }
    return value;
  }
  std::string StoreAddress(int id) const {
    return "127.0.0.1:" + std::to_string(store_ports_.at(id));
  }
  // Node `id`'s "store" object in a status; null when it did not answer.
  static Json Store(const Json& s, int id) {
    for (const Json& n : s["nodes"])
      if (n.value("node", 0) == id && n.contains("store")) return n["store"];
    return nullptr;
  }

  // `ringctl stop` through daemon `id`, then `ringckpt verify` of ringfs://NODE3/ckpt passes.
  void StopAndVerifyThroughNode3(int id) {
    ProcessOutcome stopped = Ctl({"stop"}, id);
    EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
    WaitFor(id, "no workers after ringctl stop", [](const Json& s) {
      for (int n = 1; n <= 3; ++n)
        if (!WorkerPids(s, n).empty()) return false;
      return true;
    });
    auto verified = RunProcess({RINGCKPT_BIN, "verify", "ringfs://" + StoreAddress(3) + "/ckpt"},
                               EnvironmentWithout({}), Deadline::AfterMs(60'000));
    ASSERT_TRUE(verified.ok()) << verified.status().ToString();
    EXPECT_EQ(verified->exit_code, 0) << verified->output;
    EXPECT_NE(verified->output.find(": OK"), std::string::npos) << verified->output;
    std::printf("ringckpt verify through node 3:\n%s", verified->output.c_str());
  }

  std::map<int, uint16_t> store_ports_;
  std::map<int, uint16_t> http_ports_;
  net::Loop loop_;
};

TEST_F(StoreClusterTest, CheckpointsLiveInTheDaemonsStoresAndSurviveAKilledDaemon) {
  for (int id = 1; id <= 3; ++id) StartStoreNode(id);
  WaitFor(1, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });
  TinyJob job;
  job.ckpt_dir = "ringfs:///ckpt";
  ProcessOutcome submitted = Ctl({"submit", TinyJobFile(job)}, 2);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  Json s = WaitFor(1, "training on 3 nodes with a checkpoint in the store", [](const Json& s) {
    return Step(s) >= 12 && Store(s, 1).is_object() && Store(s, 1).value("chunks", 0) > 0 &&
           s["nodes"][0].contains("checkpoint");
  });
  EXPECT_EQ(Store(s, 1)["metadata_node"], true) << s.dump(2);
  EXPECT_EQ(Store(s, 2)["metadata_node"], false) << s.dump(2);
  EXPECT_EQ(Store(s, 1)["chains_degraded"], 0) << s.dump(2);
  EXPECT_EQ(Store(s, 2)["address"], StoreAddress(2));
  int holding = 0;
  for (int id = 1; id <= 3; ++id) holding += Store(s, id).value("chunks", 0) > 0;
  EXPECT_GE(holding, 2) << "replication 2: the checkpoint's chunks are on several nodes\n"
                        << s.dump(2);
  // The chunk-store metrics are the engine's: bytes written (replicas too) and held, no errors.
  double written = 0, held = 0;
  for (int id = 1; id <= 3; ++id) {
    held += MetricOnce(id, "ringtrain_chunkstore_used_bytes",
                       [id](double v) { return id == 1 ? v > 0 : v >= 0; });
    written += Metric(id, "ringtrain_chunkstore_written_bytes_total");
    EXPECT_EQ(Metric(id, "ringtrain_chunkstore_chains_degraded"), 0) << "node " << id;
  }
  EXPECT_GT(written, 0);
  EXPECT_GE(written, held) << "every byte held was written";
  EXPECT_GT(held, 0);
  ProcessOutcome text = Ctl({"status"}, 2);
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("chunk store " + StoreAddress(1) + ": "), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("metadata node: 6 chains, 0 degraded, 0 stopped"), std::string::npos)
      << text.output;
  const std::string uri = s["nodes"][0]["checkpoint"]["uri"].get<std::string>();
  EXPECT_EQ(uri.rfind("ringfs://" + StoreAddress(1) + "/ckpt/", 0), 0u) << uri;

  // kill -9 of daemon 3: its chains lose it with the view, the job resumes from the store.
  const std::string before = Generation(s);
  const int64_t step_before = Step(s);
  const auto kill_at = MonoClock::now();
  const int64_t kill_unix_ms = UnixMs();
  ASSERT_TRUE(nodes_[3]->Signal(SIGKILL).ok());
  s = WaitFor(1, "training on 2 nodes", [&](const Json& s) {
    return Members(s) == 2 && Generation(s) != before && Step(s) >= 1 && OfTheView(s);
  });
  // The status says when the answering daemon installed the view without node 3.
  const int64_t installed = s["view"].value("installed_unix_ms", int64_t{0});
  EXPECT_GE(installed, kill_unix_ms) << s["view"].dump();
  EXPECT_LE(installed, UnixMs()) << s["view"].dump();
  std::printf("view without node 3 installed %.2f s after the kill\n",
              (installed - kill_unix_ms) / 1000.0);
  std::printf("recovery after kill -9 of a store daemon: %.2f s to the first step of %s\n",
              std::chrono::duration<double>(MonoClock::now() - kill_at).count(),
              Generation(s).c_str());
  EXPECT_GT(Store(s, 1).value("chains_degraded", 0), 0) << "the chains of node 3 follow the view\n"
                                                        << s.dump(2);
  EXPECT_GT(MetricOnce(1, "ringtrain_chunkstore_chains_degraded", [](double v) { return v > 0; }),
            0);
  bool resumed = false;
  for (int id = 1; id <= 2; ++id)
    for (const std::string& line : LogLines(id, "resumed at step ")) {
      if (line.find(Generation(s)) == std::string::npos) continue;
      const int64_t step = std::atoll(line.c_str() + line.find("resumed at step ") + 16);
      std::printf("node %d: %s\n", id, line.substr(line.find("recovery: ")).c_str());
      EXPECT_GT(step, 1) << line;
      EXPECT_LE(step, step_before + 10) << line;
      resumed = true;
    }
  EXPECT_TRUE(resumed) << "the generation after the kill resumes from the stored checkpoint\n"
                       << Logs();
  s = WaitFor(1, "two more checkpoints with node 3 down", [&](const Json& s) {
    return s["nodes"][0].contains("checkpoint") &&
           s["nodes"][0]["checkpoint"]["step"].get<int64_t>() >= step_before + 10;
  });

  // Node 3 comes back: it rejoins the view and its chains heal (resync, then serving).
  StartStoreNode(3);
  s = WaitFor(1, "node 3 back and every chain healthy", [](const Json& s) {
    return Members(s) == 3 && Store(s, 1).value("chains_degraded", -1) == 0;
  });

  // Stopped, the newest stored checkpoint verifies through any store node (node 3 included).
  StopAndVerifyThroughNode3(1);
}

// kill -9 of the store's metadata node (node 1, which bootstrapped the cluster and runs rank 0):
// the eldest of nodes 2 and 3 takes the role over with the view that leaves node 1 out, so the
// job resumes from the checkpoint in the store and commits newer ones while node 1 is down; node
// 1 comes back as the youngest member, so the role stays where it is (no second takeover), its
// chains heal, and the newest checkpoint verifies.
TEST_F(StoreClusterTest, LosingTheMetadataNodeMovesItsRoleAndCheckpointsGoOn) {
  for (int id = 1; id <= 3; ++id) StartStoreNode(id);
  WaitFor(1, "a view of 3 members", [](const Json& s) { return Members(s) == 3; });
  TinyJob job;
  job.ckpt_dir = "ringfs:///ckpt";
  ProcessOutcome submitted = Ctl({"submit", TinyJobFile(job)}, 2);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  // The newest committed checkpoint's step in a status (-1: none).
  auto newest = [](const Json& s) {
    int64_t step = -1;
    for (const Json& n : s["nodes"])
      if (n.contains("checkpoint")) step = std::max(step, n["checkpoint"]["step"].get<int64_t>());
    return step;
  };
  Json s = WaitFor(2, "training past a checkpoint in the store", [&](const Json& s) {
    return Step(s) >= 12 && newest(s) > 0 && Store(s, 1).value("metadata_node", false);
  });
  const std::string before = Generation(s);
  const int64_t step_before = Step(s);
  // The role goes to the eldest of nodes 2 and 3: the one the cluster admitted first (they
  // joined node 1 in either order).
  const Json& members = s["view"]["members"];
  ASSERT_EQ(members.size(), 3u);
  const int heir = members[1]["admitted"].get<uint64_t>() <= members[2]["admitted"].get<uint64_t>()
                       ? members[1]["id"].get<int>()
                       : members[2]["id"].get<int>();
  const auto kill_at = MonoClock::now();
  ASSERT_TRUE(nodes_[1]->Signal(SIGKILL).ok());
  s = WaitFor(2, "training on nodes 2 and 3 with the eldest as the metadata node",
              [&](const Json& s) {
                return Members(s) == 2 && Generation(s) != before && Step(s) >= 1 && OfTheView(s) &&
                       Store(s, heir).value("metadata_node", false);
              });
  std::printf("recovery after kill -9 of the metadata node: %.2f s to the first step of %s\n",
              std::chrono::duration<double>(MonoClock::now() - kill_at).count(),
              Generation(s).c_str());
  const std::string after = Generation(s);
  bool resumed = false;
  for (int id = 2; id <= 3; ++id)
    for (const std::string& line : LogLines(id, "resumed at step ")) {
      if (line.find(after) == std::string::npos) continue;
      const int64_t step = std::atoll(line.c_str() + line.find("resumed at step ") + 16);
      std::printf("node %d: %s\n", id, line.substr(line.find("recovery: ")).c_str());
      EXPECT_GT(step, 1) << line;
      resumed = true;
    }
  EXPECT_TRUE(resumed) << "the generation after the kill resumes from the store\n" << Logs();
  EXPECT_FALSE(LogLines(heir, "took the metadata role over").empty()) << Logs();
  s = WaitFor(2, "a newer checkpoint committed without node 1", [&](const Json& s) {
    return newest(s) >= step_before + 10 && Generation(s) == after;
  });

  // Node 1 returns, admitted by a newer view than nodes 2 and 3: the role stays where it is, and
  // every chain serves with its home nodes again.
  StartStoreNode(1);
  s = WaitFor(2, "node 1 back with every chain healthy, the heir still the metadata node",
              [&](const Json& s) {
                return Members(s) == 3 && Store(s, heir).value("metadata_node", false) &&
                       Store(s, heir).value("chains_degraded", -1) == 0 &&
                       !Store(s, 1).value("metadata_node", true);
              });
  EXPECT_EQ(LogLines(heir, "took the metadata role over").size(), 1u) << Logs();
  EXPECT_TRUE(LogLines(heir, "gave up the metadata role").empty()) << Logs();
  for (int id = 1; id <= 3; ++id)
    for (const std::string& line : LogLines(id, "metadata role"))
      std::printf("node %d: %s\n", id, line.c_str());
  const int64_t back = newest(s);
  s = WaitFor(2, "a checkpoint committed with node 1 back",
              [&](const Json& s) { return newest(s) > back && Members(s) == 3 && OfTheView(s); });
  StopAndVerifyThroughNode3(2);
}

// A job naming ringfs:/// on daemons without [store] is refused at submit, naming the key.
TEST_F(StoreClusterTest, ALocalStoreUriNeedsAStore) {
  StartNode(1, 2);
  WaitFor(1, "a view of 1 member", [](const Json& s) { return Members(s) == 1; });
  TinyJob job;
  job.ckpt_dir = "ringfs:///ckpt";
  ProcessOutcome refused = Ctl({"submit", TinyJobFile(job)});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("ckpt.dir"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("[store]"), std::string::npos) << refused.output;
  ASSERT_TRUE(Status(1).ok());
  EXPECT_FALSE(Status(1)->contains("job"));
}

}  // namespace
}  // namespace rt::daemon
