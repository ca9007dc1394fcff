// Fused AdamW on CUDA: fp32 master weights, element math AdamWElement from kernels/element.h
// (the same as the CPU kernel), optional rounded bf16/f16 working copy.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace rt::cuda {

namespace {

template <typename G, typename C>
__global__ void AdamWKernel(float* p, const G* g, float* m, float* v, C* copy, int64_t n, float lr,
                            float beta1, float beta2, float bc1, float bc2, float eps, float wd,
                            float grad_scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float mi = m[i], vi = v[i];
    const float np =
        AdamWElement(p[i], Load(g[i]) * grad_scale, &mi, &vi, lr, beta1, beta2, bc1, bc2, eps, wd);
    p[i] = np;
    m[i] = mi;
    v[i] = vi;
    if (copy != nullptr) copy[i] = Store<C>(np);
  }
}

}  // namespace

Status AdamW(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_copy,
             const AdamWParams& hp) {
  const int64_t n = param.numel();
  if (n == 0) return Status::Ok();
  const float bc1 = static_cast<float>(
      1.0 - std::pow(static_cast<double>(hp.beta1), static_cast<double>(hp.step)));
  const float bc2 = static_cast<float>(
      1.0 - std::pow(static_cast<double>(hp.beta2), static_cast<double>(hp.step)));
  return Dispatch(grad.dtype(), [&](auto gtag) {
    using G = decltype(gtag);
    auto run = [&](auto ctag) {
      using C = decltype(ctag);
      AdamWKernel<G, C><<<Blocks(n, 256), 256, 0, Stream()>>>(
          param.data_as<float>(), grad.data_as<G>(), m.data_as<float>(), v.data_as<float>(),
          param_copy.defined() ? param_copy.data_as<C>() : nullptr, n, hp.lr, hp.beta1, hp.beta2,
          bc1, bc2, hp.eps, hp.weight_decay, hp.grad_scale);
      return CudaStatus(cudaGetLastError(), "AdamWKernel");
    };
    return param_copy.defined() && param_copy.dtype() == DType::kF16 ? run(Half{}) : run(Bf16{});
  });
}

}  // namespace rt::cuda
