// Elementwise ops on CUDA: residual add, accumulate, scale, zero, Σx² (double) and conversion.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace rt::cuda {

namespace {

#define RT_GRID_FOR(i, n)                                                                \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void AddKernel(T* out, const T* a, const T* b, int64_t n) {
  RT_GRID_FOR(i, n) { out[i] = Store<T>(Load(a[i]) + Load(b[i])); }
}

template <typename T>
__global__ void AccumulateKernel(T* dst, const T* src, int64_t n) {
  RT_GRID_FOR(i, n) { dst[i] = Store<T>(Load(dst[i]) + Load(src[i])); }
}

template <typename T>
__global__ void ScaleKernel(T* x, float s, int64_t n) {
  RT_GRID_FOR(i, n) { x[i] = Store<T>(Load(x[i]) * s); }
}

// Each block adds its Σx² (in double) to *out.
template <typename T>
__global__ void SumOfSquaresKernel(double* out, const T* x, int64_t n) {
  double s = 0.0;
  RT_GRID_FOR(i, n) {
    const double v = Load(x[i]);
    s += v * v;
  }
  __shared__ double part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  s = WarpSumD(s);
  if (lane == 0) part[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : 0.0;
    s = WarpSumD(s);
    if (lane == 0) atomicAdd(out, s);
  }
}

template <typename D, typename S>
__global__ void ConvertKernel(D* dst, const S* src, int64_t n) {
  RT_GRID_FOR(i, n) { dst[i] = Store<D>(Load(src[i])); }
}

#undef RT_GRID_FOR

}  // namespace

Status Add(Tensor out, Tensor a, Tensor b) {
  const int64_t n = out.numel();
  if (n == 0) return Status::Ok();
  return Dispatch(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AddKernel<T>
        <<<Blocks(n, 256), 256, 0, Stream()>>>(out.data_as<T>(), a.data_as<T>(), b.data_as<T>(), n);
    return CudaStatus(cudaGetLastError(), "AddKernel");
  });
}

Status Accumulate(Tensor dst, Tensor src) {
  const int64_t n = dst.numel();
  if (n == 0) return Status::Ok();
  return Dispatch(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AccumulateKernel<T>
        <<<Blocks(n, 256), 256, 0, Stream()>>>(dst.data_as<T>(), src.data_as<T>(), n);
    return CudaStatus(cudaGetLastError(), "AccumulateKernel");
  });
}

Status Scale(Tensor x, float s) {
  const int64_t n = x.numel();
  if (n == 0) return Status::Ok();
  return Dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ScaleKernel<T><<<Blocks(n, 256), 256, 0, Stream()>>>(x.data_as<T>(), s, n);
    return CudaStatus(cudaGetLastError(), "ScaleKernel");
  });
}

Status Zero(Tensor x) {
  if (x.nbytes() == 0) return Status::Ok();
  return CudaStatus(cudaMemsetAsync(x.data(), 0, x.nbytes(), Stream()), "cudaMemsetAsync");
}

Result<double> SumOfSquares(Tensor x) {
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  double* acc = nullptr;
  RT_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void**>(&acc), sizeof(double), Stream()));
  double host = 0.0;
  auto run = [&]() -> Status {
    RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(acc, 0, sizeof(double), Stream()));
    RETURN_IF_ERROR(Dispatch(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      SumOfSquaresKernel<T><<<Blocks(n, 256), 256, 0, Stream()>>>(acc, x.data_as<T>(), n);
      return CudaStatus(cudaGetLastError(), "SumOfSquaresKernel");
    }));
    return CudaStatus(cudaMemcpyAsync(&host, acc, sizeof(double), cudaMemcpyDeviceToHost, Stream()),
                      "cudaMemcpyAsync");
  };
  const Status s = run();
  const Status freed = CudaStatus(cudaFreeAsync(acc, Stream()), "cudaFreeAsync");
  const Status synced = CudaStatus(cudaStreamSynchronize(Stream()), "cudaStreamSynchronize");
  RETURN_IF_ERROR(s);
  RETURN_IF_ERROR(freed);
  RETURN_IF_ERROR(synced);
  return host;
}

Status Convert(Tensor dst, Tensor src) {
  if (dst.dtype() == src.dtype()) return cuda::Copy(dst, src);
  const int64_t n = src.numel();
  if (n == 0) return Status::Ok();
  return Dispatch(dst.dtype(), [&](auto dtag) {
    return Dispatch(src.dtype(), [&](auto stag) {
      using D = decltype(dtag);
      using S = decltype(stag);
      ConvertKernel<D, S>
          <<<Blocks(n, 256), 256, 0, Stream()>>>(dst.data_as<D>(), src.data_as<S>(), n);
      return CudaStatus(cudaGetLastError(), "ConvertKernel");
    });
  });
}

}  // namespace rt::cuda
