// CPU storage: aligned allocation, copies, and the per-thread scratch of common.h.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

Status Available() { return Status::Ok(); }

Status Synchronize() { return Status::Ok(); }

Result<void*> Allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return Status(StatusCode::kResourceExhausted,
                  "Buffer::Allocate: out of host memory for " + std::to_string(bytes) + " bytes");
  }
  std::memset(p, 0, rounded);
  return p;
}

void Free(void* p) { std::free(p); }

Status Copy(Tensor dst, Tensor src) {
  if (dst.data() != src.data()) std::memmove(dst.data(), src.data(), src.nbytes());
  return Status::Ok();
}

float* Scratch(int slot, size_t n) {
  thread_local std::vector<float> slots[8];
  RT_CHECK(slot >= 0 && slot < 8);
  std::vector<float>& v = slots[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace rt::cpu
