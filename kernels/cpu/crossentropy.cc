// Fused softmax + cross-entropy over rows of logits (after llm.c's fused classifier): the loss
// per row and, optionally, the gradient (softmax − onehot)·dloss written over the logits.
#include <cmath>
#include <string>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

namespace {

// losses[N], dlogits[N,V] (nullable, may alias logits) from logits[N,V] and targets[N].
template <typename T>
RT_CPU_CLONES void CrossEntropyKernel(float* losses, T* dlogits, const T* logits,
                                      const int32_t* targets, int64_t n, int64_t v, float dloss) {
  float* e = Scratch(0, static_cast<size_t>(v));
  for (int64_t i = 0; i < n; ++i) {
    LoadRow(e, logits + i * v, v);
    const float mx = MaxF32(e, v);
    const float x_target = e[targets[i]];
    for (int64_t j = 0; j < v; ++j) e[j] = ExpFast(e[j] - mx);
    const float sum = SumF32(e, v);
    losses[i] = std::log(sum) - (x_target - mx);
    if (dlogits == nullptr) continue;
    const float s = dloss / sum;
    T* d = dlogits + i * v;
    for (int64_t k = 0; k < v; ++k) d[k] = Store<T>(e[k] * s);
    d[targets[i]] = Store<T>((e[targets[i]] / sum - 1.0f) * dloss);
  }
}

}  // namespace

Status SoftmaxCrossEntropy(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                           float dloss) {
  const int64_t v = logits.shape().last(), n = logits.shape().rows();
  const int32_t* tg = targets.data_as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (tg[i] < 0 || tg[i] >= v) {
      return InvalidArgument("SoftmaxCrossEntropy: targets[" + std::to_string(i) +
                             "] = " + std::to_string(tg[i]) + " is outside [0, " +
                             std::to_string(v) + ") of logits " + logits.shape().ToString());
    }
  }
  if (v == 0) return Status::Ok();
  internal::DispatchFloating(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    CrossEntropyKernel<T>(losses.data_as<float>(),
                          dlogits.defined() ? dlogits.data_as<T>() : nullptr, logits.data_as<T>(),
                          tg, n, v, dloss);
  });
  return Status::Ok();
}

}  // namespace rt::cpu
