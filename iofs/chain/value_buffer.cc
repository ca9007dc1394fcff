#include "iofs/chain/value_buffer.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace rt::iofs::chain {
namespace {

// Smaller values are allocated afresh: their zero fill is cheap.
constexpr size_t kMinPooled = 1 << 20;

struct Pool {
  std::mutex mu;
  std::vector<std::string*> free;  // GUARDED_BY(mu)
};

// Never destroyed: a value may be freed while the process exits.
Pool& ThePool() {
  static Pool* pool = new Pool;
  return *pool;
}

std::atomic<size_t> in_use{0};

void Recycle(std::string* s) {
  in_use.fetch_sub(1, std::memory_order_relaxed);
  if (s->size() >= kMinPooled) {
    Pool& pool = ThePool();
    std::lock_guard lock(pool.mu);
    if (pool.free.size() < kPooledValueBuffers) {
      pool.free.push_back(s);
      return;
    }
  }
  delete s;
}

}  // namespace

std::shared_ptr<std::string> NewValueBuffer(size_t n) {
  std::string* s = nullptr;
  if (n >= kMinPooled) {
    Pool& pool = ThePool();
    std::lock_guard lock(pool.mu);
    // The most recently freed first: its memory is the most likely to be in cache.
    for (size_t i = pool.free.size(); i-- > 0;) {
      if (pool.free[i]->size() < n) continue;
      s = pool.free[i];
      pool.free.erase(pool.free.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  if (s) {
    s->resize(n);  // shrinking writes nothing but the terminator
  } else {
    s = new std::string(n, '\0');
  }
  in_use.fetch_add(1, std::memory_order_relaxed);
  return std::shared_ptr<std::string>(s, Recycle);
}

size_t ValueBuffersInUse() { return in_use.load(std::memory_order_relaxed); }

}  // namespace rt::iofs::chain
