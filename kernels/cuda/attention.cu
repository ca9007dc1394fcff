// Causal multi-head self-attention on CUDA (after llm.c's attention.cuh): qkv is permuted into
// fp32 q, k, v [B,H,T,hs] scratch, the score and value products run as strided-batched cuBLAS
// GEMMs (fp32), the causal softmax (row max subtracted) and its backward are one warp per row.

#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cuda_ops.h"

namespace rt::cuda {

namespace {

Status BlasStatus(cublasStatus_t s, const char* what,
                  SourceLocation where = SourceLocation::current()) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return ForeignError(StatusCode::kCublasError,
                      std::string(what) + ": " + Cublas().cublasGetStatusString(s), where);
}

// The calling thread's cuBLAS handle, created on first use. Its default math mode
// (CUBLAS_DEFAULT_MATH) keeps SGEMM in full fp32: TF32 only with CUBLAS_TF32_TENSOR_OP_MATH.
struct BlasContext {
  cublasHandle_t handle = nullptr;
  ~BlasContext() {
    if (handle) Cublas().cublasDestroy(handle);
  }
};

Result<cublasHandle_t> Handle() {
  thread_local BlasContext ctx;
  if (ctx.handle == nullptr) {
    RETURN_IF_ERROR(LoadCublas().status());
    RETURN_IF_ERROR(BlasStatus(Cublas().cublasCreate(&ctx.handle), "cublasCreate"));
  }
  RETURN_IF_ERROR(BlasStatus(Cublas().cublasSetStream(ctx.handle, Stream()), "cublasSetStream"));
  return ctx.handle;
}

// Row-major batched C[m,n] = alpha·op(A)·op(B) + beta·C in fp32 (column-major Cᵀ = op(B)ᵀop(A)ᵀ).
Status BatchedGemm(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, float alpha,
                   const float* a, int lda, int64_t sa, const float* b, int ldb, int64_t sb,
                   float beta, float* c, int ldc, int64_t sc, int batch) {
  return BlasStatus(Cublas().cublasSgemmStridedBatched(
                        h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                        &alpha, b, ldb, sb, a, lda, sa, &beta, c, ldc, sc, batch),
                    "cublasSgemmStridedBatched");
}

// qkv[B,T,3C] (or dout[B,T,C] with parts = 1) → parts × [B,H,T,hs] fp32.
template <typename T>
__global__ void PermuteKernel(float* dst, const T* src, int64_t b_len, int64_t t_len, int64_t nh,
                              int64_t hs, int parts) {
  const int64_t c = nh * hs, per_part = b_len * t_len * c, total = per_part * parts;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // idx = ((p·B + b)·H + h)·T·hs + t·hs + e
    const int64_t e = idx % hs;
    const int64_t t = (idx / hs) % t_len;
    const int64_t h = (idx / (hs * t_len)) % nh;
    const int64_t b = (idx / (hs * t_len * nh)) % b_len;
    const int64_t p = idx / per_part;
    dst[idx] = Load(src[(b * t_len + t) * parts * c + p * c + h * hs + e]);
  }
}

// parts × [B,H,T,hs] fp32 → dst[B,T,parts·C]: assigned, or added when accumulate.
template <typename T>
__global__ void UnpermuteKernel(T* dst, const float* src, int64_t b_len, int64_t t_len, int64_t nh,
                                int64_t hs, int parts, bool accumulate) {
  const int64_t c = nh * hs, per_part = b_len * t_len * c, total = per_part * parts;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = idx % hs;
    const int64_t t = (idx / hs) % t_len;
    const int64_t h = (idx / (hs * t_len)) % nh;
    const int64_t b = (idx / (hs * t_len * nh)) % b_len;
    const int64_t p = idx / per_part;
    T* d = dst + (b * t_len + t) * parts * c + p * c + h * hs + e;
    *d = Store<T>(accumulate ? Load(*d) + src[idx] : src[idx]);
  }
}

// In place on att rows (already scaled scores): causal softmax, zeros above the diagonal.
__global__ void CausalSoftmaxKernel(float* att, int64_t rows, int64_t t_len) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t t = row % t_len;
  float* a = att + row * t_len;
  float mx = -INFINITY;
  for (int64_t j = lane; j <= t; j += 32) mx = fmaxf(mx, a[j]);
  mx = WarpMax(mx);
  float s = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) s += expf(a[j] - mx);
  const float inv = 1.0f / WarpSum(s);
  for (int64_t j = lane; j < t_len; j += 32) a[j] = j <= t ? expf(a[j] - mx) * inv : 0.0f;
}

// datt ← scale·att·(datt − Σ att·datt) over the causal prefix, zeros above the diagonal.
__global__ void CausalSoftmaxBackwardKernel(float* datt, const float* att, int64_t rows,
                                            int64_t t_len, float scale) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t t = row % t_len;
  float* d = datt + row * t_len;
  const float* a = att + row * t_len;
  float dot = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) dot += a[j] * d[j];
  dot = WarpSum(dot);
  for (int64_t j = lane; j < t_len; j += 32) d[j] = j <= t ? scale * a[j] * (d[j] - dot) : 0.0f;
}

// Stream-ordered fp32 scratch freed at scope exit.
class Scratch {
 public:
  Status Allocate(int64_t floats) {
    return CudaStatus(
        cudaMallocAsync(reinterpret_cast<void**>(&p_), floats * sizeof(float), Stream()),
        "cudaMallocAsync");
  }
  ~Scratch() {
    if (p_) cudaFreeAsync(p_, Stream());
  }
  float* get() const { return p_; }

