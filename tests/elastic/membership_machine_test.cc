// Single scenarios of the membership protocol, step by step on the simulator (default timing:
// 50 ms ticks, suspicion after 20 silent ticks), and the codecs of its messages and state file.
#include <gtest/gtest.h>

#include "base/bytes.h"
#include "base/crc32c.h"
#include "elastic/membership/codec.h"
#include "tests/elastic/membership_sim.h"

namespace rt::elastic::membership::sim {
namespace {

std::set<NodeId> Range(NodeId first, NodeId last) {
  std::set<NodeId> ids;
  for (NodeId id = first; id <= last; ++id) ids.insert(id);
  return ids;
}

// Runs until the nodes in `live` agree on a view of exactly themselves; returns the ticks taken
// (or -1 after `limit`).
int RunUntilConverged(Simulator& sim, const std::set<NodeId>& live, int limit) {
  for (int t = 0; t <= limit; ++t) {
    if (sim.Converged(live)) return t;
    sim.Step();
  }
  return -1;
}

TEST(MembershipMachineTest, NodesJoinThroughTheSeedsAndFormOneView) {
  Simulator sim(1, 5, Range(1, 5));
  ASSERT_GE(RunUntilConverged(sim, Range(1, 5), 200), 0);
  EXPECT_EQ(sim.machine(3).view().members[2].address, "n3");
  EXPECT_TRUE(sim.violations().empty()) << sim.violations()[0];
}

TEST(MembershipMachineTest, KilledNodeIsRemovedThroughItsBrokenConnection) {
  Simulator sim(2, 4, Range(1, 4));
  ASSERT_GE(RunUntilConverged(sim, Range(1, 4), 200), 0);
  const uint64_t generation = sim.machine(1).view().generation;
  sim.Crash(2);
  const int ticks = RunUntilConverged(sim, {1, 3, 4}, 100);
  // Unreachable at the next ping (2 ticks), confirmed by a member's ping, one ballot.
  ASSERT_GE(ticks, 0);
  EXPECT_LE(ticks, 15);
  EXPECT_EQ(sim.machine(1).view().generation, generation + 1);
  EXPECT_TRUE(sim.violations().empty()) << sim.violations()[0];
}

TEST(MembershipMachineTest, HungNodeIsRemovedAfterMissedHeartbeats) {
  Simulator sim(3, 4, Range(1, 4));
  ASSERT_GE(RunUntilConverged(sim, Range(1, 4), 200), 0);
  sim.Partition({{1, 2, 3}, {4}});  // silent, like SIGSTOP: no connection breaks
  const int ticks = RunUntilConverged(sim, {1, 2, 3}, 100);
  ASSERT_GE(ticks, 20);  // not before the heartbeats are missed
  EXPECT_LE(ticks, 40);  // 2 s
}

TEST(MembershipMachineTest, RestartedNodeRejoins) {
  Simulator sim(4, 4, Range(1, 4));
  ASSERT_GE(RunUntilConverged(sim, Range(1, 4), 200), 0);
  sim.Crash(4);
  ASSERT_GE(RunUntilConverged(sim, {1, 2, 3}, 100), 0);
  sim.Restart(4);
  ASSERT_GE(RunUntilConverged(sim, Range(1, 4), 100), 0);
  EXPECT_TRUE(sim.violations().empty()) << sim.violations()[0];
}

TEST(MembershipMachineTest, ARejoiningNodeIsAdmittedAnewAndComesLastInSeniority) {
  Simulator sim(8, 4, Range(1, 4));
  ASSERT_GE(RunUntilConverged(sim, Range(1, 4), 200), 0);
  const View before = sim.machine(2).view();
  EXPECT_EQ(before.EldestFirst().front(), 1u);  // it bootstrapped the cluster
  EXPECT_EQ(before.members[0].admitted, 1u);
  sim.Crash(1);
  ASSERT_GE(RunUntilConverged(sim, {2, 3, 4}, 100), 0);
  sim.Restart(1);
  ASSERT_GE(RunUntilConverged(sim, Range(1, 4), 100), 0);
  const View after = sim.machine(2).view();
  EXPECT_EQ(after.members[0].admitted, after.generation);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(after.members[i].admitted, before.members[i].admitted);
  // The others keep their order; node 1 comes last.
  std::vector<NodeId> want = before.EldestFirst();
  want.erase(want.begin());
  want.push_back(1);
  EXPECT_EQ(after.EldestFirst(), want);
  EXPECT_TRUE(sim.violations().empty()) << sim.violations()[0];
}

TEST(MembershipMachineTest, LeaveRemovesTheNodeAtOnceAndItStaysOut) {
  Simulator sim(5, 5, Range(1, 5));
  ASSERT_GE(RunUntilConverged(sim, Range(1, 5), 200), 0);
  sim.Leave(3);
  const int ticks = RunUntilConverged(sim, {1, 2, 4, 5}, 100);
  ASSERT_GE(ticks, 0);
  EXPECT_LT(ticks, 10);  // no suspicion delay
  EXPECT_FALSE(sim.machine(3).IsMember());
  sim.Run(200);
  EXPECT_TRUE(sim.Converged({1, 2, 4, 5}));
}

TEST(MembershipMachineTest, MinorityNeverInstallsAViewOrAState) {
  Simulator sim(6, 3, Range(1, 3));
  ASSERT_GE(RunUntilConverged(sim, Range(1, 3), 200), 0);
  const uint64_t slot = sim.max_slot();
  sim.Crash(2);
  sim.Crash(3);
  sim.ProposeState(1, sim.machine(1).state().version, "alone");
  sim.Run(1000);
  EXPECT_EQ(sim.max_slot(), slot);
  EXPECT_EQ(sim.machine(1).view().Ids(), (std::vector<NodeId>{1, 2, 3}));
  EXPECT_FALSE(sim.calls().back().result.has_value());
  // The majority comes back: the pending compare-and-set is decided then.
  sim.Restart(2);
  for (int i = 0; i < 200 && !sim.calls().back().result; ++i) sim.Step();
  ASSERT_TRUE(sim.calls().back().result.has_value());
  EXPECT_TRUE(sim.calls().back().result->status.ok());
  EXPECT_EQ(sim.machine(1).state().blob, "alone");
}

TEST(MembershipMachineTest, CompareAndSetRefusesAStaleVersion) {
  Simulator sim(7, 3, Range(1, 3));
  ASSERT_GE(RunUntilConverged(sim, Range(1, 3), 200), 0);
  sim.ProposeState(2, 0, "first");
  sim.Run(20);
  ASSERT_TRUE(sim.calls().back().result && sim.calls().back().result->status.ok());
  EXPECT_EQ(sim.calls().back().result->version, 1u);
  sim.ProposeState(3, 0, "stale");
  sim.Run(20);
  ASSERT_TRUE(sim.calls().back().result.has_value());
  EXPECT_EQ(sim.calls().back().result->status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sim.machine(1).state(), (ReplicatedState{1, "first"}));
  sim.CheckStateHistory();
  EXPECT_TRUE(sim.violations().empty()) << sim.violations()[0];
}

Entry SampleEntry() {
  Entry e;
  e.slot = 9;
  e.view.generation = 4;
  e.view.members = {Member{1, "10.0.0.1:7000", 11, 3}, Member{5, "10.0.0.5:7000", 55, 1}};
  e.state = ReplicatedState{3, std::string("job\0blob", 8)};
  e.recent = {StateChange{3, StateRequestId{5, 77}}};
  return e;
}

TEST(MembershipCodecTest, MessagesAndStateRoundTrip) {
  Message m;
  m.kind = Message::Kind::kPromise;
  m.from = 5;
  m.to = 1;
  m.from_address = "10.0.0.5:7000";
  m.from_incarnation = 55;
  m.slot = 8;
  m.ballot = Ballot{12, 5};
  m.accepted_ballot = Ballot{11, 1};
  m.value = SampleEntry();
  auto decoded = DecodeMessage(EncodeMessage(m));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, m);

