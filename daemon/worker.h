// Worker mode of `ringtraind` (docs/daemon.md, "Processes and addresses"): one rank of the job's
// current training generation, started by its daemon. It runs parallel/launch.h's worker loop
// (DistTrainer over the generation's rendezvous store), reports progress to its daemon after
// every step (rank 0 only), and exits as soon as its daemon is gone: PR_SET_PDEATHSIG (set by
// the daemon) plus a long-poll on a loopback RPC connection whose loss ends the process.
#pragma once

#include <string>

#include "base/status.h"
#include "parallel/launch.h"

namespace rt::daemon {

// Exit status of a worker whose daemon went away (or told it to stop).
inline constexpr int kWorkerOrphanedExit = 75;

// A worker's orders, given on its command line by its daemon.
struct WorkerOptions {
  std::string daemon;       // "host:port" of its daemon's control port (loopback)
  std::string secret_file;  // the cluster secret, "" = none
  std::string generation;   // the training generation "job.view.epoch" it belongs to
  parallel::DistTrainOptions train;  // config, layout, ranks, rank, store, job scope
};

// Runs the worker until the last step. Errors: Unavailable naming the daemon when it cannot be
// reached at start, and those of the training (config, rendezvous, comm, engine). Never returns
// once the daemon is lost: the process exits with kWorkerOrphanedExit.
Status RunWorker(WorkerOptions options, const std::string& executable);

}  // namespace rt::daemon
