// The chunk engine: one per node and storage folder. Stores immutable-per-version chunks
// (whole-chunk replace) in preallocated data files written with io_uring (O_DIRECT, registered
// buffers and files, batched submission) and keeps their metadata in RocksDB.
//
// Durability order of a write: the data goes to a free slot (never over the live version), the
// data file is fdatasync'd, then the metadata record (location, version, length, CRC32C per
// 64 KiB block and per chunk) commits in one synced RocksDB write batch, and only then is the old
// slot freed. A crash at any point leaves the old or the new version. On open the allocator is
// rebuilt from RocksDB, so slots written but never committed are free again. Every read verifies
// the block checksums (and the chunk checksum for whole-chunk reads).
// Format: docs/formats/iofs_chunk_engine.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"

namespace rt::iofs {

// Identifies a chunk within a node's engine.
using ChunkId = uint64_t;

// Engine configuration (TOML section [engine] in node.toml).
struct ChunkEngineOptions {
  std::string dir;                         // storage folder (required); data/ and meta/ inside
  uint32_t chunk_size = 4u << 20;          // bytes, large class; multiple of 64 KiB
  uint32_t small_chunk_size = 256u << 10;  // bytes, small class for tails; multiple of 64 KiB
  uint32_t slots_per_file = 64;            // chunk slots per preallocated data file
  uint64_t capacity_bytes = 64ull << 30;   // most bytes of data files the engine may create
  int queue_depth = 32;                    // io_uring queue depth (ops in flight)
  int io_buffers = 16;                     // registered buffers of chunk_size bytes each
  int64_t io_timeout_ms = 30000;           // deadline for one batch of I/O
};

// Metadata of one stored chunk.
struct ChunkInfo {
  ChunkId id = 0;
  uint64_t version = 0;  // caller-chosen, e.g. the chain version of the write
  uint32_t length = 0;   // bytes of data
  uint32_t crc = 0;      // CRC32C of the whole chunk
  bool small = false;    // stored in the small class
};

// One write of a batch: the whole new content of a chunk.
struct ChunkWrite {
  ChunkId id = 0;
  uint64_t version = 0;
  std::span<const std::byte> data;
};

// Space accounting, for tests, fsck and stats.
struct EngineUsage {
  uint64_t chunks = 0;       // committed chunks
  uint64_t used_slots = 0;   // slots held by committed chunks
  uint64_t total_slots = 0;  // slots in all data files
  uint64_t file_bytes = 0;   // bytes of all data files
  uint64_t data_bytes = 0;   // bytes of committed chunk data
};

// What the engine has read and written since it opened, for stats.
struct EngineCounters {
  uint64_t read_bytes = 0;     // chunk bytes delivered by reads that succeeded
  uint64_t written_bytes = 0;  // chunk bytes of write batches that committed
  uint64_t read_errors = 0;    // reads that failed (I/O error, checksum mismatch), not NotFound
  uint64_t write_errors = 0;   // write batches that failed before their fdatasync
  uint64_t sync_errors = 0;    // write batches whose fdatasync or metadata commit failed
};

// A read straight into caller memory that the caller submits itself (for example on an io_uring
// of its own thread, ChunkEngine::PlanReadInto). The first four fields say what to read; the
// rest is the engine's, to verify what landed.
struct PlannedRead {
  int fd = -1;                       // the data file (opened with O_DIRECT)
  uint64_t file_offset = 0;          // where to read in it (4096-aligned)
  uint32_t io_length = 0;            // bytes to read (4096-aligned; 0 = nothing to read)
  std::byte* dest = nullptr;         // where they land (the caller's memory)
  ChunkInfo info;                    // the chunk read
  uint64_t offset = 0;               // in the chunk (a multiple of 64 KiB)
  uint64_t length = 0;               // bytes delivered, once verified
  std::vector<uint32_t> block_crcs;  // stored CRC32C of each 64 KiB block read
  std::string file;                  // the data file's path, for errors
};

// Thread-safe. Close by destroying it (waits for running calls of other threads to finish first
// is the caller's job: do not destroy while calls are running).
class ChunkEngine {
 public:
  // Opens (creating if needed) the engine in options.dir. Checks that the stored geometry matches
  // the options, rebuilds the allocator from the metadata and verifies that every data file the
  // metadata refers to exists. Errors: InvalidArgument for bad options, Corruption for
  // inconsistent metadata, RocksDbError, IoError (e.g. O_DIRECT unsupported by the filesystem).
  static Result<std::unique_ptr<ChunkEngine>> Open(const ChunkEngineOptions& options);
  virtual ~ChunkEngine() = default;

