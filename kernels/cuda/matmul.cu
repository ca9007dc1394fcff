// GEMM and the Linear layer on CUDA through cuBLASLt (f32, bf16, f16 storage; fp32 compute),
// the bias added by the matmul epilogue; the bias gradient by a column-sum kernel.

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cuda_ops.h"

namespace rt::cuda {

namespace {

Status LtStatus(cublasStatus_t s, const char* what,
                SourceLocation where = SourceLocation::current()) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return ForeignError(StatusCode::kCublasError,
                      std::string(what) + ": " + Cublas().cublasLtGetStatusString(s), where);
}
#define RT_LT_RETURN_IF_ERROR(call) RETURN_IF_ERROR(LtStatus((call), #call))

constexpr size_t kWorkspaceBytes = 32u << 20;

// What decides cuBLASLt's choice of algorithm for one GEMM: dtype, transposes, sizes, leading
// dimensions, bias epilogue and the operands' alignments.
struct AlgoKey {
  DType dtype;
  bool ta, tb, bias;
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t align_a, align_b, align_c, align_bias;
  bool operator<(const AlgoKey& o) const {
    return std::tie(dtype, ta, tb, bias, m, n, k, lda, ldb, ldc, align_a, align_b, align_c,
                    align_bias) < std::tie(o.dtype, o.ta, o.tb, o.bias, o.m, o.n, o.k, o.lda, o.ldb,
                                           o.ldc, o.align_a, o.align_b, o.align_c, o.align_bias);
  }
};

// The calling thread's cuBLASLt handle and workspace, created on first use, and the algorithm
// the heuristic chose for each GEMM seen (asking it again costs more than a small GEMM).
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
  ~LtContext() {
    if (workspace) cudaFree(workspace);
    if (handle) Cublas().cublasLtDestroy(handle);
  }
};

Result<LtContext*> Context() {
  thread_local LtContext ctx;
  if (ctx.handle == nullptr) {
    RETURN_IF_ERROR(LoadCublas().status());
    RT_LT_RETURN_IF_ERROR(Cublas().cublasLtCreate(&ctx.handle));
    RT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ctx.workspace, kWorkspaceBytes));
  }
  return &ctx;
}

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// Owners of the cuBLASLt descriptors.
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { Cublas().cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const {
    Cublas().cublasLtMatrixLayoutDestroy(l);
  }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const {
    Cublas().cublasLtMatmulPreferenceDestroy(p);
  }
};

// c[m, n] (row stride ldc) ← beta·c (+ bias[n] when bias is set); beta = 0 ignores c.
template <typename T>
__global__ void ScaleBiasKernel(T* c, const T* bias, float beta, int64_t m, int64_t n,
                                int64_t ldc) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < m * n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T* p = c + (i / n) * ldc + i % n;
    const float old = beta == 0.0f ? 0.0f : beta * Load(*p);
    *p = Store<T>(old + (bias != nullptr ? Load(bias[i % n]) : 0.0f));
  }
}

// The largest power of two (≤ 256) that divides the address.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// Sets *algo to cuBLASLt's first choice for the GEMM `desc` over layouts la, lb, lc with the
// alignments of `key` and at most kWorkspaceBytes of workspace. (An out-parameter: a Result of
// the unnamed struct cublasLtMatmulAlgo_t trips an internal error of nvcc 13.0's front end.)
Status ChooseAlgo(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                  cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const AlgoKey& key,
                  cublasLtMatmulAlgo_t* algo) {
  cublasLtMatmulPreference_t pref_raw = nullptr;
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulPreferenceCreate(&pref_raw));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter> pref(pref_raw);
  const size_t ws = kWorkspaceBytes;
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a, sizeof(key.align_a)));
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b, sizeof(key.align_b)));
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c, sizeof(key.align_c)));
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c, sizeof(key.align_c)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc,
                                                                pref.get(), 1, &heuristic, &found));
  if (found == 0) {
    return ForeignError(
        StatusCode::kCublasError,
        "cublasLtMatmulAlgoGetHeuristic: no algorithm for m=" + std::to_string(key.m) +
            " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k));
  }
  *algo = heuristic.algo;
  return Status::Ok();
}

