// GELU (tanh approximation) on CUDA; element math from kernels/element.h, as on the CPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace rt::cuda {

namespace {

template <typename T>
__global__ void GeluForwardKernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = Store<T>(GeluTanhFast(Load(inp[i])));
  }
}

template <typename T>
__global__ void GeluBackwardKernel(T* dinp, const T* inp, const T* dout, int64_t n,
                                   bool accumulate) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float d = GeluTanhGradFast(Load(inp[i])) * Load(dout[i]);
    dinp[i] = Store<T>(accumulate ? Load(dinp[i]) + d : d);
  }
}

}  // namespace

Status GeluForward(Tensor out, Tensor inp) {
  const int64_t n = inp.numel();
  if (n == 0) return Status::Ok();
  return Dispatch(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    GeluForwardKernel<T>
        <<<Blocks(n, 256), 256, 0, Stream()>>>(out.data_as<T>(), inp.data_as<T>(), n);
    return CudaStatus(cudaGetLastError(), "GeluForwardKernel");
  });
}

Status GeluBackward(Tensor dinp, Tensor inp, Tensor dout, bool accumulate) {
  const int64_t n = inp.numel();
  if (n == 0) return Status::Ok();
  return Dispatch(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    GeluBackwardKernel<T><<<Blocks(n, 256), 256, 0, Stream()>>>(dinp.data_as<T>(), inp.data_as<T>(),
                                                                dout.data_as<T>(), n, accumulate);
    return CudaStatus(cudaGetLastError(), "GeluBackwardKernel");
  });
}

}  // namespace rt::cuda
