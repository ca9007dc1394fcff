// Fuzz target: the replicated cluster state decoder (bytes from the membership service, i.e. from
// other nodes) must reject or accept any input without crashing, and whatever it accepts must
// re-encode to a blob that decodes to the same state.
#include <string>
#include <vector>

#include "daemon/cluster_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string blob(reinterpret_cast<const char*>(data), size);
  rt::Result<rt::daemon::ClusterState> state = rt::daemon::DecodeClusterState(blob);
  if (state.ok()) {
    rt::Result<rt::daemon::ClusterState> again =
        rt::daemon::DecodeClusterState(rt::daemon::EncodeClusterState(*state));
    if (!again.ok() || !(*again == *state)) __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  rt::daemon::ClusterState s;
  s.PutNode({1, 2, "127.0.0.1:4001"});
  s.PutNode({2, 2, "127.0.0.1:4002", 4});  // registered during epoch 4
  s.job = rt::daemon::JobEntry{3, "tiny", "[model]\nn_layer = 2\n", rt::daemon::JobDesire::kRun, 0};
  s.epoch = 4;
  s.drained = {2};
  s.cause = {"worker rank 1 exited", 17};
  std::vector<std::vector<uint8_t>> seeds;
  for (const rt::daemon::ClusterState& state : {rt::daemon::ClusterState{}, s}) {
    const std::string text = rt::daemon::EncodeClusterState(state);
    seeds.emplace_back(text.begin(), text.end());
  }
  return seeds;
}
