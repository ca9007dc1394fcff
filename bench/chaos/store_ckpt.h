// The chaos campaign's look at a job's checkpoints in the daemons' embedded chunk store
// (CampaignOptions::store): what ckpt_files.h reads from a folder, read through a daemon's chunk
// server instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/chaos/cluster.h"

namespace rt::chaos {

// "ringfs://ADDRESS/PATH" through the chunk server of the first responsive daemon (node 1's
// when none is), for `ringckpt`.
std::string StoreUri(LocalCluster& cluster, const std::string& path);
// The same through each responsive daemon, in node order (node 1's alone when none is).
std::vector<std::string> StoreUris(LocalCluster& cluster, const std::string& path);

// The committed steps of PATH in the store (its `latest`), newest first, read through the first
// responsive daemon's chunk server that answers; empty when none answers or nothing is
// committed yet.
std::vector<int64_t> CommittedStepsInStore(LocalCluster& cluster, const std::string& path);

// The options that prove the cluster's secret to `ringckpt` ("--secret-file FILE"), if it has one.
std::vector<std::string> RingckptSecretOptions(const LocalCluster& cluster);

}  // namespace rt::chaos
