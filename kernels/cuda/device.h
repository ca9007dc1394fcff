// Which CUDA device the calling thread uses: for processes that own one GPU each (one rank per
// local GPU). Includable from plain C++ (no CUDA headers needed); the functions exist only in
// builds with RINGTRAIN_WITH_CUDA.
#pragma once

#include "base/status.h"

namespace rt {

// The number of CUDA devices the runtime reports here. Errors: Unavailable naming the runtime's
// error (no driver, no device).
Result<int> CudaDeviceCount();

// Makes device `index` the calling thread's current device (cudaSetDevice): later allocations
// and kernels of this thread go there. Errors: InvalidArgument for an index outside the devices;
// CudaError naming the runtime's error.
Status SetCudaDevice(int index);

}  // namespace rt
