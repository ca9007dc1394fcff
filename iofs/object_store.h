// ObjectStore: whole-object put/get/delete by 64-bit key — the interface the file layer (and
// later ckpt/) writes through. Implemented over a local chunk engine (replication factor 1, the
// embedded default) and by the chain-replicated store. One object is one chunk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "iofs/chunk_engine.h"

namespace rt::iofs {

using ObjectKey = uint64_t;

// One object of a batch put.
struct ObjectPut {
  ObjectKey key = 0;
  std::span<const std::byte> data;
};

// Thread-safe.
class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // Stores every object of `puts` (each replaces the whole object); the batch is written in
  // parallel. Errors: InvalidArgument (larger than max_object_size), NoSpace, IoError...
  virtual Status Put(std::span<const ObjectPut> puts) = 0;
  // Reads `length` bytes at `offset` of an object (clamped to its size), checksums verified.
  // Errors: NotFound, OutOfRange, ChecksumMismatch.
  virtual Status Get(ObjectKey key, uint64_t offset, uint64_t length,
                     std::vector<std::byte>* out) = 0;
  // Reads up to out.size() bytes at `offset` of an object straight into `out`; returns the bytes
  // read (fewer at the end of the object). Errors as Get. By default Get and a copy.
  virtual Result<size_t> GetInto(ObjectKey key, uint64_t offset, std::span<std::byte> out) {
    std::vector<std::byte> bytes;
    RETURN_IF_ERROR(Get(key, offset, out.size(), &bytes));
    const size_t n = std::min(bytes.size(), out.size());
    std::copy_n(bytes.begin(), n, out.begin());
    return n;
  }
  // Deletes objects (absent keys are ignored).
  virtual Status Delete(std::span<const ObjectKey> keys) = 0;
  // Every stored key, in order (for fsck).
  virtual Result<std::vector<ObjectKey>> Keys() = 0;
  // Largest object in bytes.
  virtual uint32_t max_object_size() const = 0;
  // Checks the storage below (checksums, allocator); one line per problem.
  virtual std::vector<std::string> CheckStorage() = 0;
};

// An ObjectStore over one local chunk engine (not owned; must outlive the store). Each put gets
// version = previous version + 1.
std::unique_ptr<ObjectStore> NewLocalObjectStore(ChunkEngine* engine);

}  // namespace rt::iofs
