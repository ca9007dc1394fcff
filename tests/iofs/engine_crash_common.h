// What the chunk-engine crash child writes, shared with the test that checks it.
#pragma once

#include <cstdint>
#include <string>

#include "iofs/chunk_engine.h"

namespace rt::iofs::testing {

inline constexpr uint64_t kCrashChunks = 6;

// Small engine geometry so the test is fast: 256 KiB chunks, 64 KiB small class.
inline ChunkEngineOptions CrashEngineOptions(const std::string& dir) {
  ChunkEngineOptions o;
  o.dir = dir;
  o.chunk_size = 256 << 10;
  o.small_chunk_size = 64 << 10;
  o.slots_per_file = 8;
  o.capacity_bytes = 64 << 20;
  o.io_buffers = 4;
  o.queue_depth = 8;
  return o;
}

// Length of chunk `id` in round `r`: alternates between the small and the large class.
inline size_t CrashLength(uint64_t id, int r) {
  return (id + r) % 2 ? 200000 + id * 1000 + r : 30000 + id * 100 + r;
}

}  // namespace rt::iofs::testing
