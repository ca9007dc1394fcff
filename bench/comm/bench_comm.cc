// ringtrain bench comm: collective timings of the CPU backend, ranks as processes on this host.
//   ringtrain_bench_comm --op all_reduce --ranks 4 --sizes 8,1M,16M [--json]
//                        [--transport auto|tcp|shm] [--iters N]
//                        [--arena-bytes B] [--yield-us U] [--small-bytes B]   (CommOptions knobs)
//                        [--single-copy-bytes B]
//                        [--bind core|none] [--tcp-conns K]
// Like mpirun, rank r is bound to CPU r when the ranks fit the CPUs (--bind core, the default)
// and left unbound otherwise.
// Prints nccl-tests columns (size, count, type, time, algbw, busbw) and the mean; with --json one
// JSON line per size: {"op","ranks","bytes","time_us","algbw_GBps","busbw_GBps","mean_us",
// "iters"}. time is the median over the timed batches of ops on rank 0 of a batch's time per op
// (a descheduled moment on a shared machine moves the mean, not the median); algbw and busbw
// follow from it. busbw = algbw·2(n−1)/n for all-reduce, ·(n−1)/n for all-gather,
// reduce-scatter and all-to-all, ·1 otherwise. Warm-up and iteration counts are those of
// mpi_bench_comm.c.
// Sizes accept K/M/G suffixes (powers of 1024); elements are f32 (bytes/4, at least 1).
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "bench/comm/comm_bench.h"
#include "comm/communicator.h"

extern char** environ;

using namespace rt;
using namespace rt::comm;

namespace {

// The most timed ops per size, and the most timed batches they form (as mpi_bench_comm.c):
// ops run in batches of iters / kMaxSamples (at least 1), each batch timed with one pair of
// clock readings, so a clock reading (tens of ns on a VM) does not weigh on short ops.
constexpr double kMaxIters = 200000;
constexpr int kMaxSamples = 1000;

struct Args {
  std::string op = "all_reduce";
  int ranks = 2;
  std::vector<size_t> sizes;
  bool json = false;
  std::string transport = "auto";
  int iters = 0;  // 0: adaptive
  int worker_rank = -1;
  // Tuning knobs (CommOptions; negative: the default).
  long arena_bytes = -1;
  long yield_us = -1;
  long small_bytes = -1;
  long single_copy_bytes = -1;
  int tcp_conns = 0;
  // "core": bind rank r to CPU r when the ranks fit the CPUs (mpirun's default binding),
  // otherwise leave every rank unbound; "none": never bind.
  std::string bind = "core";
  uint16_t store_port = 0;
};

size_t ParseSize(const std::string& s) {
  size_t mult = 1;
  std::string num = s;
  char last = s.empty() ? 0 : s.back();
  if (last == 'K' || last == 'k') mult = 1u << 10;
  if (last == 'M' || last == 'm') mult = 1u << 20;
  if (last == 'G' || last == 'g') mult = 1u << 30;
  if (mult != 1) num.pop_back();
  return static_cast<size_t>(std::stoull(num)) * mult;
}

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--op")
      a->op = next();
    else if (k == "--ranks")
      a->ranks = std::stoi(next());
    else if (k == "--sizes") {
      std::string list = next();
      size_t pos = 0;
      while (pos <= list.size()) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        if (comma > pos) a->sizes.push_back(ParseSize(list.substr(pos, comma - pos)));
        pos = comma + 1;
      }
    } else if (k == "--json")
      a->json = true;
    else if (k == "--transport")
      a->transport = next();
    else if (k == "--iters")
      a->iters = std::stoi(next());
    else if (k == "--arena-bytes")
      a->arena_bytes = static_cast<long>(ParseSize(next()));
    else if (k == "--yield-us")
      a->yield_us = std::stol(next());
    else if (k == "--small-bytes")
      a->small_bytes = static_cast<long>(ParseSize(next()));
    else if (k == "--single-copy-bytes")
      a->single_copy_bytes = static_cast<long>(ParseSize(next()));
    else if (k == "--bind")
      a->bind = next();
    else if (k == "--tcp-conns")
      a->tcp_conns = std::stoi(next());
    else if (k == "--worker-rank")
      a->worker_rank = std::stoi(next());
    else if (k == "--store-port")
      a->store_port = static_cast<uint16_t>(std::stoi(next()));
    else
      return false;
  }
  return !a->sizes.empty() && a->ranks >= 1;
}

double BusFactor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return double(n - 1) / n;
  return 1.0;
}

