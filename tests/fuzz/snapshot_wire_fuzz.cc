// Fuzz target: the memory tier's message decoder (payloads from workers and other daemons) must
// reject or accept any input without crashing; whatever it accepts re-encodes to a payload that
// decodes to the same head and body.
#include <algorithm>
#include <vector>

#include "daemon/snapshot_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> payload(reinterpret_cast<const std::byte*>(data), size);
  rt::Result<rt::daemon::SnapshotMessage> m = rt::daemon::DecodeSnapshotMessage(payload, "fuzz");
  if (m.ok()) {
    const std::vector<std::byte> again = rt::daemon::EncodeSnapshotMessage(m->head, m->body);
    rt::Result<rt::daemon::SnapshotMessage> back =
        rt::daemon::DecodeSnapshotMessage(again, "fuzz again");
    if (!back.ok() || back->head.dump() != m->head.dump() ||
        !std::equal(back->body.begin(), back->body.end(), m->body.begin(), m->body.end()))
      __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::vector<uint8_t>> seeds;
  const std::vector<uint8_t> body = {1, 2, 3, 4, 5};
  for (const nlohmann::json& head :
       {nlohmann::json{{"job", 1},
                       {"path", "step-000000000003/rank-00000.data"},
                       {"upload", "a.1"},
                       {"offset", 0},
                       {"total", 5},
                       {"scope", "origin"}},
        nlohmann::json{{"names", {"latest", "step-000000000003"}}}, nlohmann::json::object()}) {
    const std::vector<std::byte> p = rt::daemon::EncodeSnapshotMessage(
        head, std::span(reinterpret_cast<const std::byte*>(body.data()), body.size()));
    const auto* b = reinterpret_cast<const uint8_t*>(p.data());
    seeds.emplace_back(b, b + p.size());
  }
  return seeds;
}
