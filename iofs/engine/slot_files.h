// The preallocated data files of a chunk engine and the allocator of their slots.
// Files are named data/<file id>.<class>.dat; each holds `slots_per_file` slots of its class's
// size and is preallocated with fallocate when created. The allocator is not persisted: the
// engine rebuilds it from the committed metadata on open (MarkUsed), so slots written but never
// committed are free again after a crash.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "iofs/engine/chunk_record.h"
#include "iofs/engine/uring_executor.h"

namespace rt::iofs {

// Not thread-safe: the engine serialises calls with its allocation mutex.
class SlotFiles {
 public:
  // `dir` is the data folder; sizes in bytes.
  SlotFiles(std::string dir, uint32_t small_size, uint32_t large_size, uint32_t slots_per_file,
            uint64_t capacity_bytes, UringExecutor* executor);
  ~SlotFiles();

  // Opens every existing data file, checks its size (re-extending a file whose creation was
  // interrupted) and registers it with the executor. Then call MarkUsed for each committed chunk
  // and FinishRebuild.
  Status OpenExisting();

  // Marks a slot of a committed chunk used while rebuilding. Corruption if the file does not
  // exist, the slot is out of range, or it is already used.
  Status MarkUsed(const ChunkLocation& loc, std::string_view what);

  // Builds the free lists from the slots not marked used.
  void FinishRebuild();

  // Allocates a free slot of `size_class`, creating and preallocating a new data file when
  // every slot is taken. NoSpace when none is free and another file would exceed the capacity
  // (or fallocate reports ENOSPC). Quarantined slots are not used (see RecycleQuarantine).
  Result<ChunkLocation> Allocate(SizeClass size_class);
  // Frees a slot now (it was never committed).
  void Free(const ChunkLocation& loc);
  // Frees a slot once no reader may still read it: it is parked until RecycleQuarantine().
  void Quarantine(const ChunkLocation& loc);
  // True if quarantined slots exist.
  bool HasQuarantine() const { return !quarantine_.empty(); }
  // Moves quarantined slots to the free lists; call only when no reader is reading them.
  void RecycleQuarantine();
  // True if a free slot of the class exists without creating a file or recycling.
  bool HasFree(SizeClass size_class) const;

  // The registered-file slot and byte offset of a location.
  int RegisteredSlot(const ChunkLocation& loc) const;
  uint64_t Offset(const ChunkLocation& loc) const;
  // The descriptor of a location's data file (-1 if it has none).
  int Fd(const ChunkLocation& loc) const;
  // The path of a data file (for error messages and tests).
  std::string PathOf(uint32_t file) const;
  // Slot size of a class.
  uint32_t SlotSize(SizeClass size_class) const;

  uint64_t total_slots() const;
  // Slots held by chunks (quarantined slots count as free).
  uint64_t used_slots() const;
  uint64_t file_bytes() const { return file_bytes_; }
  // Every used location, for checks.
  std::vector<ChunkLocation> UsedLocations() const;

 private:
  struct File {
    SizeClass size_class;
    int fd = -1;
    std::vector<bool> used;
  };
  Status CreateFile(SizeClass size_class);
  uint64_t FileSize(SizeClass size_class) const;

  const std::string dir_;
  const uint32_t small_size_;
  const uint32_t large_size_;
  const uint32_t slots_per_file_;
  const uint64_t capacity_bytes_;
  UringExecutor* const executor_;
  std::map<uint32_t, File> files_;
  std::vector<ChunkLocation> free_[2];
  std::vector<ChunkLocation> quarantine_;
  uint64_t file_bytes_ = 0;
  uint32_t next_file_ = 0;
};

}  // namespace rt::iofs