int Worker(const Args& a) {
  // Bind before any thread exists (the communicator's threads inherit it).
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  const bool bound = a.bind == "core" && a.ranks <= cpus;
  if (bound) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a.worker_rank, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) std::perror("sched_setaffinity");
  }
  auto store = ConnectTcpStore("127.0.0.1", a.store_port, Deadline::AfterMs(10'000));
  if (!store.ok()) return 3;
  CommOptions o;
  o.store = *store;
  o.rank = a.worker_rank;
  o.size = a.ranks;
  o.name = "bench";
  if (a.arena_bytes >= 0) o.shm_arena_bytes = static_cast<size_t>(a.arena_bytes);
  if (a.yield_us >= 0) o.shm_yield_window = std::chrono::microseconds(a.yield_us);
  if (a.small_bytes >= 0) o.small_message_bytes = static_cast<size_t>(a.small_bytes);
  if (a.single_copy_bytes >= 0) o.shm_single_copy_bytes = static_cast<size_t>(a.single_copy_bytes);
  if (a.tcp_conns > 0) o.tcp_connections_per_peer = a.tcp_conns;
  o.transport = a.transport == "tcp"   ? Transport::kTcp
                : a.transport == "shm" ? Transport::kShm
                                       : Transport::kAuto;
  auto comm = NewCpuCommunicator(o);
  if (!comm.ok()) return 4;
  Communicator& c = **comm;
  const int n = a.ranks;
  if (a.worker_rank == 0 && !a.json)
    std::printf(
        "# ringtrain cpu %s, %d ranks, transport %s, %s\n#%12s %12s %6s %12s %12s %12s %12s\n",
        a.op.c_str(), n, a.transport.c_str(), bound ? "rank r bound to cpu r" : "unbound",
        "size(B)", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "mean(us)");
  for (size_t bytes : a.sizes) {
    size_t count = std::max<size_t>(1, bytes / 4);
    size_t per_rank = std::max<size_t>(1, count / n);
    std::vector<float> send(count * (a.op == "all_to_all" || a.op == "reduce_scatter" ? 1 : 1),
                            1.0f),
        recv(count, 0.0f);
    auto issue = [&]() -> WorkHandle {
      if (a.op == "all_reduce")
        return c.AllReduce(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
      if (a.op == "all_gather") return c.AllGather(send.data(), recv.data(), per_rank, DType::kF32);
      if (a.op == "reduce_scatter")
        return c.ReduceScatter(send.data(), recv.data(), per_rank, DType::kF32, ReduceOp::kSum);
      if (a.op == "broadcast") return c.Broadcast(send.data(), recv.data(), count, DType::kF32, 0);
      if (a.op == "reduce")
        return c.Reduce(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum, 0);
      if (a.op == "all_to_all") return c.AllToAll(send.data(), recv.data(), per_rank, DType::kF32);
      return nullptr;
    };
    if (!issue()) {
      std::fprintf(stderr, "unknown op %s\n", a.op.c_str());
      return 2;
    }
    // Runs k ops in batches of `batch` and records each batch's time per op (one clock reading
    // per batch; every op's deadline comes from its batch's reading).
    std::vector<double> times;
    auto run = [&](int k, int batch) -> Status {
      MonoTime t0 = MonoClock::now();
      for (int i = 0; i < k; i += batch) {
        const Deadline d = Deadline::At(t0 + std::chrono::seconds(60));
        for (int j = 0; j < batch; ++j) RETURN_IF_ERROR(issue()->Wait(d));
        const MonoTime t1 = MonoClock::now();
        times.push_back(std::chrono::duration<double>(t1 - t0).count() / batch);
        t0 = t1;
      }
      return Status();
    };
    // Warm-up and iteration count exactly as mpi_bench_comm.c: 3 ops, then 2 timed ones give
    // the count for ~0.3 s (5..kMaxIters), agreed through an all-reduce (max) so every rank runs
    // the same.
    if (!run(3, 1).ok()) return 5;
    int iters = a.iters;
    if (iters <= 0) {
      times.clear();
      if (!run(2, 1).ok()) return 5;
      double per = (times[0] + times[1]) / 2;
      int32_t want = static_cast<int32_t>(std::clamp(0.3 / std::max(per, 1e-7), 5.0, kMaxIters)),
              agreed = 0;
      if (!c.AllReduce(&want, &agreed, 1, DType::kI32, ReduceOp::kMax)
               ->Wait(Deadline::AfterMs(60'000))
               .ok())
        return 5;
      iters = agreed;
    }
    const int batch = std::max(1, iters / kMaxSamples);
    iters = iters / batch * batch;
    if (!c.Barrier()->Wait(Deadline::AfterMs(60'000)).ok()) return 5;
    times.clear();
    if (!run(iters, batch).ok()) return 5;
    const size_t samples = times.size();
    const double mean_us = std::accumulate(times.begin(), times.end(), 0.0) / samples * 1e6;
    std::nth_element(times.begin(), times.begin() + samples / 2, times.end());
    const double us = times[samples / 2] * 1e6;  // the median batch, per op
    double algbw = static_cast<double>(count * 4) / (us * 1e-6) / 1e9;
    double busbw = algbw * BusFactor(a.op, n);
    if (a.worker_rank == 0) {
      if (a.json)
        std::printf(
            "{\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"time_us\":%.2f,\"algbw_GBps\":%.3f,"
            "\"busbw_GBps\":%.3f,\"mean_us\":%.2f,\"iters\":%d}\n",
            a.op.c_str(), n, count * 4, us, algbw, busbw, mean_us, iters);
      else
        std::printf(" %12zu %12zu %6s %12.2f %12.3f %12.3f %12.2f\n", count * 4, count, "float", us,
                    algbw, busbw, mean_us);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int RunCommBench(int argc, char** argv, const std::vector<std::string>& relaunch) {
  Args a;
  if (!Parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: %s --op all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all "
                 "--ranks N --sizes LIST [--json] [--transport auto|tcp|shm] [--iters N]\n"
                 "       [--arena-bytes B] [--yield-us U] [--small-bytes B] [--bind core|none]\n"
                 "       [--single-copy-bytes B] [--tcp-conns K]\n",
                 argv[0]);
    return 2;
  }
  if (a.worker_rank >= 0) return Worker(a);
  auto server = TcpStoreServer::Start({});
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < a.ranks; ++r) {
    std::vector<std::string> args = relaunch;
    args.insert(args.end(), argv + 1, argv + argc);
    args.insert(args.end(), {"--worker-rank", std::to_string(r), "--store-port",
                             std::to_string((*server)->port())});
    std::vector<char*> cargs;
    for (auto& s : args) cargs.push_back(s.data());
    cargs.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargs.data(), environ) != 0) return 1;
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}
