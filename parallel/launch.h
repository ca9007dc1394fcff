// `ringtrain_dist`: distributed training on one machine. The launcher starts a TCP rendezvous
// store on loopback and one worker process per rank (the same executable in worker mode); each
// worker builds its world communicator over that store — CPU for train.device = "cpu", NCCL on
// GPU WorkerGpu() for "cuda" (one GPU per rank; the launcher refuses more ranks than GPUs) — runs
// the DistTrainer for its rank in the training loop of every run (parallel/train_loop.h), and
// rank 0 prints progress and writes the metrics file of a single-process run
// (parallel/run_metrics.h). With [ckpt] dir and every, the ranks save checkpoints together
// (parallel/checkpointing.h); with resume they start from the newest committed one that every
// rank loads, whatever layout wrote it, and append to the metrics file. The store and the
// rank-to-rank links are authenticated with a secret made for the run (RunSecret), so no other
// process can join or read them. Each rank hits the fault point "parallel.train.before_step"
// (test builds) before each step. In test
// builds, RINGTRAIN_FAULTS_RANK=R arms the fault points of RINGTRAIN_FAULTS (base/fault.h) in the
// worker of rank R only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/net/tls_files.h"
#include "base/status.h"
#include "parallel/planned_stop.h"

namespace rt {
struct RunConfig;
struct StepStats;
}  // namespace rt
namespace rt::ckpt {
class Storage;
}
namespace rt::net {
class ClusterSecret;
}

