// The current CUDA stream of the calling thread: every CUDA op in kernels/ops.h is enqueued on
// it. Includable from plain C++ (no CUDA headers needed); the functions exist only in builds
// with RINGTRAIN_WITH_CUDA.
#pragma once

#include "base/status.h"

// As the CUDA runtime declares it (cudaStream_t is a pointer to this opaque struct).
struct CUstream_st;

namespace rt {

using CudaStream = CUstream_st*;

// The calling thread's current stream; nullptr (the legacy default stream) until set.
CudaStream CurrentStream();
// Makes `stream` the calling thread's current stream. The caller keeps ownership.
void SetCurrentStream(CudaStream stream);

// Sets the current stream for a scope and restores the previous one on exit.
class StreamGuard {
 public:
  explicit StreamGuard(CudaStream stream) : previous_(CurrentStream()) { SetCurrentStream(stream); }
  ~StreamGuard() { SetCurrentStream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  CudaStream previous_;
};

// Waits for everything enqueued on the current stream; CudaError names a failed kernel.
Status SynchronizeCurrentStream();

// True when the CUDA runtime reports at least one usable device.
bool CudaDeviceAvailable();

}  // namespace rt
