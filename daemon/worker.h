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
// Exit status of a worker that stopped for a planned change (docs/daemon.md "Planned changes
// lose nothing"): it saved the checkpoint of the step it stopped after, and rank 0 reported it.
inline constexpr int kWorkerStoppedExit = 76;
// Exit status of a worker whose training failed because another rank died or fell silent (comm's
// PeerFailed): the cause is most likely on another node, whose loss the membership is about to
// report (Node::OnWorkerFailed waits a moment for that view before it starts a new epoch).
inline constexpr int kWorkerPeerLostExit = 77;

// A worker's orders, given on its command line by its daemon.
struct WorkerOptions {
  std::string daemon;  // "host:port" of its daemon's control port (its host: the rank links listen
                       // there too)
  std::string secret_file;           // the cluster secret, "" = none
  net::TlsFiles tls;                 // the TLS identity it carries (its daemon's [tls]), or none
  std::string generation;            // the training generation "job.view.epoch" it belongs to
  parallel::DistTrainOptions train;  // config, layout, ranks, rank, store, job scope
};

// Runs the worker until the last step. Errors: Unavailable naming the daemon when it cannot be
// reached at start, and those of the training (config, rendezvous, comm, engine). Never returns
// once the daemon is lost: the process exits with kWorkerOrphanedExit. When the job has
// checkpoints (ckpt.dir, ckpt.every > 0), rank 0 learns a planned stop step from its daemon's
// answers to its reports; all ranks stop after the agreed step, save it synchronously, rank 0
// reports it, and the process exits with kWorkerStoppedExit.
Status RunWorker(WorkerOptions options, const std::string& executable);

}  // namespace rt::daemon