  // Writes every chunk of `writes` (each its whole new content, at most chunk_size bytes) as one
  // batch: all data in one io_uring submission, one fdatasync per touched file, one synced
  // RocksDB batch. All or nothing: on error no chunk changes. Errors: InvalidArgument (too
  // large, duplicate id), NoSpace (no free slot and no room for another data file), IoError,
  // RocksDbError.
  virtual Status Write(std::span<const ChunkWrite> writes) = 0;
  // Writes one chunk (see above).
  Status Write(ChunkId id, uint64_t version, std::span<const std::byte> data) {
    ChunkWrite w{id, version, data};
    return Write(std::span<const ChunkWrite>(&w, 1));
  }

  // Reads `length` bytes at `offset` of a chunk into `out` (resized), verifying every 64 KiB
  // block read and, for whole-chunk reads, the chunk CRC. `info`, if given, receives the
  // metadata. Errors: NotFound, OutOfRange, ChecksumMismatch (naming chunk, block, file, offset).
  virtual Status Read(ChunkId id, uint64_t offset, uint64_t length, std::vector<std::byte>* out,
                      ChunkInfo* info = nullptr) = 0;
  // Reads like Read, straight into `out` (up to out.size() bytes at `offset`, one copy from the
  // I/O buffer, no intermediate vector). Returns the bytes read (fewer at the end of the chunk).
  virtual Result<size_t> ReadInto(ChunkId id, uint64_t offset, std::span<std::byte> out,
                                  ChunkInfo* info = nullptr) = 0;
  // Plans ReadInto as one read the caller submits itself: the chunk's slot stays pinned (never
  // reused) until FinishReadInto, which every successful plan must reach whatever its I/O did.
  // It never waits for a lock (callers on an event loop). FailedPrecondition when the read
  // cannot land straight in `out` (offset not a multiple of 64 KiB, memory not 4096-aligned or
  // without room for the read rounded up to 4096 bytes) or a lock it needs is taken: read with
  // ReadInto instead. Other errors as ReadInto.
  virtual Result<PlannedRead> PlanReadInto(ChunkId id, uint64_t offset,
                                           std::span<std::byte> out) = 0;
  // Verifies a planned read whose I/O transferred `io_result` bytes (or failed with -errno) and
  // unpins its slot. Returns the bytes delivered; errors as ReadInto.
  virtual Result<size_t> FinishReadInto(const PlannedRead& plan, int io_result) = 0;
  // Reads a whole chunk.
  Status ReadAll(ChunkId id, std::vector<std::byte>* out, ChunkInfo* info = nullptr) {
    return Read(id, 0, UINT64_MAX, out, info);
  }

  // Atomically hands chunk `from`'s stored data to chunk `to` under `version` and removes
  // `from`, in one synced metadata commit with no data copied; `to`'s old data is freed.
  // NotFound if `from` does not exist. The caller must not write `from` or `to` concurrently.
  virtual Status Move(ChunkId from, ChunkId to, uint64_t version) = 0;

  // The metadata of a chunk (NotFound if absent).
  virtual Result<ChunkInfo> Stat(ChunkId id) = 0;
  // Removes chunks (absent ids are ignored) in one synced batch and frees their slots.
  virtual Status Remove(std::span<const ChunkId> ids) = 0;
  // Every committed chunk with id in [first, last], in id order.
  virtual std::vector<ChunkInfo> List(ChunkId first = 0, ChunkId last = UINT64_MAX) = 0;

  // Space accounting.
  virtual EngineUsage Usage() = 0;
  // Bytes and failures of reads and writes since Open.
  virtual EngineCounters Counters() = 0;
  // Reads and verifies every chunk and checks the allocator against the metadata (no slot held
  // twice, none outside a file). Returns the problems found, one line each (empty = clean).
  virtual std::vector<std::string> Check() = 0;

  // The options the engine was opened with.
  virtual const ChunkEngineOptions& options() const = 0;
};

}  // namespace rt::iofs
