// Fuzz target: the state iofs reads back from disk at start — the chain manager's saved chain
// versions (ChainManager::Restore) and the namespace object (FileSystem::Open loads it from the
// object store) — must be accepted or refused with an error, never crash or hang, and what is
// accepted must keep working: the restored manager handles node events and saves a state that
// restores again; the loaded namespace lists, checks and changes.
//
// The input is the chain manager state; the same bytes with their CRC32C appended are the
// namespace object (so mutations reach the decoder behind the checksum).
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/crc32c.h"
#include "iofs/chain/chain_manager.h"
#include "iofs/chain/codec.h"
#include "iofs/file_system.h"
#include "iofs/object_store.h"

namespace {

using rt::iofs::ObjectKey;

// Objects in memory: the namespace decoder reads through the ObjectStore interface only.
class MemoryObjectStore : public rt::iofs::ObjectStore {
 public:
  rt::Status Put(std::span<const rt::iofs::ObjectPut> puts) override {
    std::lock_guard lock(mu_);
    for (const auto& p : puts) objects_[p.key].assign(p.data.begin(), p.data.end());
    return rt::Status();
  }
  rt::Status Get(ObjectKey key, uint64_t offset, uint64_t length,
                 std::vector<std::byte>* out) override {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return rt::NotFound("object " + std::to_string(key));
    const auto& bytes = it->second;
    if (offset > bytes.size()) return rt::OutOfRange("offset past the object");
    const uint64_t n = std::min<uint64_t>(length, bytes.size() - offset);
    out->assign(bytes.begin() + static_cast<ptrdiff_t>(offset),
                bytes.begin() + static_cast<ptrdiff_t>(offset + n));
    return rt::Status();
  }
  rt::Status Delete(std::span<const ObjectKey> keys) override {
    std::lock_guard lock(mu_);
    for (ObjectKey k : keys) objects_.erase(k);
    return rt::Status();
  }
  rt::Result<std::vector<ObjectKey>> Keys() override {
    std::lock_guard lock(mu_);
    std::vector<ObjectKey> keys;
    for (const auto& [k, v] : objects_) keys.push_back(k);
    return keys;
  }
  uint32_t max_object_size() const override { return 1 << 20; }
  std::vector<std::string> CheckStorage() override { return {}; }

 private:
  std::mutex mu_;
  std::map<ObjectKey, std::vector<std::byte>> objects_;
};

void FuzzChainManager(std::span<const std::byte> bytes) {
  static const auto layout = rt::iofs::chain::BuildChains({1, 2, 3, 4}, 3, 4);
  if (!layout.ok()) __builtin_trap();
  rt::iofs::chain::ChainManager manager(*layout);
  if (!manager.Restore(bytes).ok()) return;
  std::vector<std::byte> saved = manager.Save();
  rt::iofs::chain::ChainManager again(*layout);
  if (!again.Restore(saved).ok() || again.Save() != saved) __builtin_trap();
  manager.OnNodeDown(2);
  manager.OnNodeUp(2);
  for (rt::iofs::chain::ChainId c = 0; c < manager.chain_count(); ++c)
    manager.OnSyncComplete(2, c, manager.config(c).version);
  (void)manager.Save();
}

// Lists every folder reachable from "/" (depth-bounded: a loop in the namespace must not hang).
void Walk(rt::iofs::FileSystem& fs, const std::string& path, int depth) {
  if (depth > 8) return;
  auto entries = fs.List(path);
  if (!entries.ok()) return;
  for (const auto& e : *entries) {
    (void)fs.Stat(e.path);
    if (e.is_dir) Walk(fs, e.path, depth + 1);
  }
}

void FuzzNamespace(std::span<const std::byte> bytes) {
  rt::ByteWriter object;
  object.PutBytes(bytes.data(), bytes.size());
  object.Put<uint32_t>(rt::Crc32c(bytes.data(), bytes.size()));
  MemoryObjectStore store;
  rt::iofs::ObjectPut put{rt::iofs::kNamespaceKey, object.bytes()};
  if (!store.Put({&put, 1}).ok()) __builtin_trap();
  auto fs = rt::iofs::FileSystem::Open(&store, 4096);
  if (!fs.ok()) return;
  Walk(**fs, "/", 0);
  (void)(*fs)->Fsck(false);
  (void)(*fs)->Mkdir("/fuzz/made");
  (void)(*fs)->Rename("/fuzz", "/fuzz2");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  FuzzChainManager(bytes);
  FuzzNamespace(bytes);
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  std::vector<std::vector<uint8_t>> seeds;
  auto add = [&](std::span<const std::byte> b) {
    seeds.emplace_back(reinterpret_cast<const uint8_t*>(b.data()),
                       reinterpret_cast<const uint8_t*>(b.data()) + b.size());
  };
  auto layout = rt::iofs::chain::BuildChains({1, 2, 3, 4}, 3, 4);
  rt::iofs::chain::ChainManager manager(*layout);
  add(manager.Save());
  manager.OnNodeDown(3);
  manager.OnNodeUp(3);
  add(manager.Save());
  // A namespace with a folder and a sealed file, without its CRC (the target appends it).
  MemoryObjectStore store;
  auto fs = rt::iofs::FileSystem::Open(&store, 4096);
  if (fs.ok() && (*fs)->Mkdir("/ckpt/step-10").ok() && (*fs)->Create("/ckpt/step-10/a").ok() &&
      (*fs)->Seal("/ckpt/step-10/a").ok()) {
    std::vector<std::byte> object;
    if (store.Get(rt::iofs::kNamespaceKey, 0, UINT64_MAX, &object).ok() && object.size() >= 4)
      add(std::span<const std::byte>(object.data(), object.size() - 4));
  }
  return seeds;
}
