#include "comm/store.h"

#include <condition_variable>
#include <map>
#include <mutex>

namespace rt::comm {

Bytes ToBytes(std::string_view s) {
  auto p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}

std::string ToString(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::string StoreScope(std::string_view job, int64_t generation) {
  return "job/" + std::string(job) + "/gen/" + std::to_string(generation) + "/";
}

namespace {

class Scoped final : public Store {
 public:
  Scoped(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}
  Status Set(std::string_view key, std::span<const std::byte> value, Deadline d) override {
    return base_->Set(K(key), value, d);
  }
  Result<Bytes> Get(std::string_view key, Deadline d) override { return base_->Get(K(key), d); }
  Result<std::optional<Bytes>> TryGet(std::string_view key, Deadline d) override {
    return base_->TryGet(K(key), d);
  }
  Status Wait(std::span<const std::string> keys, Deadline d) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(K(k));
    return base_->Wait(full, d);
  }
  Result<int64_t> Add(std::string_view key, int64_t delta, Deadline d) override {
    return base_->Add(K(key), delta, d);
  }
  Result<Bytes> CompareAndSet(std::string_view key, std::optional<Bytes> expected,
                              std::span<const std::byte> desired, Deadline d) override {
    return base_->CompareAndSet(K(key), std::move(expected), desired, d);
  }
  Result<bool> Delete(std::string_view key, Deadline d) override {
    return base_->Delete(K(key), d);
  }

 private:
  std::string K(std::string_view key) const { return prefix_ + std::string(key); }
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

// Counters are stored as decimal text, as in torch's TCPStore, so they read well in dumps.
Result<int64_t> ParseCounter(std::string_view key, const Bytes& value) {
  std::string s = ToString(value);
  if (s.empty()) return int64_t{0};
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() + s.size())
    return InvalidArgument("store key " + std::string(key) + " does not hold a counter");
  return static_cast<int64_t>(v);
}

class Memory final : public Store {
 public:
  Status Set(std::string_view key, std::span<const std::byte> value, Deadline) override {
    std::lock_guard lock(mu_);
    map_[std::string(key)] = Bytes(value.begin(), value.end());
    cv_.notify_all();
    return Status();
  }
  Result<Bytes> Get(std::string_view key, Deadline d) override {
    std::string k(key);
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, d.when(), [&] { return map_.count(k) > 0; }))
      return DeadlineExceeded("store key " + k + " did not appear before the deadline");
    return map_[k];
  }
  Result<std::optional<Bytes>> TryGet(std::string_view key, Deadline) override {
    std::lock_guard lock(mu_);
    auto it = map_.find(std::string(key));
    if (it == map_.end()) return std::optional<Bytes>();
    return std::optional<Bytes>(it->second);
  }
  Status Wait(std::span<const std::string> keys, Deadline d) override {
    std::unique_lock lock(mu_);
    auto all = [&] {
      for (const auto& k : keys)
        if (!map_.count(k)) return false;
      return true;
    };
    if (!cv_.wait_until(lock, d.when(), all)) {
      std::string missing;
      for (const auto& k : keys)
        if (!map_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
      return DeadlineExceeded("store keys missing at the deadline: " + missing);
    }
    return Status();
  }
  Result<int64_t> Add(std::string_view key, int64_t delta, Deadline) override {
    std::lock_guard lock(mu_);
    Bytes& v = map_[std::string(key)];
    ASSIGN_OR_RETURN(int64_t now, ParseCounter(key, v));
    now += delta;
    v = ToBytes(std::to_string(now));
    cv_.notify_all();
    return now;
  }
  Result<Bytes> CompareAndSet(std::string_view key, std::optional<Bytes> expected,
                              std::span<const std::byte> desired, Deadline) override {
    std::lock_guard lock(mu_);
    auto it = map_.find(std::string(key));
    const bool matches = it == map_.end() ? !expected.has_value()
                                          : (expected.has_value() && *expected == it->second);
    if (matches) {
      map_[std::string(key)] = Bytes(desired.begin(), desired.end());
      cv_.notify_all();
      return Bytes(desired.begin(), desired.end());
    }
    if (it == map_.end()) return Bytes();
    return it->second;
  }
  Result<bool> Delete(std::string_view key, Deadline) override {
    std::lock_guard lock(mu_);
    return map_.erase(std::string(key)) > 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> map_;
};

}  // namespace

std::shared_ptr<Store> ScopedStore(std::shared_ptr<Store> base, std::string prefix) {
  return std::make_shared<Scoped>(std::move(base), std::move(prefix));
}

std::shared_ptr<Store> NewMemoryStore() { return std::make_shared<Memory>(); }

Result<int64_t> ParseStoreCounter(std::string_view key, const Bytes& value) {
  return ParseCounter(key, value);
}

}  // namespace rt::comm
