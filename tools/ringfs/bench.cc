// `ringfs bench`: sequential write and read of one file in chunk-sized requests, then 64 KiB
// random reads, each pass timed end to end (a write is durable when its request returns).
#include <chrono>
#include <cstdio>
#include <random>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "tools/ringfs/session.h"

namespace ringfs {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int RunBench(Session& session, const BenchOptions& o) {
  auto& client = *session.client;
  const rt::Deadline deadline = rt::Deadline::After(std::chrono::seconds(o.timeout_s));
  const uint64_t size = o.size_mib << 20;
  const uint64_t window = std::min<uint64_t>(size, 256ull << 20);
  const int workers = std::max(1, o.parallel);
  constexpr uint64_t kRandom = 64 << 10;
  // The data to write, the read-back buffer and one 64 KiB slot per random reader: in memory
  // shared with the server when it runs on this host (no data crosses the socket), else local.
  const uint64_t total = 2 * window + workers * kRandom;
  std::vector<std::byte> local;
  std::span<std::byte> buffers;
  bool shared = false;
  if (!o.tcp) {
    rt::Status s = session.Run(client.MapShared(total, deadline));
    shared = s.ok();
    if (!shared)
      std::fprintf(stderr, "ringfs bench: no shared memory (%s); data over TCP\n",
                   s.ToString().c_str());
  }
  if (shared) {
    buffers = client.shared().first(total);
  } else {
    local.resize(total);
    buffers = local;
  }
  const std::span<std::byte> data = buffers.first(window);
  const std::span<std::byte> back = buffers.subspan(window, window);
  std::printf("path    %s\n", shared ? "shared-memory" : "tcp");
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < data.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(data.data() + i, &v, std::min<size_t>(8, data.size() - i));
  }
  (void)session.Run(client.Remove(o.path, deadline));
  auto created = session.Run(client.Create(o.path, deadline));
  if (!created.ok()) {
    std::fprintf(stderr, "ringfs bench: %s\n", created.status().ToString().c_str());
    return 1;
  }
  auto start = std::chrono::steady_clock::now();
  for (uint64_t at = 0; at < size; at += window) {
    const uint64_t n = std::min(window, size - at);
    rt::Status s =
        session.Run(client.WriteParallel(o.path, at, data.first(n), o.parallel, deadline));
    if (!s.ok()) {
      std::fprintf(stderr, "ringfs bench: write: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const double write_s = Seconds(start);
  (void)session.Run(client.Seal(o.path, deadline));
  std::printf("write  %8.1f MiB/s  (%llu MiB in %.2f s, %u-byte requests, %d in flight)\n",
              static_cast<double>(size) / (1 << 20) / write_s,
              static_cast<unsigned long long>(o.size_mib), write_s, client.chunk_size(),
              o.parallel);
  std::fflush(stdout);

  // The read-back check is not timed: only the reads are.
  double read_s = 0;
  for (uint64_t at = 0; at < size; at += window) {
    const uint64_t n = std::min(window, size - at);
    start = std::chrono::steady_clock::now();
    auto got =
        session.Run(client.ReadParallelInto(o.path, at, back.first(n), o.parallel, deadline));
    read_s += Seconds(start);
    if (!got.ok() || *got != n) {
      std::fprintf(stderr, "ringfs bench: read: %s\n",
                   got.ok() ? ("short read at " + std::to_string(at)).c_str()
                            : got.status().ToString().c_str());
      return 1;
    }
    if (std::memcmp(back.data(), data.data(), n) != 0) {
      std::fprintf(stderr, "ringfs bench: read back different data at offset %llu\n",
                   static_cast<unsigned long long>(at));
      return 1;
    }
  }
  std::printf("read   %8.1f MiB/s  (%llu MiB in %.2f s)\n",
              static_cast<double>(size) / (1 << 20) / read_s,
              static_cast<unsigned long long>(o.size_mib), read_s);
  std::fflush(stdout);

  // 64 KiB random reads at 64 KiB-aligned offsets, `parallel` requests in flight.
  const uint64_t blocks = std::max<uint64_t>(1, size / (64 << 10));
  std::vector<uint64_t> offsets(static_cast<size_t>(o.random_reads));
  for (auto& off : offsets) off = (rng() % blocks) * (64 << 10);
  start = std::chrono::steady_clock::now();
  rt::Status rs = session.Run([&]() -> boost::asio::awaitable<rt::Status> {
    namespace asio = boost::asio;
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer all_done(ex, asio::steady_timer::time_point::max());
    size_t next = 0;
    int running = 0;
    rt::Status first_error;
    for (int w = 0; w < workers; ++w) {
      ++running;
      asio::co_spawn(
          ex,
          [&, w]() -> asio::awaitable<void> {
            const std::span<std::byte> slot = buffers.subspan(2 * window + w * kRandom, kRandom);
            while (next < offsets.size() && first_error.ok()) {
              const uint64_t off = offsets[next++];
              auto r = co_await client.ReadInto(o.path, off, slot, deadline);
              if (!r.ok() && first_error.ok()) first_error = r.status();
            }
            if (--running == 0) all_done.cancel();
          },
          asio::detached);
    }
    while (running > 0) (void)co_await all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    co_return first_error;
  }());
  if (!rs.ok()) {
    std::fprintf(stderr, "ringfs bench: random read: %s\n", rs.ToString().c_str());
    return 1;
  }
  const int done = o.random_reads;
  const double rand_s = Seconds(start);
  std::printf("rand64k %7.0f IOPS   (%d reads of 64 KiB in %.2f s, %.1f MiB/s)\n", done / rand_s,
              done, rand_s, done * 64.0 / 1024 / rand_s);
  (void)session.Run(client.Remove(o.path, deadline));
  return 0;
}

}  // namespace ringfs
