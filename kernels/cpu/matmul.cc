// GEMM and the Linear layer on the CPU through OpenBLAS sgemm. bf16/f16 operands are widened to
// fp32 scratch, multiplied in fp32 and rounded back (after llm.c's matmul_forward/backward,
// with the inner loops handed to BLAS).
#include <cblas.h>

#include <cstring>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace rt::cpu {

namespace {

// Row-major sgemm with the degenerate sizes handled (OpenBLAS rejects K=0 leading dimensions).
void Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// dbias[OC] += Σ_rows dout[N,OC], summed in fp32.
template <typename T>
RT_CPU_CLONES void BiasGrad(T* dbias, const float* dout, int64_t n, int64_t oc) {
  float* acc = Scratch(7, static_cast<size_t>(oc));
  std::memset(acc, 0, static_cast<size_t>(oc) * sizeof(float));
  for (int64_t r = 0; r < n; ++r) {
    const float* row = dout + r * oc;
    for (int64_t o = 0; o < oc; ++o) acc[o] += row[o];
  }
  AccumulateRow(dbias, acc, oc);
}

// out[N,OC] rows := bias.
template <typename T>
void FillBias(float* out, const T* bias, int64_t n, int64_t oc) {
  LoadRow(out, bias, oc);
  for (int64_t r = 1; r < n; ++r) std::memcpy(out + r * oc, out, static_cast<size_t>(oc) * 4);
}

// Operands seen as [rows, last] (leading dimensions flattened).
template <typename T>
void GemmT(const Tensor& c, const Tensor& a, const Tensor& b, bool ta, bool tb, float alpha,
           float beta) {
  const int64_t m = c.shape().rows(), n = c.shape().last();
  const int64_t lda = a.shape().last(), ldb = b.shape().last();
  const int64_t k = ta ? a.shape().rows() : lda;
  const float* af = AsF32(a.data_as<T>(), a.numel(), 0);
  const float* bf = AsF32(b.data_as<T>(), b.numel(), 1);
  if constexpr (sizeof(T) == 4) {
    Sgemm(ta, tb, m, n, k, alpha, af, lda, bf, ldb, beta, c.data_as<float>(), n);
  } else {
    float* cf = Scratch(2, static_cast<size_t>(c.numel()));
    if (beta != 0.0f) LoadRow(cf, c.data_as<T>(), c.numel());
    Sgemm(ta, tb, m, n, k, alpha, af, lda, bf, ldb, beta, cf, n);
    StoreRow(c.data_as<T>(), cf, c.numel());
  }
}

template <typename T>
void MatmulForwardT(const Tensor& out, const Tensor& inp, const Tensor& weight,
                    const Tensor& bias) {
  const int64_t n = inp.shape().rows(), ic = weight.dim(1), oc = weight.dim(0);
  const float* x = AsF32(inp.data_as<T>(), inp.numel(), 0);
  const float* w = AsF32(weight.data_as<T>(), weight.numel(), 1);
  float* y = sizeof(T) == 4 ? out.data_as<float>() : Scratch(2, static_cast<size_t>(n * oc));
  float beta = 0.0f;
  if (bias.defined()) {
    FillBias(y, bias.data_as<T>(), n, oc);
    beta = 1.0f;
  }
  Sgemm(false, true, n, oc, ic, 1.0f, x, ic, w, ic, beta, y, oc);
  if constexpr (sizeof(T) != 4) StoreRow(out.data_as<T>(), y, n * oc);
}

template <typename T>
void MatmulBackwardT(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight) {
  const int64_t n = inp.shape().rows(), ic = weight.dim(1), oc = weight.dim(0);
  const float* dy = AsF32(dout.data_as<T>(), dout.numel(), 0);
  if (dinp.defined()) {
    const float* w = AsF32(weight.data_as<T>(), weight.numel(), 1);
    if constexpr (sizeof(T) == 4) {
      Sgemm(false, false, n, ic, oc, 1.0f, dy, oc, w, ic, 1.0f, dinp.data_as<float>(), ic);
    } else {
      float* g = Scratch(2, static_cast<size_t>(n * ic));
      Sgemm(false, false, n, ic, oc, 1.0f, dy, oc, w, ic, 0.0f, g, ic);
      AccumulateRow(dinp.data_as<T>(), g, n * ic);
    }
  }
  const float* x = AsF32(inp.data_as<T>(), inp.numel(), 1);
  if constexpr (sizeof(T) == 4) {
    Sgemm(true, false, oc, ic, n, 1.0f, dy, oc, x, ic, 1.0f, dweight.data_as<float>(), ic);
  } else {
    float* g = Scratch(2, static_cast<size_t>(oc * ic));
    Sgemm(true, false, oc, ic, n, 1.0f, dy, oc, x, ic, 0.0f, g, ic);
    AccumulateRow(dweight.data_as<T>(), g, oc * ic);
  }
  if (dbias.defined()) BiasGrad(dbias.data_as<T>(), dy, n, oc);
}

}  // namespace

Status Gemm(Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha, float beta) {
  internal::DispatchFloating(
      c.dtype(), [&](auto tag) { GemmT<decltype(tag)>(c, a, b, trans_a, trans_b, alpha, beta); });
  return Status::Ok();
}

Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  internal::DispatchFloating(
      out.dtype(), [&](auto tag) { MatmulForwardT<decltype(tag)>(out, inp, weight, bias); });
  return Status::Ok();
}

Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                      Tensor weight) {
  internal::DispatchFloating(dout.dtype(), [&](auto tag) {
    MatmulBackwardT<decltype(tag)>(dinp, dweight, dbias, dout, inp, weight);
  });
  return Status::Ok();
}

}  // namespace rt::cpu