// Row-major C[m,n] = alpha·op(A)·op(B) + beta·C (+ bias[n] per row when bias is set), as the
// column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ.
Status LtGemm(DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
              const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
              int64_t ldc, const void* bias) {
  if (m == 0 || n == 0) return Status::Ok();
  if (k == 0) {  // an empty product: C = beta·C (+ bias)
    return Dispatch(dt, [&](auto tag) {
      using T = decltype(tag);
      ScaleBiasKernel<T><<<Blocks(m * n, 256), 256, 0, Stream()>>>(
          static_cast<T*>(c), static_cast<const T*>(bias), beta, m, n, ldc);
      return CudaStatus(cudaGetLastError(), "ScaleBiasKernel");
    });
  }
  ASSIGN_OR_RETURN(LtContext * ctx, Context());
  const cudaDataType_t type = CudaType(dt);
  // CUBLAS_COMPUTE_32F is full fp32 arithmetic: f32 GEMMs never run in TF32 (that would take
  // CUBLAS_COMPUTE_32F_FAST_TF32), so they match the CPU's sgemm to fp32 rounding.
  cublasLtMatmulDesc_t desc_raw = nullptr;
  RT_LT_RETURN_IF_ERROR(
      Cublas().cublasLtMatmulDescCreate(&desc_raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter> desc(desc_raw);
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS A is our B
  const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS B is our A
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulDescSetAttribute(
      desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulDescSetAttribute(
      desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulDescSetAttribute(
        desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulDescSetAttribute(
        desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmulDescSetAttribute(
        desc.get(), CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)));
  }
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  // cuBLAS A = our B seen column-major: [n,k] (no transpose) or [k,n] (transposed).
  RT_LT_RETURN_IF_ERROR(
      Cublas().cublasLtMatrixLayoutCreate(&la, type, tb ? k : n, tb ? n : k, ldb));
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter> la_owner(la);
  RT_LT_RETURN_IF_ERROR(
      Cublas().cublasLtMatrixLayoutCreate(&lb, type, ta ? m : k, ta ? k : m, lda));
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter> lb_owner(lb);
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatrixLayoutCreate(&lc, type, n, m, ldc));
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter> lc_owner(lc);
  // cuBLASLt assumes 256-byte aligned operands unless told otherwise; views into an arena (or
  // Rows()/Flat() views) are less aligned, so state the real alignment of each pointer.
  const uint32_t align_a = Alignment(b), align_b = Alignment(a), align_c = Alignment(c);
  const AlgoKey key{
      dt,  ta,  tb,  bias != nullptr, m,       n,       k,
      lda, ldb, ldc, align_a,         align_b, align_c, bias != nullptr ? Alignment(bias) : 0u};
  const size_t ws = kWorkspaceBytes;
  auto cached = ctx->algos.find(key);
  if (cached == ctx->algos.end()) {
    cublasLtMatmulAlgo_t algo;
    RETURN_IF_ERROR(ChooseAlgo(ctx->handle, desc.get(), la, lb, lc, key, &algo));
    cached = ctx->algos.emplace(key, algo).first;
  }
  RT_LT_RETURN_IF_ERROR(Cublas().cublasLtMatmul(ctx->handle, desc.get(), &alpha, b, la, a, lb,
                                                &beta, c, lc, c, lc, &cached->second,
                                                ctx->workspace, ws, Stream()));
  return Status::Ok();
}

// dbias[oc] += Σ_rows dout[n, oc]. Blocks of kColumnTile × kRowLanes threads: each block takes
// kColumnTile columns (coalesced reads along a row), thread (x, y) sums rows y, y+kRowLanes, ...
// of its column, and the kRowLanes partial sums are added in a fixed order (deterministic).
template <typename T>
__global__ void BiasGradKernel(T* dbias, const T* dout, int64_t n, int64_t oc) {
  __shared__ float part[kRowLanes][kColumnTile + 1];
  for (int64_t base = blockIdx.x * static_cast<int64_t>(kColumnTile); base < oc;
       base += static_cast<int64_t>(gridDim.x) * kColumnTile) {
    const int64_t o = base + threadIdx.x;
    float s = 0.0f;
    if (o < oc) {
      for (int64_t r = threadIdx.y; r < n; r += kRowLanes) s += Load(dout[r * oc + o]);
    }
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && o < oc) {
      float total = 0.0f;
      for (int y = 0; y < kRowLanes; ++y) total += part[y][threadIdx.x];
      dbias[o] = Store<T>(Load(dbias[o]) + total);
    }
    __syncthreads();
  }
}

// out[n, oc] += bias[oc].
template <typename T>
__global__ void AddBiasKernel(T* out, const T* bias, int64_t n, int64_t oc) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * oc;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = Store<T>(Load(out[i]) + Load(bias[i % oc]));
  }
}

}  // namespace

Status Gemm(Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha, float beta) {
  // Operands seen as [rows, last] (leading dimensions flattened).
  const int64_t m = c.shape().rows(), n = c.shape().last();
  const int64_t lda = a.shape().last(), ldb = b.shape().last();
  const int64_t k = trans_a ? a.shape().rows() : lda;
  return LtGemm(c.dtype(), trans_a, trans_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
                c.data(), n, nullptr);
}

Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const int64_t n = inp.shape().rows(), ic = weight.dim(1), oc = weight.dim(0);
  // The bias epilogue wants an aligned bias vector; an odd view gets a separate bias pass.
  const bool epilogue = bias.defined() && Alignment(bias.data()) >= 16;
  RETURN_IF_ERROR(LtGemm(out.dtype(), false, true, n, oc, ic, 1.0f, inp.data(), ic, weight.data(),
                         ic, 0.0f, out.data(), oc, epilogue ? bias.data() : nullptr));
  if (!bias.defined() || epilogue || n * oc == 0) return Status::Ok();
  return Dispatch(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AddBiasKernel<T>
        <<<Blocks(n * oc, 256), 256, 0, Stream()>>>(out.data_as<T>(), bias.data_as<T>(), n, oc);
    return CudaStatus(cudaGetLastError(), "AddBiasKernel");
  });
}

Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                      Tensor weight) {
  const int64_t n = inp.shape().rows(), ic = weight.dim(1), oc = weight.dim(0);
  const DType dt = dout.dtype();
  if (dinp.defined()) {
    RETURN_IF_ERROR(LtGemm(dt, false, false, n, ic, oc, 1.0f, dout.data(), oc, weight.data(), ic,
                           1.0f, dinp.data(), ic, nullptr));
  }
  RETURN_IF_ERROR(LtGemm(dt, true, false, oc, ic, n, 1.0f, dout.data(), oc, inp.data(), ic, 1.0f,
                         dweight.data(), ic, nullptr));
  if (dbias.defined()) {
    Status s = Dispatch(dt, [&](auto tag) {
      using T = decltype(tag);
      BiasGradKernel<T><<<Blocks(oc, kColumnTile), dim3(kColumnTile, kRowLanes), 0, Stream()>>>(
          dbias.data_as<T>(), dout.data_as<T>(), n, oc);
      return CudaStatus(cudaGetLastError(), "BiasGradKernel");
    });
    RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

}  // namespace rt::cuda
