// CUDA storage: cudaMalloc'ed buffers and copies in any direction on the current stream.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace rt::cuda {

Result<void*> Allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status(StatusCode::kResourceExhausted,
                  "Buffer::Allocate: out of device memory for " + std::to_string(bytes) + " bytes");
  }
  RETURN_IF_ERROR(CudaStatus(err, "cudaMalloc"));
  const Status s = CudaStatus(cudaMemset(p, 0, bytes), "cudaMemset");
  if (!s.ok()) {
    cudaFree(p);
    return s;
  }
  return p;
}

void Free(void* p) { cudaFree(p); }

// Either side may be host memory; a copy that involves the host completes before returning
// (the host buffer may be pageable and reused at once).
Status Copy(Tensor dst, Tensor src) {
  if (dst.data() == src.data() || src.nbytes() == 0) return Status::Ok();
  RT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDefault, Stream()));
  if (dst.device() == Device::kCpu || src.device() == Device::kCpu) {
    RT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(Stream()));
  }
  return Status::Ok();
}

}  // namespace rt::cuda