namespace rt::parallel {

struct RankActivity;

// Command-line options of a distributed run.
struct DistTrainOptions {
  std::string config;             // TOML config file ("" = defaults only)
  std::vector<std::string> sets;  // "key=value" overrides, applied in order
  int64_t steps = -1;             // overrides train.steps when ≥ 0
  // When ≥ 1: stop after this step (saving its checkpoint when ckpt.every > 0) without
  // changing train.steps, so the learning-rate schedule and data order stay those of the full
  // run and a later --resume continues it bitwise (`ringtrain train --stop-after`).
  int64_t stop_after = -1;
  std::string layout;   // e.g. "tp=1,pp=2,dp=2,zero=1,schedule=1f1b"
  int ranks = 1;        // local worker processes; must equal the layout's world size
  bool resume = false;  // continue from the newest committed checkpoint in ckpt.dir
  // Worker mode (the launcher passes these to its children).
  int rank = -1;  // this worker's rank; -1 = launcher
  // Worker mode, train.device = "cuda": the index of the GPU this rank computes on; -1 = the
  // one numbered as its rank (every rank on one machine, as `--ranks N` starts them). The
  // daemon passes its slot: rank 9 of a job may be the second GPU of its node.
  int gpu = -1;
  std::string store;          // rendezvous store "host:port"
  std::string job = "train";  // job name scoping the store keys
  // Worker mode: the address this rank's links to the other ranks listen on and advertise
  // (comm/communicator.h CommOptions::listen_address); default loopback.
  std::string listen_address = "127.0.0.1";
  // The secret file (base/net/auth.h) that the run's store and rank-to-rank links, and a
  // ringfs:// ckpt.dir, are authenticated with; "" = none. The launcher passes it to its
  // workers; given none, it creates a secret file of its own for the run (mode 0600, removed
  // when the run ends) for the store and the links (a ringfs:// ckpt.dir then needs a cluster
  // without a secret).
  std::string secret_file;
  // The TLS identity the secret carries (base/net/auth.h ClusterSecret::LoadWithTls): the store
  // and a ringfs:// ckpt.dir are then reached over mutual TLS (the rank-to-rank mesh stays
  // plain). Needs secret_file; passed to the workers as --tls-cert/--tls-key/--tls-ca. Empty:
  // none.
  net::TlsFiles tls;
  // Arguments the workers get before their options: the subcommand words of the executable
  // (e.g. {"train"} for `ringtrain train`); empty for ringtrain_dist.
  std::vector<std::string> command;
  // Worker mode: called on this rank's thread after each of its steps (and the saves due after
  // it, ckpt/checkpointing.h: the previous save has then committed) with the step's stats and
  // seconds (the daemon's workers report progress through it); empty = none.
  std::function<void(const StepStats& stats, double seconds)> on_step;
  // Worker mode: called on this rank's thread with what the rank did (parallel/rank_activity.h:
  // the checkpoint saves and loads settled since the previous call, its process groups' byte
  // totals) after each step's saves (before on_step), after a planned stop's checkpoint
  // finished (before on_stopped), and once more when the training loop returned (also after a
  // failure: best effort); empty = none.
  std::function<void(const RankActivity& activity)> on_activity;
  // Worker mode: recorded as "generation" in every metrics line (the daemon's training
  // generation, so that a metrics file every generation appends to says which wrote a line);
  // "" = not recorded.
  std::string generation;
  // Worker mode: the memory tier (the daemon's memory, daemon/snapshot_storage.h) that snapshots
  // go to every ckpt.memory_every steps and that resume also looks in; null = none.
  std::shared_ptr<ckpt::Storage> memory;
  // Worker mode, a planned stop (docs/daemon.md "Planned changes lose nothing"): called on this
  // rank's thread after each step; returns the planned stop known here (step INT64_MAX: none).
  // The ranks agree on the smallest step in a min all-reduce after every step; once it is at or
  // below the step just done, every rank saves that step's checkpoint synchronously (needs
  // ckpt.every > 0) — or, for a stop a snapshot is enough for, makes sure of its memory
  // snapshot — calls `on_stopped` and returns OK early. Empty = never stop early (and no extra
  // collective).
  std::function<PlannedStop()> stop_at;
  // Worker mode: called on every rank after a planned stop's checkpoint (or memory snapshot) of
  // `step` finished (on rank 0 that means committed); `snapshot_in` is the memory tier's URI
  // when the stop left a memory snapshot only, "" when it left a checkpoint in ckpt.dir.
  std::function<void(int64_t step, const std::string& snapshot_in)> on_stopped;
};

// The launcher (options.rank < 0): validates the config and layout, starts the store, runs
// `options.ranks` workers as `executable` with WorkerArguments, waits for them and stops the
// others as soon as one fails. Worker mode (options.rank ≥ 0): runs one rank until the last step.
// Errors: InvalidArgument for bad options (naming them), those of the config, data, comm and
// engine, and Internal naming the rank and exit status of a failed worker.
Status RunDistributedTrain(const DistTrainOptions& options, const std::string& executable);

// A secret for one local run (`ringtrain train --ranks N`): 32 random bytes in a file of mode
// 0600 inside a fresh folder of mode 0700 under $TMPDIR (default /tmp), named after the
// launcher's pid (ringtrain-run-PID-XXXXXX); the destructor removes both. Only this run's workers
// are given the path (an argument, never the secret itself).
class RunSecret {
 public:
  // Removes the folders of launchers that are gone (killed with -9: no destructor ran), then
  // creates the folder and the secret file. Errors: IoError naming the path.
  static Result<std::unique_ptr<RunSecret>> Create();
  ~RunSecret();
  RunSecret(const RunSecret&) = delete;
  RunSecret& operator=(const RunSecret&) = delete;

  // The secret file's path.
  const std::string& path() const { return path_; }
  // The secret, loaded.
  const std::shared_ptr<const net::ClusterSecret>& secret() const { return secret_; }

 private:
  RunSecret() = default;
  std::string dir_;
  std::string path_;
  std::shared_ptr<const net::ClusterSecret> secret_;
};

// The GPU a worker computes on with train.device = "cuda": options.gpu when given (≥ 0), else
// the one numbered as its rank.
inline int WorkerGpu(const DistTrainOptions& options) {
  return options.gpu >= 0 ? options.gpu : options.rank;
}

// The arguments (argv[1..]) that start rank `rank` of the run described by `options` against the
// store at `store` ("host:port").
std::vector<std::string> WorkerArguments(const DistTrainOptions& options, int rank,
                                         const std::string& store);

}  // namespace rt::parallel
