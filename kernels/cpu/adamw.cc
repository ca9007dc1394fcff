// Fused AdamW on fp32 master weights (element math: AdamWElement in kernels/element.h), with
// the optional rounded low-precision working copy written in the same pass.
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

namespace {

// One pass over n elements; C is the copy's storage type (unused when copy is null).
template <typename G, typename C>
RT_CPU_CLONES void AdamWKernel(float* __restrict p, const G* __restrict g, float* __restrict m,
                               float* __restrict v, C* __restrict copy, int64_t n, float lr,
                               float beta1, float beta2, float bc1, float bc2, float eps, float wd,
                               float grad_scale) {
  if (copy == nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      p[i] = AdamWElement(p[i], Load(g[i]) * grad_scale, &m[i], &v[i], lr, beta1, beta2, bc1, bc2,
                          eps, wd);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float np = AdamWElement(p[i], Load(g[i]) * grad_scale, &m[i], &v[i], lr, beta1, beta2,
                                    bc1, bc2, eps, wd);
      p[i] = np;
      copy[i] = Store<C>(np);
    }
  }
}

}  // namespace

Status AdamW(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_copy,
             const AdamWParams& hp) {
  const float bc1 = static_cast<float>(
      1.0 - std::pow(static_cast<double>(hp.beta1), static_cast<double>(hp.step)));
  const float bc2 = static_cast<float>(
      1.0 - std::pow(static_cast<double>(hp.beta2), static_cast<double>(hp.step)));
  const int64_t n = param.numel();
  internal::DispatchFloating(grad.dtype(), [&](auto gtag) {
    using G = decltype(gtag);
    auto run = [&](auto ctag) {
      using C = decltype(ctag);
      AdamWKernel<G, C>(param.data_as<float>(), grad.data_as<G>(), m.data_as<float>(),
                        v.data_as<float>(),
                        param_copy.defined() ? param_copy.data_as<C>() : nullptr, n, hp.lr,
                        hp.beta1, hp.beta2, bc1, bc2, hp.eps, hp.weight_decay, hp.grad_scale);
    };
    if (param_copy.defined() && param_copy.dtype() == DType::kF16) {
      run(Half{});
    } else {
      run(Bf16{});
    }
  });
  return Status::Ok();
}

}  // namespace rt::cpu
