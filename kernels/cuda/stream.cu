// The per-thread current stream (kernels/cuda/stream.h) and the backend's availability.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/stream.h"

namespace rt {

namespace {
thread_local CudaStream current_stream = nullptr;
}  // namespace

CudaStream CurrentStream() { return current_stream; }

void SetCurrentStream(CudaStream stream) { current_stream = stream; }

Status SynchronizeCurrentStream() {
  return cuda::CudaStatus(cudaStreamSynchronize(current_stream), "cudaStreamSynchronize");
}

bool CudaDeviceAvailable() { return cuda::Available().ok(); }

Result<int> CudaDeviceCount() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return Unavailable(std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err));
  }
  return n;
}

Status SetCudaDevice(int index) {
  ASSIGN_OR_RETURN(const int n, CudaDeviceCount());
  if (index < 0 || index >= n)
    return InvalidArgument("CUDA device " + std::to_string(index) + " does not exist (" +
                           std::to_string(n) + " devices)");
  return cuda::CudaStatus(cudaSetDevice(index), "cudaSetDevice");
}

namespace cuda {

Status Available() {
  Result<int> n = CudaDeviceCount();
  if (!n.ok()) return n.status().WithContext("no usable CUDA device");
  if (*n == 0) return Unavailable("no usable CUDA device: the CUDA runtime reports 0 devices");
  return Status::Ok();
}

Status Synchronize() { return SynchronizeCurrentStream(); }

}  // namespace cuda

}  // namespace rt
