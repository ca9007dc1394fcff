// Token and position embeddings on CUDA (after llm.c's encoder.cuh). The backward passes loop
// over tokens/batches in order per channel, so they are deterministic and need no atomics.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace rt::cuda {

namespace {

template <typename T>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* tokens, const T* wte, int64_t n,
                                       int64_t v_local, int64_t c, int64_t vocab_start) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * c;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / c, k = idx % c;
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
    out[idx] = (row >= 0 && row < v_local) ? wte[row * c + k] : Store<T>(0.0f);
  }
}

// One thread per channel k: dwte[row(i), k] += dout[i, k] for the tokens in order.
template <typename T>
__global__ void EmbeddingBackwardKernel(T* dwte, const T* dout, const int32_t* tokens, int64_t n,
                                        int64_t v_local, int64_t c, int64_t vocab_start) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < c;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
      if (row < 0 || row >= v_local) continue;
      T* dw = dwte + row * c + k;
      *dw = Store<T>(Load(*dw) + Load(dout[i * c + k]));
    }
  }
}

template <typename T>
__global__ void PositionAddKernel(T* out, const T* wpe, int64_t b_len, int64_t t_len, int64_t c) {
  const int64_t total = b_len * t_len * c;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tc = idx % (t_len * c);
    out[idx] = Store<T>(Load(out[idx]) + Load(wpe[tc]));
  }
}

// One thread per (t, k): dwpe[t, k] += Σ_b dout[b, t, k].
template <typename T>
__global__ void PositionBackwardKernel(T* dwpe, const T* dout, int64_t b_len, int64_t t_len,
                                       int64_t c) {
  for (int64_t tc = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; tc < t_len * c;
       tc += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t b = 0; b < b_len; ++b) s += Load(dout[b * t_len * c + tc]);
    dwpe[tc] = Store<T>(Load(dwpe[tc]) + s);
  }
}

}  // namespace

Status EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, int64_t vocab_start) {
  const int64_t n = tokens.numel(), c = wte.dim(1);
  if (n * c == 0) return Status::Ok();
  return Dispatch(wte.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EmbeddingForwardKernel<T>
        <<<Blocks(n * c, 256), 256, 0, Stream()>>>(out.data_as<T>(), tokens.data_as<int32_t>(),
                                                   wte.data_as<T>(), n, wte.dim(0), c, vocab_start);
    return CudaStatus(cudaGetLastError(), "EmbeddingForwardKernel");
  });
}

Status EmbeddingBackward(Tensor dwte, Tensor dout, Tensor tokens, int64_t vocab_start) {
  const int64_t n = tokens.numel(), c = dwte.dim(1);
  if (n * c == 0) return Status::Ok();
  return Dispatch(dwte.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EmbeddingBackwardKernel<T><<<Blocks(c, 128), 128, 0, Stream()>>>(
        dwte.data_as<T>(), dout.data_as<T>(), tokens.data_as<int32_t>(), n, dwte.dim(0), c,
        vocab_start);
    return CudaStatus(cudaGetLastError(), "EmbeddingBackwardKernel");
  });
}

Status PositionEmbeddingAdd(Tensor out, Tensor wpe, int64_t pos_start) {
  const int64_t t_len = out.dim(out.ndim() - 2), c = out.shape().last();
  const int64_t b_len = t_len == 0 ? 0 : out.shape().rows() / t_len;
  if (out.numel() == 0) return Status::Ok();
  return Dispatch(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    PositionAddKernel<T><<<Blocks(out.numel(), 256), 256, 0, Stream()>>>(
        out.data_as<T>(), wpe.data_as<T>() + pos_start * c, b_len, t_len, c);
    return CudaStatus(cudaGetLastError(), "PositionAddKernel");
  });
}

Status PositionEmbeddingBackward(Tensor dwpe, Tensor dout, int64_t pos_start) {
  const int64_t t_len = dout.dim(dout.ndim() - 2), c = dout.shape().last();
  const int64_t b_len = t_len == 0 ? 0 : dout.shape().rows() / t_len;
  if (dout.numel() == 0) return Status::Ok();
  return Dispatch(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    PositionBackwardKernel<T><<<Blocks(t_len * c, 256), 256, 0, Stream()>>>(
        dwpe.data_as<T>() + pos_start * c, dout.data_as<T>(), b_len, t_len, c);
    return CudaStatus(cudaGetLastError(), "PositionBackwardKernel");
  });
}

}  // namespace rt::cuda
