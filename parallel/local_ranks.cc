#include "parallel/local_ranks.h"

#include <mutex>
#include <thread>

#include "base/deadline.h"
#include "comm/store.h"
#include "parallel/engine.h"

namespace rt::parallel {

Status RunRanksAsThreads(int n, const std::string& job,
                         std::vector<std::unique_ptr<comm::Communicator>>* worlds,
                         const RankBody& body) {
  worlds->clear();
  worlds->resize(static_cast<size_t>(n));
  std::shared_ptr<comm::Store> store = comm::NewMemoryStore();
  std::mutex mu;
  Status first;  // the first failure in time: the others are usually its consequence
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<comm::Communicator>& world = (*worlds)[static_cast<size_t>(r)];
      auto run = [&]() -> Status {
        comm::CommOptions o;
        o.store = store;
        o.job = job;
        o.rank = r;
        o.size = n;
        ASSIGN_OR_RETURN(world, comm::NewCpuCommunicator(EngineCommOptions(o)));
        RETURN_IF_ERROR(world->WaitReady(Deadline::AfterMs(60'000)));
        return body(r, *world);
      };
      Status s = run();
      if (s.ok()) return;
      {
        std::lock_guard lock(mu);  // recorded before the abort that makes the others fail
        if (first.ok()) first = s.WithContext("rank " + std::to_string(r));
      }
      if (world) world->Abort();
    });
  }
  for (std::thread& t : threads) t.join();
  return first;
}

}  // namespace rt::parallel
