// One rank as a separate process, started by process_test.cc.
//   comm_test_worker table <store_port> <rank> <size> <tcp|shm>
//     runs the collective table; exit 0 when every check passes.
//   comm_test_worker table-nobody <store_port> <rank> <size> <tcp|shm>
//     as table, but rank 1 drops root for user nobody after bootstrap (run as root).
//   comm_test_worker kill <store_port> <rank> <size> <tcp|shm>
//     all-reduces 16 MiB in a loop on generation 1 (reporting progress in the store) until the
//     communicator fails (the test kill -9's one rank), records the error and the time it was
//     seen, then joins generation 2 with the survivors and checks one all-reduce.
//   comm_test_worker skew <store_port> <rank> 2 shm
//     single-copy all-reduces between two ranks, rank 1 slowed by a delay at every block it
//     claims; checks every result and stores the bytes this rank reduced ("reduced/<rank>").
//   comm_test_worker spin <store_port> <rank> <size> <tcp|shm>
//     as kill, with 8-byte all-reduces and a 30 s shared-memory yield window: a survivor is
//     polling (not sleeping on its futex) when its peer dies.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "base/fault.h"
#include "comm/communicator.h"
#include "tests/comm/table.h"

using namespace rt;
using namespace rt::comm;

// The skew mode (see the top of the file). Values are small integers: every sum is exact.
int Skew(Communicator& comm, Store& store, int rank) {
  if (rank == 1) fault::Arm("comm.single_copy.block", {fault::Action::kDelay, 20, 0});
  const size_t count = (1u << 20) + 3;  // 4 MiB and a tail: 17 blocks of 256 KiB
  std::vector<float> send(count), recv(count);
  for (int iter = 0; iter < 4; ++iter) {
    for (size_t i = 0; i < count; ++i)
      send[i] = static_cast<float>((i * 7 + rank * 3 + iter) % 1000);
    const bool in_place = iter % 2 == 1;
    if (in_place) recv = send;
    Status s = comm.AllReduce(in_place ? recv.data() : send.data(), recv.data(), count, DType::kF32,
                              ReduceOp::kSum)
                   ->Wait(Deadline::AfterMs(60'000));
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
      return 1;
    }
    for (size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>((i * 7 + iter) % 1000 + (i * 7 + 3 + iter) % 1000);
      if (recv[i] != want) {
        std::fprintf(stderr, "rank %d iter %d: element %zu is %g, want %g\n", rank, iter, i,
                     recv[i], want);
        return 1;
      }
    }
  }
  const uint64_t reduced = comm.stats().single_copy_reduced_bytes;
  return store.Set("reduced/" + std::to_string(rank), ToBytes(std::to_string(reduced)),
                   Deadline::AfterMs(5000))
                 .ok()
             ? 0
             : 9;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s table|table-nobody|kill|spin|skew port rank size tcp|shm\n",
                 argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  uint16_t port = static_cast<uint16_t>(std::atoi(argv[2]));
  int rank = std::atoi(argv[3]), size = std::atoi(argv[4]);
  Transport transport = std::strcmp(argv[5], "shm") == 0 ? Transport::kShm : Transport::kTcp;
  auto store = ConnectTcpStore("127.0.0.1", port, Deadline::AfterMs(10'000));
  if (!store.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, store.status().ToString().c_str());
    return 3;
  }
  CommOptions o;
  o.store = *store;
  o.rank = rank;
  o.size = size;
  o.transport = transport;
  o.generation = 1;
  o.shm_ring_bytes = 1 << 20;
  o.shm_arena_bytes = 1 << 20;  // 512 KiB halves: large all-reduces take several arena steps
  o.shm_single_copy_oversubscribed = true;  // 4 MiB and larger all-reduces: single copy
  o.tcp_connections_per_peer = 2;           // TCP: large transfers striped over two connections
  o.tcp_stripe_bytes = 64 << 10;
  o.op_timeout = std::chrono::milliseconds(20'000);  // death must be seen by EOF, not timeout
  if (mode == "spin") o.shm_yield_window = std::chrono::seconds(30);
  auto comm = NewCpuCommunicator(o);
  if (!comm.ok()) return 4;
  if (mode == "skew") return Skew(**comm, **store, rank);
  if (mode == "table" || mode == "table-nobody") {
    if (mode == "table-nobody" && rank == 1) {
      // Bootstrap done (segments mapped, sockets open), this rank becomes nobody: it can no
      // longer read its root peers' memory, so no rank may use single-copy all-reduces.
      Status ready = (*comm)->WaitReady(Deadline::AfterMs(20'000));
      if (!ready.ok() || setresgid(65534, 65534, 65534) != 0 ||
          setresuid(65534, 65534, 65534) != 0) {
        std::fprintf(stderr, "rank %d: could not become nobody: %s\n", rank,
                     ready.ToString().c_str());
        return 8;
      }
    }
    testing::TableOptions t;
    t.dtypes = testing::AllDTypes();
    t.counts = {0, 1, 7, 4097};
    t.large.push_back({(1u << 20) + 3, DType::kF32});
    Status s = testing::RunCollectiveTable(**comm, t);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
      return 1;
    }
    return 0;
  }
  // kill and spin modes.
  std::vector<float> buf(mode == "spin" ? 2 : 4 << 20, 1.0f);
  Status failure;
  for (int iter = 0;; ++iter) {
    failure = (*comm)
                  ->AllReduce(buf.data(), buf.data(), buf.size(), DType::kF32, ReduceOp::kMax)
                  ->Wait(Deadline::AfterMs(60'000));
    if (!failure.ok()) break;
    (void)(*store)->Set("progress/" + std::to_string(rank), ToBytes(std::to_string(iter)),
                        Deadline::AfterMs(5000));
  }
  const int64_t seen_ns = MonoClock::now().time_since_epoch().count();
  (void)(*store)->Set("failed/" + std::to_string(rank),
                      ToBytes(std::to_string(seen_ns) + "\n" + failure.ToString()),
                      Deadline::AfterMs(5000));
  comm->reset();
  // Generation 2: the survivors renumber themselves in rank order (the test tells the new size
  // and each survivor's new rank through the store).
  auto assignment = (*store)->Get("gen2/rank/" + std::to_string(rank), Deadline::AfterMs(20'000));
  if (!assignment.ok()) return 5;
  int new_rank = std::stoi(ToString(*assignment));
  o.rank = new_rank;
  o.size = size - 1;
  o.generation = 2;
  auto next = NewCpuCommunicator(o);
  if (!next.ok()) return 6;
  int64_t v = new_rank + 1, sum = 0;
  Status s =
      (*next)->AllReduce(&v, &sum, 1, DType::kI64, ReduceOp::kSum)->Wait(Deadline::AfterMs(20'000));
  const int64_t want = int64_t(size - 1) * size / 2;
  if (!s.ok() || sum != want) {
    std::fprintf(stderr, "rank %d gen 2: %s sum %lld\n", rank, s.ToString().c_str(),
                 static_cast<long long>(sum));
    return 7;
  }
  (void)(*store)->Set("gen2/ok/" + std::to_string(rank), ToBytes("1"), Deadline::AfterMs(5000));
  return 0;
}
