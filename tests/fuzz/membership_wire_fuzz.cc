// Fuzz target: the decoders of membership messages (from peers) and of the membership state file
// (from disk) must reject or accept any byte string without crashing, and what they accept must
// re-encode to the same bytes.
#include <cstring>
#include <vector>

#include "elastic/membership/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rt::elastic::membership;
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  if (auto m = DecodeMessage(bytes); m.ok()) {
    auto again = EncodeMessage(*m);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  if (auto s = DecodeDurableState(bytes); s.ok()) {
    auto again = EncodeDurableState(*s);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  using namespace rt::elastic;
  using namespace rt::elastic::membership;
  std::vector<std::vector<uint8_t>> seeds;
  auto add = [&](std::span<const std::byte> b) {
    seeds.emplace_back(reinterpret_cast<const uint8_t*>(b.data()),
                       reinterpret_cast<const uint8_t*>(b.data()) + b.size());
  };
  Entry e;
  e.slot = 4;
  e.view = View{3, {Member{1, "127.0.0.1:7001", 7, 1}, Member{2, "127.0.0.1:7002", 9, 2}}};
  e.state = ReplicatedState{2, "job"};
  e.recent = {StateChange{2, StateRequestId{1, 9}}};
  Message m;
  m.kind = Message::Kind::kAccept;
  m.from = 1;
  m.to = 2;
  m.from_address = "127.0.0.1:7001";
  m.slot = 3;
  m.ballot = Ballot{5, 1};
  m.value = e;
  add(EncodeMessage(m));
  m.kind = Message::Kind::kPing;
  m.value.reset();
  add(EncodeMessage(m));
  DurableState s;
  s.decided = e;
  s.promised = Ballot{6, 2};
  s.accepted_ballot = Ballot{6, 2};
  s.accepted = e;
  add(EncodeDurableState(s));
  return seeds;
}
