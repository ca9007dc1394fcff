// Internal to kernels/: the table every backend fills in (after ggml's ggml-backend-impl.h).
// ops.cc checks arguments and then calls through the table of the tensors' device; the tables
// are registered in one file, impl/backends.cc. A backend function may assume that its
// arguments passed the checks documented in kernels/ops.h (shapes, dtypes, devices agree).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace rt::internal {

// One backend's implementation of the storage primitives and of every op in kernels/ops.h.
// Every entry is set; a backend that cannot do something returns Unimplemented.
struct KernelBackend {
  const char* name;  // "cpu", "cuda"

  // OK when this backend can run on this machine; otherwise Unavailable naming why.
  Status (*available)();
  // Waits until the ops this thread enqueued have finished (the CPU's ops finish on return).
  Status (*synchronize)();

  // Zero-filled memory of `bytes` bytes (64-byte aligned on the CPU); freed with `free`.
  Result<void*> (*allocate)(size_t bytes);
  void (*free)(void* p);
  // dst = src bytes; either tensor may be on the CPU (the backend of the non-CPU side copies).
  Status (*copy)(Tensor dst, Tensor src);

  Status (*gemm)(Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha, float beta);
  Status (*matmul_forward)(Tensor out, Tensor inp, Tensor weight, Tensor bias);
  Status (*matmul_backward)(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                            Tensor weight);
  Status (*layernorm_forward)(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                              Tensor bias);
  Status (*layernorm_backward)(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                               Tensor weight, Tensor mean, Tensor rstd);
  Status (*gelu_forward)(Tensor out, Tensor inp);
  Status (*gelu_backward)(Tensor dinp, Tensor inp, Tensor dout, bool accumulate);
  Status (*attention_forward)(Tensor out, Tensor att, Tensor qkv, int n_head);
  Status (*attention_backward)(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int n_head,
                               bool accumulate);
  Status (*embedding_forward)(Tensor out, Tensor tokens, Tensor wte, int64_t vocab_start);
  Status (*embedding_backward)(Tensor dwte, Tensor dout, Tensor tokens, int64_t vocab_start);
  Status (*position_embedding_add)(Tensor out, Tensor wpe, int64_t pos_start);
  Status (*position_embedding_backward)(Tensor dwpe, Tensor dout, int64_t pos_start);
  Status (*softmax_cross_entropy)(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                  float dloss);
  Status (*add)(Tensor out, Tensor a, Tensor b);
  Status (*accumulate)(Tensor dst, Tensor src);
  Status (*scale)(Tensor x, float s);
  Status (*zero)(Tensor x);
  Result<double> (*sum_of_squares)(Tensor x);
  Status (*adamw)(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_copy,
                  const AdamWParams& hp);
  Status (*convert)(Tensor dst, Tensor src);
};

// The backend of `device`, or nullptr when this build has none (kCuda without CUDA).
const KernelBackend* BackendFor(Device device);

}  // namespace rt::internal
