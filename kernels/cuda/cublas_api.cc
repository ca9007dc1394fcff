#include "kernels/cuda/cublas_api.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <string>

namespace rt::cuda {
namespace {

CublasApi api;
std::atomic<bool> loaded{false};

// The folder of the libcudart this process runs with ("" when unknown): the CUDA toolkit's
// library folder, where its libcublas lives too.
std::string CudartFolder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cudaGetDeviceCount), &info) == 0 ||
      info.dli_fname == nullptr)
    return "";
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

// dlopen of `soname` from `folder`, else wherever the dynamic loader finds it.
Result<void*> Open(const std::string& folder, const std::string& soname) {
  if (!folder.empty()) {
    if (void* h = dlopen((folder + "/" + soname).c_str(), RTLD_NOW | RTLD_GLOBAL)) return h;
  }
  if (void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_GLOBAL)) return h;
  const char* why = dlerror();
  return Status(StatusCode::kCublasError,
                "load " + soname + ": " + (why != nullptr ? why : "dlopen failed"));
}

Result<const CublasApi*> Load() {
  const std::string folder = CudartFolder();
  const std::string major = std::to_string(CUBLAS_VER_MAJOR);
  ASSIGN_OR_RETURN(void* lt, Open(folder, "libcublasLt.so." + major));
  ASSIGN_OR_RETURN(void* blas, Open(folder, "libcublas.so." + major));
  CublasApi table;
#define RT_CUBLAS_RESOLVE(name)                                                                \
  {                                                                                            \
    void* symbol = dlsym(std::string(#name).rfind("cublasLt", 0) == 0 ? lt : blas, #name);     \
    if (symbol == nullptr)                                                                     \
      return Status(StatusCode::kCublasError, "resolve " #name ": " + std::string(dlerror())); \
    table.name = reinterpret_cast<decltype(table.name)>(symbol);                               \
  }
  RT_CUBLAS_FUNCTIONS(RT_CUBLAS_RESOLVE)
#undef RT_CUBLAS_RESOLVE
  api = table;
  loaded = true;
  return &api;
}

}  // namespace

Result<const CublasApi*> LoadCublas() {
  static std::once_flag once;
  static Result<const CublasApi*> result = Status(StatusCode::kCublasError, "not loaded");
  std::call_once(once, [] { result = Load(); });
  return result;
}

const CublasApi& Cublas() { return api; }

bool CublasLoaded() { return loaded; }

}  // namespace rt::cuda
