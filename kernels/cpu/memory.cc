// CPU storage: aligned allocation, copies, and the per-thread scratch of common.h.
#include <sys/mman.h>

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
  // Buffers of a huge page or more (the model's arenas) are aligned to one and advised to use
  // them: a training step walks them whole, and 2 MiB pages spare it the TLB misses and page
  // faults of 4 KiB ones. The advice is a hint; where it is not taken the buffer still works.
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) {
    return Status(StatusCode::kResourceExhausted,
                  "Buffer::Allocate: out of host memory for " + std::to_string(bytes) + " bytes");
  }
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
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