 private:
  float* p_ = nullptr;
};

constexpr int kThreads = 256;

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
}

}  // namespace

Status AttentionForward(Tensor out, Tensor att, Tensor qkv, int n_head) {
  const int64_t b_len = qkv.dim(0), t_len = qkv.dim(1), c = qkv.dim(2) / 3, hs = c / n_head;
  const int64_t bt = b_len * t_len * c;
  if (bt == 0) return Status::Ok();
  ASSIGN_OR_RETURN(cublasHandle_t h, Handle());
  Scratch buf;
  RETURN_IF_ERROR(buf.Allocate(4 * bt));  // q, k, v, y
  float* q = buf.get();
  float* k = q + bt;
  float* v = k + bt;
  float* y = v + bt;
  const int batch = static_cast<int>(b_len * n_head);
  const int ti = static_cast<int>(t_len), hi = static_cast<int>(hs);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* a = att.data_as<float>();
  return Dispatch(qkv.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    PermuteKernel<T><<<Blocks(3 * bt, kThreads), kThreads, 0, Stream()>>>(
        q, qkv.data_as<T>(), b_len, t_len, n_head, hs, 3);
    RT_CUDA_RETURN_IF_LAUNCH_ERROR("PermuteKernel");
    RETURN_IF_ERROR(BatchedGemm(h, false, true, ti, ti, hi, scale, q, hi, t_len * hs, k, hi,
                                t_len * hs, 0.0f, a, ti, t_len * t_len, batch));
    CausalSoftmaxKernel<<<RowBlocks(b_len * n_head * t_len), kThreads, 0, Stream()>>>(
        a, b_len * n_head * t_len, t_len);
    RT_CUDA_RETURN_IF_LAUNCH_ERROR("CausalSoftmaxKernel");
    RETURN_IF_ERROR(BatchedGemm(h, false, false, ti, hi, ti, 1.0f, a, ti, t_len * t_len, v, hi,
                                t_len * hs, 0.0f, y, hi, t_len * hs, batch));
    UnpermuteKernel<T><<<Blocks(bt, kThreads), kThreads, 0, Stream()>>>(
        out.data_as<T>(), y, b_len, t_len, n_head, hs, 1, false);
    return CudaStatus(cudaGetLastError(), "UnpermuteKernel");
  });
}

Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int n_head,
                         bool accumulate) {
  const int64_t b_len = qkv.dim(0), t_len = qkv.dim(1), c = qkv.dim(2) / 3, hs = c / n_head;
  const int64_t bt = b_len * t_len * c, tt = b_len * n_head * t_len * t_len;
  if (bt == 0) return Status::Ok();
  ASSIGN_OR_RETURN(cublasHandle_t h, Handle());
  Scratch buf;
  RETURN_IF_ERROR(buf.Allocate(7 * bt + tt));  // q, k, v, dy, dq, dk, dv, datt
  float* q = buf.get();
  float* k = q + bt;
  float* v = k + bt;
  float* dy = v + bt;
  float* dq = dy + bt;
  float* dk = dq + bt;
  float* dv = dk + bt;
  float* datt = dv + bt;
  const int batch = static_cast<int>(b_len * n_head);
  const int ti = static_cast<int>(t_len), hi = static_cast<int>(hs);
  const int64_t sq = t_len * hs, sa = t_len * t_len;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const float* a = att.data_as<float>();
  return Dispatch(qkv.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    PermuteKernel<T><<<Blocks(3 * bt, kThreads), kThreads, 0, Stream()>>>(
        q, qkv.data_as<T>(), b_len, t_len, n_head, hs, 3);
    RT_CUDA_RETURN_IF_LAUNCH_ERROR("PermuteKernel");
    PermuteKernel<T><<<Blocks(bt, kThreads), kThreads, 0, Stream()>>>(dy, dout.data_as<T>(), b_len,
                                                                      t_len, n_head, hs, 1);
    RT_CUDA_RETURN_IF_LAUNCH_ERROR("PermuteKernel");
    // datt = dy·vᵀ; dv = attᵀ·dy.
    RETURN_IF_ERROR(BatchedGemm(h, false, true, ti, ti, hi, 1.0f, dy, hi, sq, v, hi, sq, 0.0f, datt,
                                ti, sa, batch));
    RETURN_IF_ERROR(BatchedGemm(h, true, false, ti, hi, ti, 1.0f, a, ti, sa, dy, hi, sq, 0.0f, dv,
                                hi, sq, batch));
    CausalSoftmaxBackwardKernel<<<RowBlocks(b_len * n_head * t_len), kThreads, 0, Stream()>>>(
        datt, a, b_len * n_head * t_len, t_len, scale);
    RT_CUDA_RETURN_IF_LAUNCH_ERROR("CausalSoftmaxBackwardKernel");
    // dq = dpre·k; dk = dpreᵀ·q.
    RETURN_IF_ERROR(BatchedGemm(h, false, false, ti, hi, ti, 1.0f, datt, ti, sa, k, hi, sq, 0.0f,
                                dq, hi, sq, batch));
    RETURN_IF_ERROR(BatchedGemm(h, true, false, ti, hi, ti, 1.0f, datt, ti, sa, q, hi, sq, 0.0f, dk,
                                hi, sq, batch));
    UnpermuteKernel<T><<<Blocks(3 * bt, kThreads), kThreads, 0, Stream()>>>(
        dqkv.data_as<T>(), dq, b_len, t_len, n_head, hs, 3, accumulate);
    return CudaStatus(cudaGetLastError(), "UnpermuteKernel");
  });
}

}  // namespace rt::cuda
