// LayerNorm on CUDA (after llm.c's layernorm.cuh): one warp per row, fp32 statistics; the
// parameter gradients by a column reduction over the rows (deterministic, no atomics).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace rt::cuda {

namespace {

constexpr float kEps = 1e-5f;

template <typename T>
__global__ void LayerNormForwardKernel(T* out, float* mean, float* rstd, const T* inp,
                                       const T* weight, const T* bias, int64_t n, int64_t c) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* x = inp + row * c;
  float s = 0.0f;
  for (int64_t i = lane; i < c; i += 32) s += Load(x[i]);
  const float m = WarpSum(s) / static_cast<float>(c);
  float v = 0.0f;
  for (int64_t i = lane; i < c; i += 32) {
    const float d = Load(x[i]) - m;
    v += d * d;
  }
  const float r = rsqrtf(WarpSum(v) / static_cast<float>(c) + kEps);
  T* y = out + row * c;
  for (int64_t i = lane; i < c; i += 32) {
    y[i] = Store<T>((Load(x[i]) - m) * r * Load(weight[i]) + Load(bias[i]));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dinp[row] += (w·dout − mean(w·dout) − norm·mean(w·dout·norm))·rstd; one warp per row.
template <typename T>
__global__ void LayerNormBackwardInputKernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                             const float* mean, const float* rstd, int64_t n,
                                             int64_t c) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* x = inp + row * c;
  const T* g = dout + row * c;
  const float m = mean[row], r = rstd[row];
  float a = 0.0f, b = 0.0f;
  for (int64_t i = lane; i < c; i += 32) {
    const float dn = Load(weight[i]) * Load(g[i]);
    a += dn;
    b += dn * (Load(x[i]) - m) * r;
  }
  a = WarpSum(a) / static_cast<float>(c);
  b = WarpSum(b) / static_cast<float>(c);
  T* dx = dinp + row * c;
  for (int64_t i = lane; i < c; i += 32) {
    const float norm = (Load(x[i]) - m) * r;
    const float dn = Load(weight[i]) * Load(g[i]);
    dx[i] = Store<T>(Load(dx[i]) + (dn - a - norm * b) * r);
  }
}

// dweight[i] += Σ_rows norm·dout; dbias[i] += Σ_rows dout. Blocks of kColumnTile channels ×
// kRowLanes row lanes: thread (x, y) sums rows y, y+kRowLanes, ... of its channel; the partial
// sums are added in a fixed order (deterministic, no atomics).
template <typename T>
__global__ void LayerNormBackwardParamsKernel(T* dweight, T* dbias, const T* dout, const T* inp,
                                              const float* mean, const float* rstd, int64_t n,
                                              int64_t c) {
  __shared__ float part_w[kRowLanes][kColumnTile + 1];
  __shared__ float part_b[kRowLanes][kColumnTile + 1];
  for (int64_t base = blockIdx.x * static_cast<int64_t>(kColumnTile); base < c;
       base += static_cast<int64_t>(gridDim.x) * kColumnTile) {
    const int64_t i = base + threadIdx.x;
    float dw = 0.0f, db = 0.0f;
    if (i < c) {
      for (int64_t r = threadIdx.y; r < n; r += kRowLanes) {
        const float g = Load(dout[r * c + i]);
        db += g;
        dw += (Load(inp[r * c + i]) - mean[r]) * rstd[r] * g;
      }
    }
    part_w[threadIdx.y][threadIdx.x] = dw;
    part_b[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y == 0 && i < c) {
      float sw = 0.0f, sb = 0.0f;
      for (int y = 0; y < kRowLanes; ++y) {
        sw += part_w[y][threadIdx.x];
        sb += part_b[y][threadIdx.x];
      }
      dweight[i] = Store<T>(Load(dweight[i]) + sw);
      dbias[i] = Store<T>(Load(dbias[i]) + sb);
    }
    __syncthreads();
  }
}

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

}  // namespace

Status LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias) {
  const int64_t c = inp.shape().last(), n = inp.shape().rows();
  if (n == 0) return Status::Ok();
  return Dispatch(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const unsigned blocks = static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock);
    LayerNormForwardKernel<T><<<blocks, kThreads, 0, Stream()>>>(
        out.data_as<T>(), mean.data_as<float>(), rstd.data_as<float>(), inp.data_as<T>(),
        weight.data_as<T>(), bias.data_as<T>(), n, c);
    return CudaStatus(cudaGetLastError(), "LayerNormForwardKernel");
  });
}

Status LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                         Tensor weight, Tensor mean, Tensor rstd) {
  const int64_t c = inp.shape().last(), n = inp.shape().rows();
  if (n == 0) return Status::Ok();
  return Dispatch(inp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (dinp.defined()) {
      const unsigned blocks = static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock);
      LayerNormBackwardInputKernel<T><<<blocks, kThreads, 0, Stream()>>>(
          dinp.data_as<T>(), dout.data_as<T>(), inp.data_as<T>(), weight.data_as<T>(),
          mean.data_as<float>(), rstd.data_as<float>(), n, c);
      RT_CUDA_RETURN_IF_LAUNCH_ERROR("LayerNormBackwardInputKernel");
    }
    LayerNormBackwardParamsKernel<T>
        <<<Blocks(c, kColumnTile), dim3(kColumnTile, kRowLanes), 0, Stream()>>>(
            dweight.data_as<T>(), dbias.data_as<T>(), dout.data_as<T>(), inp.data_as<T>(),
            mean.data_as<float>(), rstd.data_as<float>(), n, c);
    return CudaStatus(cudaGetLastError(), "LayerNormBackwardParamsKernel");
  });
}

}  // namespace rt::cuda
