// The membership protocol under the deterministic simulator (tests/elastic/membership_sim.h):
// thousands of seeds of crashes, restarts, message loss, duplication, reordering, delays and
// partitions (2|2, 3|1, flapping). Every seed checks the safety invariants throughout, then heals
// the network, restarts the crashed nodes (one may stay dead), and checks that the live nodes —
// when they hold a majority of every view that may be decided — install a view of exactly
// themselves within a bound (250 ticks), and that the compare-and-set history is linearizable.
// MEMBERSHIP_SIM_SEEDS scales the seed counts (default: 10,000 seeds in all).
#include "tests/elastic/membership_sim.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace rt::elastic::membership::sim {
namespace {

enum class Faults { kCrashes, kSplit22, kSplit31, kFlapping, kEverything };

// Ticks a majority may take to converge after the faults end (50 ms ticks: 12.5 s; the
// slowest of the 10,000 seeds takes about half of it). Converging
// needs at most: a suspicion (20 ticks) + confirmation (8) + a ballot or two per removed node,
// and a join period (10) + a ballot per joiner.
constexpr int kConvergeBound = 250;

struct SeedOutcome {
  std::vector<std::string> errors;
  bool liveness_checked = false;
  int converge_ticks = 0;
};

std::set<NodeId> All(const Simulator& sim) { return {sim.ids().begin(), sim.ids().end()}; }

// A random split of the nodes into two groups of `first` and the rest.
std::vector<std::set<NodeId>> Split(Simulator& sim, size_t first) {
  std::vector<NodeId> ids = sim.ids();
  std::shuffle(ids.begin(), ids.end(), sim.random());
  std::set<NodeId> a(ids.begin(), ids.begin() + first), b(ids.begin() + first, ids.end());
  return {a, b};
}

void MaybeProposeState(Simulator& sim, uint64_t seed, int tick) {
  if (sim.random()() % 30 != 0) return;
  std::vector<NodeId> members;
  for (NodeId id : sim.ids()) {
    if (sim.running(id) && sim.machine(id).IsMember()) members.push_back(id);
  }
  if (members.empty()) return;
  const NodeId node = members[sim.random()() % members.size()];
  uint64_t expected = sim.machine(node).state().version;
  if (expected > 0 && sim.random()() % 4 == 0) --expected;  // a stale read
  sim.ProposeState(
      node, expected,
      "s" + std::to_string(seed) + "n" + std::to_string(node) + "t" + std::to_string(tick));
}

SeedOutcome RunSeed(uint64_t seed, Faults faults) {
  const int nodes = faults == Faults::kSplit22 || faults == Faults::kSplit31 ? 4 : 5;
  Simulator sim(seed, nodes, {});
  for (NodeId id : sim.ids()) sim.Restart(id);
  sim.max_delay = 2;
  sim.Run(60);  // everyone joins on a clean network
  SeedOutcome out;

  const bool lossy =
      faults == Faults::kEverything || faults == Faults::kFlapping || sim.random()() % 2 == 0;
  if (lossy) {
    sim.loss = 0.05;
    sim.duplicate = 0.05;
    sim.max_delay = 6;
  }
  const bool crashes = faults == Faults::kCrashes || faults == Faults::kEverything;
  const int fault_ticks = 240;
  int next_flap = 10;
  uint64_t frozen_slot = 0;
  bool all_members_at_split = false;
  for (int t = 0; t < fault_ticks; ++t) {
    if (faults == Faults::kSplit22 || faults == Faults::kSplit31) {
      if (t == 20) {
        all_members_at_split = sim.running(1) && sim.machine(1).view().members.size() == 4;
        sim.Partition(Split(sim, faults == Faults::kSplit22 ? 2 : 1));
      }
      // 2|2 of a four-member view: neither half is a majority, so once the messages in flight
      // have landed no slot may be decided until the partition heals.
      if (faults == Faults::kSplit22 && all_members_at_split && t == 30)
        frozen_slot = sim.max_slot();
      if (faults == Faults::kSplit22 && all_members_at_split && t > 30 && t < 200 &&
          sim.max_slot() != frozen_slot) {
        out.errors.push_back("2|2 split decided slot " + std::to_string(sim.max_slot()));
        break;
      }
      if (t == 200) sim.Partition({});
    }
    if (faults == Faults::kFlapping || faults == Faults::kEverything) {
      if (t == next_flap) {
        const uint64_t pick = sim.random()() % 3;
        if (pick == 0) {
          sim.Partition({});
        } else {
          sim.Partition(Split(sim, pick == 1 ? 2 : 1));
        }
        next_flap = t + 5 + static_cast<int>(sim.random()() % 25);
      }
    }
    if (crashes) {
      const NodeId victim = sim.ids()[sim.random()() % sim.ids().size()];
      const uint64_t roll = sim.random()() % 100;
      if (roll < 2 && sim.running(victim)) sim.Crash(victim);
      if (roll == 99 && sim.random()() % 4 == 0) sim.Wipe(victim);  // its disk is lost too
      if (roll >= 2 && roll < 5 && !sim.running(victim)) sim.Restart(victim);
    }
    MaybeProposeState(sim, seed, t);
    sim.Step();
  }

  // Heal, restart everyone, maybe leave one node dead for good.
  sim.Partition({});
  sim.loss = 0;
  for (NodeId id : sim.ids()) sim.Restart(id);
  std::set<NodeId> live = All(sim);
  if (sim.random()() % 2 == 0) {
    const NodeId dead = sim.ids()[sim.random()() % sim.ids().size()];
    sim.Crash(dead);
    live.erase(dead);
  }
  sim.Run(60);  // messages in flight land; join requests of the dead expire
  bool majority_everywhere = true;
  for (const View& view : sim.CandidateViews()) {
    size_t alive = 0;
    for (const Member& m : view.members) alive += sim.Votes(m.id, view) ? 1 : 0;
    majority_everywhere = majority_everywhere && alive * 2 > view.members.size();
  }
  if (majority_everywhere) {
    out.liveness_checked = true;
    int t = 0;
    while (!sim.Converged(live) && t < kConvergeBound) {
      sim.Step();
      ++t;
    }
    out.converge_ticks = t;
    if (!sim.Converged(live)) {
      std::string views;
      for (NodeId id : live) {
        views += " n" + std::to_string(id) + ":g" +
                 std::to_string(sim.machine(id).view().generation) + "[";
        for (NodeId m : sim.machine(id).view().Ids()) views += std::to_string(m) + ",";
        views += "]";
      }
      out.errors.push_back("live nodes did not converge within " + std::to_string(kConvergeBound) +
                           " ticks:" + views);
    } else {
      // The replicated state still takes a compare-and-set (retried, at a member, when one
      // fails: a proposal accepted during the faults may still be decided and change the view).
      bool decided = false;
      for (int i = 0; i < kConvergeBound && !decided; ++i) {
        const StateCall* last = sim.calls().empty() ? nullptr : &sim.calls().back();
        if (last && last->blob.starts_with("final") && last->result) {
          decided = last->result->status.ok();
          if (decided) break;
        }
        if (!last || !last->blob.starts_with("final") || last->result) {
          for (NodeId node : live) {
            if (!sim.machine(node).IsMember()) continue;
            sim.ProposeState(node, sim.machine(node).state().version,
                             "final" + std::to_string(seed) + "." + std::to_string(i));
            break;
          }
        }
        sim.Step();
      }
      if (!decided) out.errors.push_back("final compare-and-set was not decided");
    }
  }
  sim.CheckStateHistory();
  for (const std::string& v : sim.violations()) out.errors.push_back(v);
  return out;
}

uint64_t Seeds(uint64_t base) {
  const char* env = std::getenv("MEMBERSHIP_SIM_SEEDS");
  if (env == nullptr) return base;
  return std::max<uint64_t>(1, base * std::strtoull(env, nullptr, 10) / 10000);
}

void RunMany(Faults faults, uint64_t base, uint64_t first_seed) {
  uint64_t seeds = Seeds(base);
  // MEMBERSHIP_SIM_SEED=N replays one seed (with MEMBERSHIP_SIM_TRACE for every message).
  if (const char* one = std::getenv("MEMBERSHIP_SIM_SEED")) {
    first_seed = std::strtoull(one, nullptr, 10);
    seeds = 1;
  }
  int failures = 0;
  uint64_t checked = 0;
  int worst = 0;
  uint64_t worst_seed = 0;
  for (uint64_t seed = first_seed; seed < first_seed + seeds && failures < 3; ++seed) {
    SeedOutcome out = RunSeed(seed, faults);
    if (out.liveness_checked) {
      ++checked;
      if (out.converge_ticks >= worst) worst_seed = seed;
      worst = std::max(worst, out.converge_ticks);
    }
    if (!out.errors.empty()) {
      ++failures;
      std::string all;
      for (const std::string& e : out.errors) all += "\n  " + e;
      ADD_FAILURE() << "seed " << seed << ":" << all;
    }
  }
  std::printf("%llu seeds, liveness checked on %llu, slowest convergence %d ticks (seed %llu)\n",
              static_cast<unsigned long long>(seeds), static_cast<unsigned long long>(checked),
              worst, static_cast<unsigned long long>(worst_seed));
  // Most seeds must reach the liveness check, or the check proves little.
  EXPECT_GT(checked * 10, seeds * 6);
}

TEST(MembershipSimTest, CrashesAndRestarts) { RunMany(Faults::kCrashes, 2500, 1'000'000); }
TEST(MembershipSimTest, Partition2v2) { RunMany(Faults::kSplit22, 1500, 2'000'000); }
TEST(MembershipSimTest, Partition3v1) { RunMany(Faults::kSplit31, 1500, 3'000'000); }
TEST(MembershipSimTest, FlappingPartitions) { RunMany(Faults::kFlapping, 2000, 4'000'000); }
TEST(MembershipSimTest, EverythingAtOnce) { RunMany(Faults::kEverything, 2500, 5'000'000); }

}  // namespace
}  // namespace rt::elastic::membership::sim
