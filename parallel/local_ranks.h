// The ranks of a world as threads of this process: each thread bootstraps a CPU communicator
// (EngineCommOptions) through one in-memory rendezvous store and runs the caller's body for its
// rank. The tests and `ringtrain bench parallel` use it; processes go through launch.h instead.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "comm/communicator.h"

namespace rt::parallel {

// What one rank runs: `world` is its ready world communicator.
using RankBody = std::function<Status(int rank, comm::Communicator& world)>;

// Runs `body` for ranks 0..n−1, each on its own thread, and joins them. `job` scopes the store's
// keys. `worlds` receives the n communicators and keeps them alive after the call, so whatever
// the bodies built on them (engines) can still be inspected; it is cleared first. A rank whose
// bootstrap or body fails aborts its communicator, so the other ranks fail fast instead of
// waiting out their deadlines. Bootstrap waits at most 60 s. Returns OK or the first failure in
// time (the others are usually its consequence), with the failing rank named.
Status RunRanksAsThreads(int n, const std::string& job,
                         std::vector<std::unique_ptr<comm::Communicator>>* worlds,
                         const RankBody& body);

}  // namespace rt::parallel
