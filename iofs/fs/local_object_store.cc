#include <mutex>

#include "iofs/object_store.h"

namespace rt::iofs {
namespace {

class LocalObjectStore final : public ObjectStore {
 public:
  explicit LocalObjectStore(ChunkEngine* engine) : engine_(engine) {}

  Status Put(std::span<const ObjectPut> puts) override {
    std::vector<ChunkWrite> writes;
    for (const ObjectPut& p : puts) {
      Result<ChunkInfo> info = engine_->Stat(p.key);
      const uint64_t version = info.ok() ? info->version + 1 : 1;
      writes.push_back(ChunkWrite{p.key, version, p.data});
    }
    return engine_->Write(writes);
  }
  Status Get(ObjectKey key, uint64_t offset, uint64_t length,
             std::vector<std::byte>* out) override {
    return engine_->Read(key, offset, length, out);
  }
  Result<size_t> GetInto(ObjectKey key, uint64_t offset, std::span<std::byte> out) override {
    return engine_->ReadInto(key, offset, out);
  }
  Status Delete(std::span<const ObjectKey> keys) override { return engine_->Remove(keys); }
  Result<std::vector<ObjectKey>> Keys() override {
    std::vector<ObjectKey> keys;
    for (const ChunkInfo& c : engine_->List()) keys.push_back(c.id);
    return keys;
  }
  uint32_t max_object_size() const override { return engine_->options().chunk_size; }
  std::vector<std::string> CheckStorage() override { return engine_->Check(); }

 private:
  ChunkEngine* const engine_;
};

}  // namespace

std::unique_ptr<ObjectStore> NewLocalObjectStore(ChunkEngine* engine) {
  return std::make_unique<LocalObjectStore>(engine);
}

}  // namespace rt::iofs
