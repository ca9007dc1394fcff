// The cost of a chain replica's tick (ReplicaMachine::OnTick, every 100 ms per chain in ringfsd)
// against how many keys the chain holds. Deleted chunks stay as tombstones (a 19-minute chaos
// campaign left 9,000-14,000 on each node against about 25 live chunks), so a tick must cost in
// proportion to the keys with pending versions, not to every key the chain ever held.
// Usage: iofs_replica_tick_bench [Google Benchmark flags]
#include <map>
#include <memory>
#include <string>

#include <benchmark/benchmark.h>

#include "iofs/chain/replica.h"

namespace rt::iofs::chain {
namespace {

// The middle replica of a 3-member chain holding `tombstones` committed deletions and 8 keys
// with a pending version (forwarded, not yet acknowledged).
ReplicaMachine MiddleReplica(int64_t tombstones) {
  std::map<ChunkKey, ChunkState> chunks;
  for (int64_t k = 0; k < tombstones; ++k) {
    ChunkState& st = chunks[static_cast<ChunkKey>(k) << 8];
    st.committed_version = 2;
    st.committed.tombstone = true;
  }
  const auto data = std::make_shared<const std::string>(4096, 'x');
  for (ChunkKey k = 1; k <= 8; ++k) chunks[(ChunkKey{1} << 40) + k].pending[1] = Value{data};
  ReplicaMachine replica(2, 0, std::move(chunks), /*retransmit_ticks=*/2);
  replica.OnConfig(ChainConfig{0, 1, {{1}, {2}, {3}}});
  (void)replica.TakeOutputs();
  return replica;
}

// One tick and the outputs it produced (every other tick re-forwards the 8 pending versions).
void BM_Tick(benchmark::State& state) {
  ReplicaMachine replica = MiddleReplica(state.range(0));
  for (auto _ : state) {
    replica.OnTick();
    benchmark::DoNotOptimize(replica.TakeOutputs());
  }
  state.counters["keys"] = static_cast<double>(state.range(0) + 8);
}
BENCHMARK(BM_Tick)->Arg(0)->Arg(10'000)->Arg(100'000)->Arg(1'000'000);

}  // namespace
}  // namespace rt::iofs::chain
