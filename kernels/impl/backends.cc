// The one place where backends are registered (after ggml's backend registry): the CPU table
// always, the CUDA table only in builds with RINGTRAIN_WITH_CUDA.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/impl/backend.h"
#if defined(RINGTRAIN_WITH_CUDA)
#include "kernels/cuda/cuda_ops.h"
#endif

namespace rt::internal {

namespace {

#define RT_BACKEND_TABLE(ns, label)                                                         \
  KernelBackend {                                                                           \
    .name = label, .available = ns::Available, .synchronize = ns::Synchronize,              \
    .allocate = ns::Allocate, .free = ns::Free, .copy = ns::Copy, .gemm = ns::Gemm,         \
    .matmul_forward = ns::MatmulForward, .matmul_backward = ns::MatmulBackward,             \
    .layernorm_forward = ns::LayerNormForward, .layernorm_backward = ns::LayerNormBackward, \
    .gelu_forward = ns::GeluForward, .gelu_backward = ns::GeluBackward,                     \
    .attention_forward = ns::AttentionForward, .attention_backward = ns::AttentionBackward, \
    .embedding_forward = ns::EmbeddingForward, .embedding_backward = ns::EmbeddingBackward, \
    .position_embedding_add = ns::PositionEmbeddingAdd,                                     \
    .position_embedding_backward = ns::PositionEmbeddingBackward,                           \
    .softmax_cross_entropy = ns::SoftmaxCrossEntropy, .add = ns::Add,                       \
    .accumulate = ns::Accumulate, .scale = ns::Scale, .zero = ns::Zero,                     \
    .sum_of_squares = ns::SumOfSquares, .adamw = ns::AdamW, .convert = ns::Convert,         \
  }

const KernelBackend kCpuBackend = RT_BACKEND_TABLE(rt::cpu, "cpu");
#if defined(RINGTRAIN_WITH_CUDA)
const KernelBackend kCudaBackend = RT_BACKEND_TABLE(rt::cuda, "cuda");
#endif

#undef RT_BACKEND_TABLE

}  // namespace

const KernelBackend* BackendFor(Device device) {
  switch (device) {
    case Device::kCpu:
      return &kCpuBackend;
    case Device::kCuda:
#if defined(RINGTRAIN_WITH_CUDA)
      return &kCudaBackend;
#else
      return nullptr;
#endif
  }
  return nullptr;
}

}  // namespace rt::internal
