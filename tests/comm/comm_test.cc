// Communicators, ranks as threads of this process: the collective table over TCP and over
// shared memory for group sizes 1-8, sub-groups, mismatched arguments, abort and bootstrap
// failures, byte accounting, and a new generation after a failure.
#include <time.h>

#include <algorithm>
#include <thread>

#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "tests/comm/table.h"

namespace rt::comm {
namespace {

using testing::AllDTypes;
using testing::RunCollectiveTable;
using testing::TableOptions;

struct Group {
  std::shared_ptr<Store> store;
  std::vector<std::unique_ptr<Communicator>> comms;
};

Group MakeGroup(int n, Transport t, int64_t generation = 0, std::shared_ptr<Store> store = nullptr,
                std::chrono::milliseconds op_timeout = std::chrono::milliseconds(10'000),
                const std::function<void(CommOptions&)>& tweak = nullptr) {
  Group g;
  g.store = store ? store : NewMemoryStore();
  for (int r = 0; r < n; ++r) {
    CommOptions o;
    o.store = g.store;
    o.rank = r;
    o.size = n;
    o.generation = generation;
    o.transport = t;
    o.op_timeout = op_timeout;
    o.bootstrap_timeout = std::chrono::milliseconds(10'000);
    o.shm_ring_bytes = 256 << 10;
    if (tweak) tweak(o);
    auto c = NewCpuCommunicator(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    g.comms.push_back(std::move(*c));
  }
  return g;
}

// Runs fn(rank) on one thread per rank and returns each rank's status.
std::vector<Status> OnEveryRank(int n, const std::function<Status(int)>& fn) {
  std::vector<Status> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[r] = fn(r); });
  for (auto& t : threads) t.join();
  return out;
}

// How all-reduce runs over shared memory (every rank on this host).
enum class ShmPath {
  kArena,         // defaults: one-step all-read up to 64 KiB, direct reduce-scatter/all-gather
                  // above, single copy from 2 MiB when the ranks fit the CPUs
  kArenaChunked,  // staged reduce-scatter/all-gather for every count, 32 KiB halves (many steps)
  kSingleCopy,    // single copy (peers' buffers read directly) for every count above 0 bytes
  kRings,         // arenas off: recursive doubling and the ring over the per-pair rings
  kStriped,       // TCP: three data connections per pair, transfers from 4 KiB striped
};

struct TableCase {
  int n;
  Transport transport;
  ShmPath path = ShmPath::kArena;
};

class CollectiveTable : public ::testing::TestWithParam<TableCase> {};

TEST_P(CollectiveTable, EveryOpEveryDTypeAgainstReference) {
  const auto [n, transport, path] = GetParam();
  Group g =
      MakeGroup(n, transport, 0, nullptr, std::chrono::milliseconds(10'000), [&](CommOptions& o) {
        if (path == ShmPath::kArenaChunked) {
          o.shm_arena_bytes = 64 << 10;
          o.small_message_bytes = 0;
          o.shm_single_copy_bytes = 0;
        }
        if (path == ShmPath::kSingleCopy) {
          o.small_message_bytes = 0;
          o.shm_single_copy_bytes = 1;
          o.shm_single_copy_oversubscribed = true;
        }
        if (path == ShmPath::kRings) o.shm_arena_bytes = 0;
        if (path == ShmPath::kStriped) {
          o.tcp_connections_per_peer = 3;
          o.tcp_stripe_bytes = 4 << 10;
        }
      });
  TableOptions o;
  o.dtypes = AllDTypes();
  o.counts = {0, 1, 7, 4097};
  // 1M+3 elements only for a few sizes (runtime on a 2-core machine): f32 at 2 and 5 ranks,
  // bf16 at 4 ranks.
  if (n == 2 || n == 5) o.large.push_back({(1u << 20) + 3, DType::kF32});
  if (n == 4) o.large.push_back({(1u << 20) + 3, DType::kBF16});
  auto results = OnEveryRank(n, [&](int r) {
    RETURN_IF_ERROR(g.comms[r]->WaitReady(Deadline::AfterMs(10'000)));
    return RunCollectiveTable(*g.comms[r], o);
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
}

std::vector<TableCase> AllCases() {
  std::vector<TableCase> cases;
  for (Transport t : {Transport::kTcp, Transport::kShm})
    for (int n = 1; n <= 8; ++n) cases.push_back({n, t});
  for (int n : {2, 3, 4, 5, 8}) cases.push_back({n, Transport::kShm, ShmPath::kArenaChunked});
  for (int n : {2, 3, 4, 5, 8}) cases.push_back({n, Transport::kShm, ShmPath::kSingleCopy});
  for (int n : {2, 3, 4, 5}) cases.push_back({n, Transport::kShm, ShmPath::kRings});
  for (int n : {2, 3, 4}) cases.push_back({n, Transport::kTcp, ShmPath::kStriped});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Threads, CollectiveTable, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) {
                           const char* path =
                               info.param.path == ShmPath::kArenaChunked ? "ArenaChunked"
                               : info.param.path == ShmPath::kSingleCopy ? "SingleCopy"
                               : info.param.path == ShmPath::kRings      ? "Rings"
                               : info.param.path == ShmPath::kStriped    ? "Striped"
                                                                         : "";
                           return std::string(info.param.transport == Transport::kTcp ? "Tcp"
                                                                                      : "Shm") +
                                  path + std::to_string(info.param.n);
                         });

class TransportTest : public ::testing::TestWithParam<Transport> {};

TEST_P(TransportTest, MismatchedCountsFailCleanly) {
  const int n = 3;
  Group g = MakeGroup(n, GetParam());
  auto results = OnEveryRank(n, [&](int r) -> Status {
    size_t count = r == 1 ? 1000 : 100;  // rank 1 disagrees
    std::vector<float> in(count, 1.0f), out(count);
    return g.comms[r]
        ->AllReduce(in.data(), out.data(), count, DType::kF32, ReduceOp::kSum)
        ->Wait(Deadline::AfterMs(5000));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_NE(results[r].code(), StatusCode::kDeadlineExceeded) << results[r].ToString();
  }
  // At least the direct neighbours of rank 1 name the disagreement.
  bool named = false;
  for (auto& s : results)
    named |= s.code() == StatusCode::kProtocolError &&
             s.ToString().find("count 1000") != std::string::npos;
  EXPECT_TRUE(named) << results[0].ToString() << " | " << results[2].ToString();
  // The communicator stays failed.
  std::vector<float> x(4);
  EXPECT_FALSE(g.comms[0]
                   ->AllReduce(x.data(), x.data(), 4, DType::kF32, ReduceOp::kSum)
                   ->Wait(Deadline::AfterMs(1000))
                   .ok());
}

TEST_P(TransportTest, MismatchedOpKindsFailCleanly) {
  // Ranks 0 and 2 all-reduce (through the shared arenas on shm) while rank 1 expects a
  // broadcast (over the rings): the paths differ, yet the mismatch is reported, not waited out.
  const int n = 3;
  Group g = MakeGroup(n, GetParam());
  auto t0 = MonoClock::now();
  auto results = OnEveryRank(n, [&](int r) -> Status {
    std::vector<float> in(100, 1.0f), out(100);
    WorkHandle w =
        r == 1 ? g.comms[r]->Broadcast(in.data(), out.data(), 100, DType::kF32, 0)
               : g.comms[r]->AllReduce(in.data(), out.data(), 100, DType::kF32, ReduceOp::kSum);
    return w->Wait(Deadline::AfterMs(5000));
  });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - t0).count();
  EXPECT_LT(ms, 3000);  // op_timeout is 10 s: detection, not a timeout
  bool named = false;
  for (int r = 0; r < n; ++r) {
    EXPECT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_NE(results[r].code(), StatusCode::kDeadlineExceeded) << results[r].ToString();
    named |= results[r].ToString().find("disagree") != std::string::npos;
  }
  EXPECT_TRUE(named) << results[0].ToString() << " | " << results[1].ToString() << " | "
                     << results[2].ToString();
}

TEST(SharedArena, RanksWithDifferentSmallThresholdsFailInsteadOfMixingPaths) {
  // Rank 0 would take the one-step small path, rank 1 the direct large path for the same
  // all-reduce: the step headers differ, so both fail cleanly rather than read wrong slices.
  const int n = 2;
  Group g = MakeGroup(n, Transport::kShm, 0, nullptr, std::chrono::milliseconds(10'000),
                      [](CommOptions& o) { o.small_message_bytes = o.rank == 0 ? 64 << 10 : 0; });
  auto results = OnEveryRank(n, [&](int r) -> Status {
    std::vector<float> in(100, 1.0f), out(100);
    return g.comms[r]
        ->AllReduce(in.data(), out.data(), 100, DType::kF32, ReduceOp::kSum)
        ->Wait(Deadline::AfterMs(5000));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kProtocolError)
        << "rank " << r << ": " << results[r].ToString();
    EXPECT_NE(results[r].ToString().find("disagree"), std::string::npos) << results[r].ToString();
  }
}

// CPU time this process has used (the op may run on the waiter or on the communicator's
// thread).
std::chrono::milliseconds ProcessCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::chrono::milliseconds(ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000);
}

struct LoneWait {
  Status status;         // what the waiter got
  int64_t woke_ms = -1;  // from Abort() to the waiter's return
  int64_t cpu_ms = -1;   // CPU time the process used while rank 0 waited
};

// Two ranks over shared memory (options tweaked by `tweak`); rank 0 enters a small all-reduce
// that rank 1 never joins, waits on its own thread, and is aborted after `before_abort`.
LoneWait WaitAloneThenAbort(std::chrono::milliseconds before_abort,
                            const std::function<void(CommOptions&)>& tweak) {
  Group g = MakeGroup(2, Transport::kShm, 0, nullptr, std::chrono::milliseconds(20'000), tweak);
  for (auto& c : g.comms) EXPECT_TRUE(c->WaitReady(Deadline::AfterMs(10'000)).ok());
  float a[2] = {1, 2};
  auto w = g.comms[0]->AllReduce(a, a, 2, DType::kF32, ReduceOp::kSum);
  LoneWait out;
  std::atomic<bool> waiting{false};
  MonoTime woke_at;
  const auto cpu0 = ProcessCpuTime();
  std::thread waiter([&] {
    waiting = true;
    out.status = w->Wait(Deadline::AfterMs(20'000));
    woke_at = MonoClock::now();
    out.cpu_ms = (ProcessCpuTime() - cpu0).count();
  });
  while (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(before_abort);
  const MonoTime aborted_at = MonoClock::now();
  g.comms[0]->Abort();
  waiter.join();
  out.woke_ms = std::chrono::duration_cast<std::chrono::milliseconds>(woke_at - aborted_at).count();
  return out;
}

TEST(SharedArenaWait, AbortWakesAWaiterThatIsStillPolling) {
  // A 30 s yield window keeps rank 0's waiter polling (CPU pauses, no futex sleep) for the
  // whole wait: Abort() must still end it within 100 ms.
  LoneWait w = WaitAloneThenAbort(std::chrono::milliseconds(200), [](CommOptions& o) {
    o.shm_yield_window = std::chrono::seconds(30);
  });
  EXPECT_EQ(w.status.code(), StatusCode::kCommAborted) << w.status.ToString();
  EXPECT_GE(w.woke_ms, 0);
  EXPECT_LT(w.woke_ms, 100);
  EXPECT_GE(w.cpu_ms, 5) << "the waiter slept instead of polling";  // sleeping: ~0 ms
}

TEST(SharedArenaWait, AWaiterBacksOffToSleepAfterTheYieldWindow) {
  // With the default 200 µs window a waiter whose peer is late stops polling and sleeps on its
  // futex: 500 ms of waiting cost it far less than 500 ms of CPU (2 ranks on 2 busy cores must
  // not burn each other's time). Abort() still wakes it within 100 ms.
  LoneWait w = WaitAloneThenAbort(std::chrono::milliseconds(500), nullptr);
  EXPECT_EQ(w.status.code(), StatusCode::kCommAborted) << w.status.ToString();
  EXPECT_GE(w.woke_ms, 0);
  EXPECT_LT(w.woke_ms, 100);
  EXPECT_LT(w.cpu_ms, 100) << "the waiter kept polling";
}

TEST(SharedArenaWait, PostedOpsNobodyWaitsForCompleteInIssueOrder) {
  // Each rank issues three small all-reduces without waiting (the first is posted by the
  // issuing thread, the others queue behind it) and polls Done(): the worker thread finishes
  // them, in issue order, with the reference results.
  const int n = 2;
  Group g = MakeGroup(n, Transport::kShm);
  for (auto& c : g.comms) ASSERT_TRUE(c->WaitReady(Deadline::AfterMs(10'000)).ok());
  auto results = OnEveryRank(n, [&](int r) -> Status {
    int64_t in[3] = {r + 1, 10 * (r + 1), 100 * (r + 1)}, out[3] = {};
    std::vector<WorkHandle> w;
    for (int k = 0; k < 3; ++k)
      w.push_back(g.comms[r]->AllReduce(&in[k], &out[k], 1, DType::kI64, ReduceOp::kSum));
    const Deadline d = Deadline::AfterMs(5000);
    while (!w[2]->Done()) {
      if (d.Expired()) return DeadlineExceeded("the third op is not done");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (int k = 0; k < 3; ++k) {
      if (!w[k]->Done()) return Internal("op " + std::to_string(k) + " not done after a later one");
      RETURN_IF_ERROR(w[k]->Wait(Deadline::AfterMs(100)));
    }
    if (out[0] != 3 || out[1] != 30 || out[2] != 300)
      return Internal("sums " + std::to_string(out[0]) + " " + std::to_string(out[1]) + " " +
                      std::to_string(out[2]));
    return Status();
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
}

TEST(SharedArenaWait, ATinyAllReduceWhosePeersPostedIsDoneWhenIssued) {
  // Rank 1 issues first (its input is posted at issue; nobody waits on it yet). Rank 0's
  // all-reduce (24 bytes, within the slot's line) then finds every input in the arena and
  // finishes on the issuing thread: done when AllReduce returns, with the reference sums and
  // counted in the stats like any op; rank 1's op completes when waited on.
  const int n = 2;
  Group g = MakeGroup(n, Transport::kShm);
  for (auto& c : g.comms) ASSERT_TRUE(c->WaitReady(Deadline::AfterMs(10'000)).ok());
  int64_t in1[3] = {1, 2, 3}, out1[3] = {}, in0[3] = {10, 20, 30}, out0[3] = {};
  WorkHandle w1 = g.comms[1]->AllReduce(in1, out1, 3, DType::kI64, ReduceOp::kSum);
  WorkHandle w0 = g.comms[0]->AllReduce(in0, out0, 3, DType::kI64, ReduceOp::kSum);
  EXPECT_TRUE(w0->Done());
  EXPECT_EQ(out0[0], 11);
  EXPECT_EQ(out0[1], 22);
  EXPECT_EQ(out0[2], 33);
  const CommStats s = g.comms[0]->stats();
  EXPECT_EQ(s[OpKind::kAllReduce].ops, 1u);
  EXPECT_EQ(s[OpKind::kAllReduce].bytes_sent, 24u);
  EXPECT_EQ(s[OpKind::kAllReduce].bytes_received, 24u);
  ASSERT_TRUE(w0->Wait(Deadline::AfterMs(5000)).ok());
  ASSERT_TRUE(w1->Wait(Deadline::AfterMs(5000)).ok());
  EXPECT_EQ(out1[0], 11);
  EXPECT_EQ(out1[1], 22);
  EXPECT_EQ(out1[2], 33);
}

TEST(SharedArenaWait, RanksDisagreeingOnATinyAllReduceFailTheCommunicator) {
  // Rank 1 posts a 2-element all-reduce, rank 0 then issues a 3-element one: rank 0 finds the
  // mismatch at issue, rank 1 when it waits; both get ProtocolError naming the disagreement,
  // and both communicators are failed (the next op fails at once).
  const int n = 2;
  Group g = MakeGroup(n, Transport::kShm);
  for (auto& c : g.comms) ASSERT_TRUE(c->WaitReady(Deadline::AfterMs(10'000)).ok());
  int32_t in[3] = {1, 2, 3}, out[3] = {};
  WorkHandle w1 = g.comms[1]->AllReduce(in, out, 2, DType::kI32, ReduceOp::kSum);
  WorkHandle w0 = g.comms[0]->AllReduce(in, out, 3, DType::kI32, ReduceOp::kSum);
  const Status s0 = w0->Wait(Deadline::AfterMs(5000)), s1 = w1->Wait(Deadline::AfterMs(5000));
  for (const Status& s : {s0, s1}) {
    EXPECT_EQ(s.code(), StatusCode::kProtocolError) << s.ToString();
    EXPECT_NE(s.ToString().find("disagree"), std::string::npos) << s.ToString();
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_FALSE(g.comms[r]->status().ok()) << "rank " << r;
    const Status next = g.comms[r]
                            ->AllReduce(in, out, 1, DType::kI32, ReduceOp::kSum)
                            ->Wait(Deadline::AfterMs(1000));
    EXPECT_FALSE(next.ok()) << "rank " << r;
    EXPECT_NE(next.code(), StatusCode::kDeadlineExceeded)
        << "rank " << r << ": " << next.ToString();
  }
}

TEST(SharedArenaWait, SmallAllReducesAgreeWithTheReferenceOverManySteps) {
  // Many back-to-back 1..6-element all-reduces through the slots (both halves, every reduce op)
  // give exactly the reference on both ranks.
  const int n = 2;
  Group g = MakeGroup(n, Transport::kShm);
  auto results = OnEveryRank(n, [&](int r) -> Status {
    for (int i = 0; i < 2000; ++i) {
      const size_t count = 1 + i % 6;
      const ReduceOp op = static_cast<ReduceOp>(i % 4);
      int32_t in[6], out[6];
      for (size_t k = 0; k < count; ++k) in[k] = static_cast<int32_t>((i + 1) * (r + 1) + k);
      RETURN_IF_ERROR(
          g.comms[r]->AllReduce(in, out, count, DType::kI32, op)->Wait(Deadline::AfterMs(10'000)));
      for (size_t k = 0; k < count; ++k) {
        const int32_t x = (i + 1) + static_cast<int32_t>(k),
                      y = 2 * (i + 1) + static_cast<int32_t>(k);
        const int32_t want = op == ReduceOp::kSum   ? x + y
                             : op == ReduceOp::kAvg ? (x + y) / 2
                             : op == ReduceOp::kMax ? std::max(x, y)
                                                    : std::min(x, y);
        if (out[k] != want)
          return Internal("step " + std::to_string(i) + " element " + std::to_string(k) + ": " +
                          std::to_string(out[k]) + " != " + std::to_string(want));
      }
    }
    return Status();
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
}

TEST_P(TransportTest, SplitFormsSubGroups) {
  const int n = 6;
  Group g = MakeGroup(n, GetParam());
  auto results = OnEveryRank(n, [&](int r) -> Status {
    // Colors: even/odd ranks; key reverses the order.
    ASSIGN_OR_RETURN(auto sub, g.comms[r]->Split(r % 2, n - r, Deadline::AfterMs(10'000)));
    if (sub->size() != 3) return Internal("sub-group size " + std::to_string(sub->size()));
    int expect_rank = 2 - r / 2;
    if (sub->rank() != expect_rank) return Internal("sub rank " + std::to_string(sub->rank()));
    int32_t v = r, sum = 0;
    RETURN_IF_ERROR(
        sub->AllReduce(&v, &sum, 1, DType::kI32, ReduceOp::kSum)->Wait(Deadline::AfterMs(10'000)));
    int32_t want = r % 2 == 0 ? 0 + 2 + 4 : 1 + 3 + 5;
    if (sum != want) return Internal("sub-group sum " + std::to_string(sum));
    // A rank that opts out gets no communicator.
    ASSIGN_OR_RETURN(auto none, g.comms[r]->Split(r == 0 ? -1 : 1, 0, Deadline::AfterMs(10'000)));
    if ((r == 0) != (none == nullptr)) return Internal("opt-out split");
    if (none) {
      RETURN_IF_ERROR(none->Barrier()->Wait(Deadline::AfterMs(10'000)));
      if (none->size() != n - 1) return Internal("split size");
    }
    return Status();
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
}

// Large all-reduces, staged or single-copy, count bytes as the ring does.
void CheckByteAccounting(Transport transport, const std::function<void(CommOptions&)>& tweak) {
  const int n = 4;
  const size_t count = 1 << 16;  // above the small-message threshold: the ring
  Group g = MakeGroup(n, transport, 0, nullptr, std::chrono::milliseconds(10'000), tweak);
  auto results = OnEveryRank(n, [&](int r) -> Status {
    std::vector<float> buf(count, 1.0f);
    RETURN_IF_ERROR(g.comms[r]
                        ->AllReduce(buf.data(), buf.data(), count, DType::kF32, ReduceOp::kSum)
                        ->Wait(Deadline::AfterMs(10'000)));
    std::vector<float> gathered(count * n);
    RETURN_IF_ERROR(g.comms[r]
                        ->AllGather(buf.data(), gathered.data(), count, DType::kF32)
                        ->Wait(Deadline::AfterMs(10'000)));
    CommStats s = g.comms[r]->stats();
    // Ring all-reduce: 2(n-1)/n of the buffer each way; all-gather: (n-1) blocks each way.
    uint64_t ar = 2ull * (n - 1) * count * 4 / n, ag = uint64_t(n - 1) * count * 4;
    if (s[OpKind::kAllReduce].bytes_sent != ar || s[OpKind::kAllReduce].bytes_received != ar)
      return Internal("all_reduce bytes " + std::to_string(s[OpKind::kAllReduce].bytes_sent));
    if (s[OpKind::kAllGather].bytes_sent != ag || s[OpKind::kAllGather].bytes_received != ag)
      return Internal("all_gather bytes " + std::to_string(s[OpKind::kAllGather].bytes_sent));
    if (s[OpKind::kAllReduce].ops != 1 || s.Total().ops != 2) return Internal("op counts");
    return Status();
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
}

TEST_P(TransportTest, ByteAccountingFollowsTheRingFormula) {
  CheckByteAccounting(GetParam(), [](CommOptions& o) { o.shm_single_copy_bytes = 0; });
  CheckByteAccounting(GetParam(), [](CommOptions& o) {
    o.shm_single_copy_bytes = 1;
    o.shm_single_copy_oversubscribed = true;
  });
}

// Ranks 0 and 1 of 3 enter an all-reduce of `count` floats that rank 2 never joins; rank 0 waits
// from two threads and aborts: both waits end within 100 ms, and rank 1 fails naming rank 0.
void CheckAbortWakesWaiters(Transport transport, size_t count,
                            const std::function<void(CommOptions&)>& tweak) {
  const int n = 3;
  Group g = MakeGroup(n, transport, 0, nullptr, std::chrono::milliseconds(10'000), tweak);
  for (auto& c : g.comms) ASSERT_TRUE(c->WaitReady(Deadline::AfterMs(10'000)).ok());
  std::vector<float> a(count), b(count);
  auto w0 = g.comms[0]->AllReduce(a.data(), a.data(), a.size(), DType::kF32, ReduceOp::kSum);
  auto w1 = g.comms[1]->AllReduce(b.data(), b.data(), b.size(), DType::kF32, ReduceOp::kSum);
  auto later = g.comms[0]->Barrier();
  std::atomic<int64_t> woke_ms{-1};
  MonoTime aborted_at;
  std::thread waiter([&] {
    Status s = w0->Wait(Deadline::AfterMs(20'000));
    woke_ms = std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - aborted_at)
                  .count();
    EXPECT_EQ(s.code(), StatusCode::kCommAborted) << s.ToString();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  aborted_at = MonoClock::now();
  g.comms[0]->Abort();
  waiter.join();
  EXPECT_GE(woke_ms.load(), 0);
  EXPECT_LT(woke_ms.load(), 100);
  EXPECT_EQ(later->Wait(Deadline::AfterMs(100)).code(), StatusCode::kCommAborted);
  // Rank 1 learns that rank 0 is gone (abort notice or EOF) and names it.
  g.comms[0].reset();
  Status s1 = w1->Wait(Deadline::AfterMs(5000));
  EXPECT_EQ(s1.code(), StatusCode::kPeerFailed) << s1.ToString();
  EXPECT_NE(s1.ToString().find("rank 0"), std::string::npos) << s1.ToString();
}

TEST_P(TransportTest, AbortWakesWaitersQuickly) {
  CheckAbortWakesWaiters(GetParam(), 1000, nullptr);
}

TEST_P(TransportTest, AbortWakesWaitersOfASingleCopyAllReduce) {
  CheckAbortWakesWaiters(GetParam(), 1 << 18, [](CommOptions& o) {
    o.shm_single_copy_bytes = 1;
    o.shm_single_copy_oversubscribed = true;
  });
}

TEST_P(TransportTest, NewGenerationAfterFailureInSameProcess) {
  const int n = 3;
  auto store = NewMemoryStore();
  {
    Group g = MakeGroup(n, GetParam(), /*generation=*/1, store);
    for (auto& c : g.comms) ASSERT_TRUE(c->WaitReady(Deadline::AfterMs(10'000)).ok());
    g.comms[2].reset();  // rank 2 leaves: the others fail on their next collective
    std::vector<Status> r(2);
    std::vector<std::thread> ts;
    for (int k = 0; k < 2; ++k)
      ts.emplace_back([&, k] { r[k] = g.comms[k]->Barrier()->Wait(Deadline::AfterMs(5000)); });
    for (auto& t : ts) t.join();
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(r[k].code(), StatusCode::kPeerFailed) << r[k].ToString();
      EXPECT_NE(r[k].ToString().find("rank 2"), std::string::npos) << r[k].ToString();
    }
  }
  // Generation 2 with the survivors, same store and process.
  Group g2 = MakeGroup(2, GetParam(), /*generation=*/2, store);
  auto results = OnEveryRank(2, [&](int r) -> Status {
    int64_t v = r + 1, out = 0;
    RETURN_IF_ERROR(g2.comms[r]
                        ->AllReduce(&v, &out, 1, DType::kI64, ReduceOp::kSum)
                        ->Wait(Deadline::AfterMs(10'000)));
    if (out != 3) return Internal("sum " + std::to_string(out));
    if (g2.comms[r]->generation() != 2) return Internal("generation");
    return Status();
  });
  for (auto& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_P(TransportTest, SilentPeerFailsAfterOpTimeoutNamingIt) {
  const int n = 2;
  Group g = MakeGroup(n, GetParam(), 0, nullptr, std::chrono::milliseconds(300));
  for (auto& c : g.comms) ASSERT_TRUE(c->WaitReady(Deadline::AfterMs(10'000)).ok());
  std::vector<float> a(10);
  auto t0 = MonoClock::now();
  Status s = g.comms[0]
                 ->AllReduce(a.data(), a.data(), a.size(), DType::kF32, ReduceOp::kSum)
                 ->Wait(Deadline::AfterMs(5000));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - t0).count();
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << s.ToString();
  EXPECT_NE(s.ToString().find("rank 1"), std::string::npos) << s.ToString();
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, 2000);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest,
                         ::testing::Values(Transport::kTcp, Transport::kShm), [](const auto& info) {
                           return info.param == Transport::kTcp ? "Tcp" : "Shm";
                         });

TEST(Bootstrap, MissingPeerTimesOutNamingIt) {
  auto store = NewMemoryStore();
  CommOptions o;
  o.store = store;
  o.rank = 0;
  o.size = 2;
  o.bootstrap_timeout = std::chrono::milliseconds(300);
  auto c = NewCpuCommunicator(o).value();
  Status s = c->WaitReady(Deadline::AfterMs(5000));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("addr/1"), std::string::npos) << s.ToString();
  // Ops issued on a failed communicator fail at once.
  EXPECT_FALSE(c->Barrier()->Wait(Deadline::AfterMs(100)).ok());
}

TEST(Bootstrap, AbortDuringBootstrapIsReportedQuickly) {
  CommOptions o;
  o.store = NewMemoryStore();
  o.rank = 1;
  o.size = 3;
  o.bootstrap_timeout = std::chrono::milliseconds(30'000);
  auto c = NewCpuCommunicator(o).value();
  auto pending = c->Barrier();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto t0 = MonoClock::now();
  c->Abort();
  Status s = c->WaitReady(Deadline::AfterMs(5000));
  Status b = pending->Wait(Deadline::AfterMs(5000));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - t0).count();
  EXPECT_EQ(s.code(), StatusCode::kCommAborted) << s.ToString();
  EXPECT_EQ(b.code(), StatusCode::kCommAborted) << b.ToString();
  EXPECT_LT(ms, 100);
  auto t1 = MonoClock::now();
  c.reset();  // destroying an aborted communicator does not hang either
  EXPECT_LT(MonoClock::now() - t1, std::chrono::milliseconds(500));
}

TEST(Bootstrap, UnreachableStoreIsReported) {
  auto r = ConnectTcpStore("127.0.0.1", 1, Deadline::AfterMs(200));
  EXPECT_FALSE(r.ok());
}

TEST(Arguments, BadRootAndPeerAreInvalidArgument) {
  Group g = MakeGroup(1, Transport::kTcp);
  float x = 0;
  EXPECT_EQ(g.comms[0]->Broadcast(&x, &x, 1, DType::kF32, 3)->Wait(Deadline::AfterMs(100)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(g.comms[0]->Send(&x, 1, DType::kF32, 0, 0)->Wait(Deadline::AfterMs(100)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(NewCpuCommunicator(CommOptions{}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rt::comm
