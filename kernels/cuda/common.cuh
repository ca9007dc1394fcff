// Internal to kernels/cuda: error checks, launch geometry, warp/block reductions and the
// storage load/store shared with the CPU kernels (kernels/impl/storage.h, element.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/status.h"
#include "kernels/cuda/stream.h"
#include "kernels/impl/storage.h"

namespace rt::cuda {

using internal::Bf16;
using internal::Half;
using internal::Load;
using internal::Store;

// A CudaError Status for `err` (with the caller's file:line), or OK.
inline Status CudaStatus(cudaError_t err, const char* what,
                         SourceLocation where = SourceLocation::current()) {
  if (err == cudaSuccess) return Status::Ok();
  return ForeignError(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(err),
                      where);
}

// Returns from the enclosing function if a CUDA runtime call failed.
#define RT_CUDA_RETURN_IF_ERROR(call) RETURN_IF_ERROR(::rt::cuda::CudaStatus((call), #call))
// After a kernel launch: returns its launch error, if any.
#define RT_CUDA_RETURN_IF_LAUNCH_ERROR(name) \
  RETURN_IF_ERROR(::rt::cuda::CudaStatus(cudaGetLastError(), name))

inline cudaStream_t Stream() { return CurrentStream(); }

// Blocks of `threads` covering n items (at least 1 block, at most 65535·1024 items per pass:
// kernels use grid-stride loops).
inline unsigned Blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535) b = 65535;
  return static_cast<unsigned>(b);
}

// Column reductions over the rows of a matrix (bias and LayerNorm parameter gradients) run in
// blocks of kColumnTile columns × kRowLanes row lanes.
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 32;

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double WarpSumD(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum / max over the whole block (blockDim.x a multiple of 32, ≤ 1024); every thread gets it.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nw ? part[lane] : 0.0f;
  return WarpSum(v);
}
__device__ __forceinline__ float BlockMax(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nw ? part[lane] : -INFINITY;
  return WarpMax(v);
}

// Calls f(T{}) for the storage type of floating dtype t (host side).
template <typename F>
auto Dispatch(DType t, F&& f) {
  return internal::DispatchFloating(t, static_cast<F&&>(f));
}

}  // namespace rt::cuda