  DurableState state;
  state.incarnation = 11;
  state.decided = SampleEntry();
  state.promised = Ballot{12, 5};
  state.accepted_ballot = Ballot{12, 5};
  state.accepted = SampleEntry();
  state.accepted->slot = 10;
  auto restored = DecodeDurableState(EncodeDurableState(state));
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, state);
}

TEST(MembershipCodecTest, DamagedInputIsRefusedNamingWhatFailed) {
  DurableState state;
  state.decided = SampleEntry();
  std::vector<std::byte> file = EncodeDurableState(state);
  file[file.size() - 3] ^= std::byte{0x40};
  auto damaged = DecodeDurableState(file);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kCorruption);
  EXPECT_NE(damaged.status().ToString().find("CRC32C"), std::string::npos);

  Message m;
  m.kind = Message::Kind::kDecided;
  m.from = 2;
  m.value = SampleEntry();
  std::vector<std::byte> wire = EncodeMessage(m);
  auto truncated = DecodeMessage(std::span(wire).first(wire.size() - 1));
  EXPECT_EQ(truncated.status().code(), StatusCode::kCorruption);
  wire[6] = std::byte{99};  // kind
  auto bad_kind = DecodeMessage(wire);
  ASSERT_FALSE(bad_kind.ok());
  EXPECT_NE(bad_kind.status().ToString().find("unknown kind 99"), std::string::npos);

  m.value->view.members[0].admitted = m.value->view.generation + 1;
  auto from_the_future = DecodeMessage(EncodeMessage(m));
  ASSERT_FALSE(from_the_future.ok());
  EXPECT_NE(from_the_future.status().ToString().find("admitted by generation 5"),
            std::string::npos);
  Message ping;
  ping.kind = Message::Kind::kPing;
  ping.from = 2;
  std::vector<std::byte> old = EncodeMessage(ping);
  old[4] = std::byte{1};  // version 1: the members of a cluster run one version
  EXPECT_NE(DecodeMessage(old).status().ToString().find("unsupported version 1"),
            std::string::npos);
}

