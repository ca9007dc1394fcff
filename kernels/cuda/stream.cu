// The per-thread current stream (kernels/cuda/stream.h).
#include "kernels/cuda/common.cuh"
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

bool CudaDeviceAvailable() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

}  // namespace rt
