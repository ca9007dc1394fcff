// Chunk engine throughput without the network: `threads` writers each write whole chunks in
// batches of `batch` (one io_uring submission, one fdatasync per touched file and one RocksDB
// commit per batch), then the same chunks are read back and verified by checksum.
// Usage: iofs_engine_bench DIR [size_mib=1024] [threads=4] [batch=4] [chunk_kib=4096]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "base/log.h"
#include "iofs/chunk_engine.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [size_mib] [threads] [batch] [chunk_kib]\n", argv[0]);
    return 2;
  }
  (void)rt::InitLogging("warn", "iofs_engine_bench");
  const std::string dir = argv[1];
  const uint64_t size = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1024) << 20;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 4;
  const int batch = argc > 4 ? std::atoi(argv[4]) : 4;
  const uint32_t chunk = static_cast<uint32_t>((argc > 5 ? std::atoi(argv[5]) : 4096) << 10);
  std::filesystem::remove_all(dir);
  rt::iofs::ChunkEngineOptions o;
  o.dir = dir;
  o.chunk_size = chunk;
  o.slots_per_file = 256;
  o.capacity_bytes = size * 2 + (1ull << 30);
  o.io_buffers = std::max(16, threads * batch);
  o.queue_depth = 32;
  auto engine = rt::iofs::ChunkEngine::Open(o);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  const uint64_t chunks = size / chunk;
  std::vector<std::byte> data(chunk);
  for (size_t i = 0; i < data.size(); ++i) data[i] = std::byte(i * 131 + 7);
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (;;) {
        const uint64_t first = next.fetch_add(static_cast<uint64_t>(batch));
        if (first >= chunks) return;
        std::vector<rt::iofs::ChunkWrite> writes;
        for (uint64_t id = first; id < std::min(chunks, first + batch); ++id)
          writes.push_back({id, 1, data});
        if (!(*engine)->Write(writes).ok()) failed = true;
      }
    });
  for (auto& t : pool) t.join();
  const double write_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  next = 0;
  pool.clear();
  start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      std::vector<std::byte> out;
      for (;;) {
        const uint64_t id = next.fetch_add(1);
        if (id >= chunks) return;
        if (!(*engine)->ReadAll(id, &out).ok() || out.size() != chunk) failed = true;
      }
    });
  for (auto& t : pool) t.join();
  const double read_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mib = static_cast<double>(chunks) * chunk / (1 << 20);
  std::printf(
      "engine write %8.1f MiB/s  read %8.1f MiB/s  (%.0f MiB, %u KiB chunks, %d threads, batch "
      "%d)%s\n",
      mib / write_s, mib / read_s, mib, chunk >> 10, threads, batch, failed ? "  FAILED" : "");
  engine->reset();
  std::filesystem::remove_all(dir);
  return failed ? 1 : 0;
}