// A state file of version 1 (members without `admitted`), written field by field as
// docs/formats/membership_state.md describes it.
std::vector<std::byte> VersionOneStateFile() {
  ByteWriter body;
  body.Put<uint64_t>(11);  // incarnation
  body.Put<uint64_t>(9);   // decided: slot, generation, members
  body.Put<uint64_t>(4);
  body.Put<uint32_t>(2);
  for (const Member& m : SampleEntry().view.members) {
    body.Put<uint64_t>(m.id);
    body.PutString(m.address);
    body.Put<uint64_t>(m.incarnation);
  }
  body.Put<uint64_t>(0);  // state version, blob, recent changes
  body.PutString("");
  body.Put<uint32_t>(0);
  for (int i = 0; i < 4; ++i) body.Put<uint64_t>(0);  // promised, accepted ballot
  body.Put<uint8_t>(0);                               // nothing accepted
  ByteWriter file;
  file.Put<uint32_t>(0x534D5452);
  file.Put<uint16_t>(1);
  file.Put<uint16_t>(0);
  file.Put<uint32_t>(static_cast<uint32_t>(body.size()));
  file.Put<uint32_t>(Crc32c(body.bytes()));
  file.PutBytes(body.bytes().data(), body.size());
  return file.Take();
}

TEST(MembershipCodecTest, StateFileOfVersionOneLoadsWithAdmittedUnknown) {
  auto state = DecodeDurableState(VersionOneStateFile());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->incarnation, 11u);
  ASSERT_EQ(state->decided.view.members.size(), 2u);
  EXPECT_EQ(state->decided.view.members[1].incarnation, 55u);
  EXPECT_EQ(state->decided.view.members[0].admitted, 0u);
  EXPECT_EQ(state->decided.view.members[1].admitted, 0u);
  // Unknown seniority orders by id, as the metadata node was chosen before.
  EXPECT_EQ(state->decided.view.EldestFirst(), (std::vector<NodeId>{1, 5}));
}

}  // namespace
}  // namespace rt::elastic::membership::sim
