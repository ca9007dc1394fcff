// Fuzz target: every decoder of untrusted iofs input — replica messages and chain configs from
// peers, cluster info, metadata handovers and fsck reports from servers, the chain manager state
// a ping carries, chunk metadata records and the namespace header from disk — must reject or accept
// any byte string without crashing, and what the chain codecs accept must re-encode to the same
// bytes.
#include <cstring>
#include <vector>

#include "iofs/chain/chain_manager.h"
#include "iofs/chain/codec.h"
#include "iofs/engine/chunk_record.h"
#include "iofs/net/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  if (auto m = rt::iofs::chain::DecodeMessage(bytes); m.ok()) {
    auto again = rt::iofs::chain::EncodeMessage(*m);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  if (auto c = rt::iofs::chain::DecodeConfig(bytes); c.ok()) {
    auto again = rt::iofs::chain::EncodeConfig(*c);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  (void)rt::iofs::wire::DecodeInfo(bytes);
  (void)rt::iofs::wire::DecodeFsck(bytes);
  if (auto h = rt::iofs::wire::DecodeHandover(bytes); h.ok()) {
    auto again = rt::iofs::wire::EncodeHandover(*h);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  (void)rt::iofs::wire::DecodeHandoverRequest(bytes);
  if (auto p = rt::iofs::wire::DecodePing(bytes); p.ok()) {
    auto again = rt::iofs::wire::EncodePing(*p);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  (void)rt::iofs::chain::ChainManager::SavedVersionSum(bytes);
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto r = rt::iofs::DecodeChunkRecord(text, "fuzz"); r.ok()) {
    if (rt::iofs::EncodeChunkRecord(*r) != text) __builtin_trap();
  }
  (void)rt::iofs::DecodeEngineHeader(text);
  rt::ByteReader reader(bytes, "fuzz");
  (void)rt::iofs::wire::GetPath(reader);
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  using namespace rt::iofs;
  std::vector<std::vector<uint8_t>> seeds;
  auto add = [&](std::span<const std::byte> b) {
    seeds.emplace_back(reinterpret_cast<const uint8_t*>(b.data()),
                       reinterpret_cast<const uint8_t*>(b.data()) + b.size());
  };
  chain::Message m;
  m.kind = chain::Message::Kind::kForward;
  m.chain = 2;
  m.chain_version = 7;
  m.from = 1;
  m.to = 2;
  m.key = 99;
  m.version = 3;
  m.value.data = std::make_shared<const std::string>("hello chunk");
  add(chain::EncodeMessage(m));
  m.kind = chain::Message::Kind::kAck;
  m.value = {};
  add(chain::EncodeMessage(m));
  chain::ChainConfig c{
      1, 5, {{1, chain::MemberState::kServing}, {3, chain::MemberState::kSyncing}}};
  add(chain::EncodeConfig(c));
  ChunkRecord r;
  r.length = 70000;
  r.version = 4;
  r.block_crcs = {1, 2};
  std::string rec = EncodeChunkRecord(r);
  add(std::as_bytes(std::span(rec.data(), rec.size())));
  wire::ClusterInfo info{1, 1, 3, 8, 4 << 20, {{1, "127.0.0.1", 7600}}};
  add(wire::EncodeInfo(info));
  auto layout = chain::BuildChains({1, 2, 3}, 2, 3);
  if (layout.ok()) {
    chain::ChainManager manager(*layout);
    (void)manager.OnNodeDown(2);
    add(wire::EncodeHandover(wire::Handover{manager.Save(), {c}, {{1, 250}, {3, -1600}}}));
    add(wire::EncodePing(wire::Ping{1, manager.Save()}));
  }
  add(wire::EncodeHandoverRequest(wire::HandoverRequest{5, 2}));
  return seeds;
}
