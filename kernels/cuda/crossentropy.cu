// Fused softmax cross-entropy on CUDA (after llm.c's fused_classifier.cuh): one block per row;
// dlogits may alias logits (every thread reads its elements before any is written). A target
// outside [0, V) gives a NaN loss (the CPU backend reports it as InvalidArgument instead).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace rt::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void CrossEntropyKernel(float* losses, T* dlogits, const T* logits,
                                   const int32_t* targets, int64_t v, float dloss) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * v;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, Load(x[j]));
  mx = BlockMax(mx);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += expf(Load(x[j]) - mx);
  s = BlockSum(s);
  const int32_t tg = targets[row];
  const bool valid = tg >= 0 && tg < v;
  if (threadIdx.x == 0) {
    losses[row] = valid ? logf(s) - (Load(x[tg]) - mx) : NAN;
  }
  if (dlogits == nullptr) return;
  __syncthreads();  // the loss read x[tg] before anyone overwrites it (aliasing)
  T* d = dlogits + row * v;
  const float inv = 1.0f / s;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float p = expf(Load(x[j]) - mx) * inv;
    d[j] = Store<T>((p - (j == tg ? 1.0f : 0.0f)) * dloss);
  }
}

}  // namespace

Status SoftmaxCrossEntropy(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                           float dloss) {
  const int64_t v = logits.shape().last(), n = logits.shape().rows();
  if (n == 0 || v == 0) return Status::Ok();
  if (n > 2147483647) return InvalidArgument("SoftmaxCrossEntropy: too many rows for CUDA");
  return Dispatch(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    CrossEntropyKernel<T><<<static_cast<unsigned>(n), kThreads, 0, Stream()>>>(
        losses.data_as<float>(), dlogits.defined() ? dlogits.data_as<T>() : nullptr,
        logits.data_as<T>(), targets.data_as<int32_t>(), v, dloss);
    return CudaStatus(cudaGetLastError(), "CrossEntropyKernel");
  });
}

}  // namespace rt::cuda
