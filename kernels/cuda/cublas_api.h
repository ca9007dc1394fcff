// cuBLAS and cuBLASLt, loaded on first use (dlopen) instead of linked. Linking them made every
// process pay for libcublasLt's start — ~80 ms of CPU and ~210 MB of resident memory, before
// main — whether or not it ever used a GPU: each worker of a CPU job, each restart after a
// fault, each `ringctl` call. The GEMM and attention kernels load them when they create their
// first handle; everything else never maps them.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include "base/status.h"

namespace rt::cuda {

// Every cuBLAS / cuBLASLt function ringtrain calls.
#define RT_CUBLAS_FUNCTIONS(X)            \
  X(cublasCreate_v2)                      \
  X(cublasDestroy_v2)                     \
  X(cublasSetStream_v2)                   \
  X(cublasSgemmStridedBatched)            \
  X(cublasGetStatusString)                \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtGetVersion)                   \
  X(cublasLtGetStatusString)              \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)

// The entry points, resolved from the loaded libraries (same names and types as the headers').
struct CublasApi {
#define RT_CUBLAS_POINTER(name) decltype(&::name) name = nullptr;
  RT_CUBLAS_FUNCTIONS(RT_CUBLAS_POINTER)
#undef RT_CUBLAS_POINTER
};

// Loads libcublasLt and libcublas (their major version's sonames, first from the folder that
// holds the libcudart this process uses) and resolves CublasApi, once per process; thread-safe.
// Errors (the same on every later call): kCublasError naming the library or the symbol and
// dlerror()'s words.
Result<const CublasApi*> LoadCublas();

// The table LoadCublas filled; call only after it succeeded.
const CublasApi& Cublas();

// Whether LoadCublas has succeeded in this process.
bool CublasLoaded();

}  // namespace rt::cuda
