// The job the chaos campaign trains: config tiny on generated tokens, CPU workers, asynchronous
// checkpoints into a folder, and the calls that submit and stop it.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "bench/chaos/cluster.h"

namespace rt::chaos {

class Observer;

// Writes train_000.bin and val.bin (byte tokens of a repeated 97-token sentence) into `dir`.
// Errors: those of WriteTokenShard, IoError naming the folder.
Status WriteChaosData(const std::string& dir);

// The job file text: name, data folder, checkpoint folder, steps, checkpoint interval,
// memory-tier interval (0: none) and copies; tp=1, one rank per daemon slot, global batch 60
// (divisible by 1..6 data-parallel ranks).
std::string ChaosJob(const std::string& name, const std::string& data_dir,
                     const std::string& ckpt_dir, int64_t steps, int64_t ckpt_every,
                     int64_t memory_every, int memory_copies);

// Submits `job_text` through the first responsive daemon. Errors: the daemons' refusal.
Status SubmitJob(LocalCluster& cluster, const std::string& job_text);

// Stops the job and waits until no daemon runs a worker. Errors: DeadlineExceeded.
Status StopJob(LocalCluster& cluster, Observer& observer);

}  // namespace rt::chaos
