// A rank's shared-memory segment (docs/formats/comm_wire.md, "Shared memory"): its layout — a
// header with a doorbell futex word and the arena's counters and slots, one inbound ring per
// peer, then the arena's staging halves — its creation and mapping, and the futex calls that
// sleep on and ring a doorbell. Internal to comm/tcp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "comm/tcp/wire.h"

namespace rt::comm::tcp {

// A mapped shared-memory segment; unmapped on destruction (the name is unlinked by bootstrap).
struct ShmSegment {
  std::string name;      // shm_open name
  void* base = nullptr;  // mapping
  size_t bytes = 0;
  ~ShmSegment();
};

// Creates (and maps) this rank's segment for `nranks` rings of `ring_bytes` and an arena of
// `arena_bytes` (0: none).
Result<std::unique_ptr<ShmSegment>> CreateShmSegment(const std::string& name, int nranks,
                                                     size_t ring_bytes, size_t arena_bytes);
// Maps a peer's segment by name; checks its header against the three sizes.
Result<std::unique_ptr<ShmSegment>> OpenShmSegment(const std::string& name, int nranks,
                                                   size_t ring_bytes, size_t arena_bytes);

// Payloads of at most this many bytes travel inside the arena slot's cache line.
inline constexpr size_t kArenaInlineBytes = 24;

// The announcement of one staging half, one cache line: a reader that sees `step` finds the
// op header, and a payload of at most kArenaInlineBytes, in the same line.
struct alignas(64) ArenaSlot {
  std::atomic<uint64_t> step;         // the last step staged in this half (written last)
  std::byte header[kDataHeaderSize];  // encoded DataHeader of that step
  std::byte data[kArenaInlineBytes];  // the payload when it fits
};
static_assert(sizeof(ArenaSlot) == 64);

// Bytes reserved for the segment header and for each ring's header.
inline constexpr size_t kSegHeader = 512;
inline constexpr size_t kRingHeader = 128;

// The segment header, at the segment's start.
struct SegHeader {
  uint32_t magic;
  uint32_t nranks;
  uint64_t ring_bytes;
  uint64_t arena_bytes;
  // The owner's process id, the address of this header in the owner's mapping, and a random
  // nonce there: a peer that reads the nonce at that address in that process with
  // process_vm_readv knows it can read the owner's memory (single-copy all-reduce).
  int32_t pid;
  uint64_t own_address;
  uint64_t nonce;
  alignas(64) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleeping;
  // Arena step counters, written only by the segment's owner (docs/formats/comm_wire.md).
  alignas(64) std::atomic<uint64_t> reduced;
  ArenaSlot slot[2];
  alignas(64) std::atomic<uint64_t> released;
  std::atomic<uint64_t> abandoned;
  alignas(64) std::atomic<uint64_t> progress;
  // Two-rank single-copy steps: where the ranks' blocks meet; written by both ranks (CAS).
  alignas(64) std::atomic<uint64_t> claim;
};
static_assert(sizeof(SegHeader) <= kSegHeader);

// The header of one inbound ring: a single-producer, single-consumer byte stream.
struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written (producer)
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever read (consumer)
};
static_assert(sizeof(RingHeader) <= kRingHeader);

// Offset of the arena's staging halves: after the rings, page-aligned.
inline size_t ArenaOffset(int nranks, size_t ring_bytes) {
  size_t end = kSegHeader + static_cast<size_t>(nranks) * (kRingHeader + ring_bytes);
  return (end + 4095) / 4096 * 4096;
}
// The header of the segment mapped at `base`.
inline SegHeader* Header(void* base) { return static_cast<SegHeader*>(base); }
// The header of ring `slot` (the ring that rank `slot` writes into this segment).
inline RingHeader* RingAt(void* base, int slot, size_t ring_bytes) {
  return reinterpret_cast<RingHeader*>(static_cast<char*>(base) + kSegHeader +
                                       static_cast<size_t>(slot) * (kRingHeader + ring_bytes));
}
// The `ring_bytes` data bytes of ring `slot`.
inline std::byte* RingData(void* base, int slot, size_t ring_bytes) {
  return reinterpret_cast<std::byte*>(RingAt(base, slot, ring_bytes)) + kRingHeader;
}

// Sleeps while *word == expected, `timeout_ms` at most (FUTEX_WAIT on a shared mapping).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
// Wakes every thread sleeping on `word`, in any process.
void FutexWake(std::atomic<uint32_t>* word);

// One turn of a busy wait: a CPU pause.
inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace rt::comm::tcp
