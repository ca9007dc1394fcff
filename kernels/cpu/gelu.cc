// GELU (tanh approximation) forward and backward; element math from kernels/element.h.
#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

namespace {

// out[i] = GeluTanh(inp[i]); out may alias inp.
template <typename T>
RT_CPU_CLONES void GeluForwardKernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Store<T>(GeluTanhFast(Load(inp[i])));
}

// dinp[i] (+)= GeluTanhGrad(inp[i]) · dout[i]; dinp may alias dout (each element is read
// before it is written).
template <typename T, bool kAccumulate>
RT_CPU_CLONES void GeluBackwardKernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float d = GeluTanhGradFast(Load(inp[i])) * Load(dout[i]);
    dinp[i] = Store<T>(kAccumulate ? Load(dinp[i]) + d : d);
  }
}

}  // namespace

Status GeluForward(Tensor out, Tensor inp) {
  internal::DispatchFloating(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    GeluForwardKernel<T>(out.data_as<T>(), inp.data_as<T>(), inp.numel());
  });
  return Status::Ok();
}

Status GeluBackward(Tensor dinp, Tensor inp, Tensor dout, bool accumulate) {
  internal::DispatchFloating(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto* kernel = accumulate ? GeluBackwardKernel<T, true> : GeluBackwardKernel<T, false>;
    kernel(dinp.data_as<T>(), inp.data_as<T>(), dout.data_as<T>(), inp.numel());
  });
  return Status::Ok();
}

}  // namespace rt::cpu
