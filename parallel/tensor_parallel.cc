#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace rt::parallel {

Status TpAllReduce(const TpGroup& g, Tensor x, const char* what) {
  if (g.size() == 1) return Status();
  return g.comm
      ->AllReduce(x.data(), x.data(), static_cast<size_t>(x.numel()), x.dtype(),
                  comm::ReduceOp::kSum)
      ->Wait(Deadline::After(g.timeout))
      .WithContext(std::string("tensor-parallel all-reduce of ") + what);
}

Result<Tensor> TpCollectives::Reduce(Tensor partial, const char* what) const {
  RETURN_IF_ERROR(TpAllReduce(g_, partial, what));
  return partial;
}

namespace {

// Moves [B, T, C] to [tp, B, T/tp, C] (to_staging = false is the reverse direction); elements
// of `size` bytes on `device` (host loops on the CPU, device-to-device copies elsewhere).
Status Permute(std::byte* full, std::byte* staging, int64_t B, int64_t T, int64_t C, int tp,
               size_t size, bool to_staging, Device device) {
  const int64_t tl = T / tp;
  C *= static_cast<int64_t>(size);
  for (int r = 0; r < tp; ++r)
    for (int64_t b = 0; b < B; ++b) {
      std::byte* f = full + (b * T + r * tl) * C;
      std::byte* st = staging + ((r * B + b) * tl) * C;
      if (device != Device::kCpu) {
        const Tensor ft(f, DType::kU8, Shape{tl * C}, device),
            stt(st, DType::kU8, Shape{tl * C}, device);
        RETURN_IF_ERROR((to_staging ? Copy(stt, ft) : Copy(ft, stt))
                            .WithContext("sequence-parallel permutation"));
      } else if (to_staging) {
        std::copy(f, f + tl * C, st);
      } else {
        std::copy(st, st + tl * C, f);
      }
    }
  return Status();
}

// All-reduces `count` f32 values in host memory over the group: in place on a CPU communicator;
// staged through a buffer on `device` otherwise (NCCL takes device pointers).
Status HostAllReduce(const TpGroup& g, Device device, float* data, size_t count, comm::ReduceOp op,
                     Deadline deadline, const char* what) {
  if (device == Device::kCpu)
    return g.comm->AllReduce(data, data, count, DType::kF32, op)->Wait(deadline).WithContext(what);
  const Tensor host(data, DType::kF32, Shape{static_cast<int64_t>(count)});
  ASSIGN_OR_RETURN(Buffer staging, Buffer::Allocate(device, count * sizeof(float)));
  const Tensor dev = staging.View(DType::kF32, host.shape());
  RETURN_IF_ERROR(Copy(dev, host).WithContext(what));
  RETURN_IF_ERROR(g.comm->AllReduce(dev.data(), dev.data(), count, DType::kF32, op)
                      ->Wait(deadline)
                      .WithContext(what));
  return Copy(host, dev).WithContext(what);
}

}  // namespace

Status SeqAllGather(const TpGroup& g, Tensor local, Tensor full, Tensor staging) {
  const int64_t B = full.dim(0), T = full.dim(1), C = full.dim(2);
  RETURN_IF_ERROR(g.comm
                      ->AllGather(local.data(), staging.data(), static_cast<size_t>(local.numel()),
                                  local.dtype())
                      ->Wait(Deadline::After(g.timeout))
                      .WithContext("sequence-parallel all-gather"));
  return Permute(static_cast<std::byte*>(full.data()), static_cast<std::byte*>(staging.data()), B,
                 T, C, g.size(), DTypeSize(full.dtype()), false, full.device());
}

Status SeqReduceScatter(const TpGroup& g, Tensor full, Tensor local, Tensor staging) {
  const int64_t B = full.dim(0), T = full.dim(1), C = full.dim(2);
  RETURN_IF_ERROR(Permute(static_cast<std::byte*>(full.data()),
                          static_cast<std::byte*>(staging.data()), B, T, C, g.size(),
                          DTypeSize(full.dtype()), true, full.device()));
  return g.comm
      ->ReduceScatter(staging.data(), local.data(), static_cast<size_t>(local.numel()),
                      local.dtype(), comm::ReduceOp::kSum)
      ->Wait(Deadline::After(g.timeout))
      .WithContext("sequence-parallel reduce-scatter");
}

Result<Tensor> SpCollectives::Gather(Tensor local, Tensor full, const char* what) const {
  if (!full.defined()) full = sp_.full_a;
  RETURN_IF_ERROR(SeqAllGather(g_, local, full, sp_.staging).WithContext(what));
  return full;
}

Result<Tensor> SpCollectives::Reduce(Tensor partial, const char* what) const {
  RETURN_IF_ERROR(SeqReduceScatter(g_, partial, sp_.local, sp_.staging).WithContext(what));
  return sp_.local;
}

Status VocabParallelCrossEntropy(const TpGroup& g, Tensor losses, Tensor logits, Tensor targets,
                                 int64_t vocab_start, int64_t vocab_size, float dloss) {
  if (logits.dtype() != DType::kF32)
    return Status(StatusCode::kDTypeMismatch, "vocab-parallel cross-entropy: logits are " +
                                                  logits.Describe() + ", expected f32");
  const int64_t n = logits.shape().rows(), v = logits.shape().last();
  const Device device = logits.device();
  // On a device the row statistics are computed on host copies of the logits, targets and
  // losses (copied back at the end); the collectives still go through device buffers.
  std::vector<float> host_x, host_loss;
  std::vector<int32_t> host_t;
  float* x = logits.data_as<float>();
  const int32_t* t = targets.data_as<int32_t>();
  float* loss = losses.data_as<float>();
  if (device != Device::kCpu) {
    host_x.resize(static_cast<size_t>(n * v));
    host_t.resize(static_cast<size_t>(n));
    host_loss.resize(static_cast<size_t>(n));
    RETURN_IF_ERROR(Copy(Tensor(host_x.data(), DType::kF32, logits.shape()), logits));
    RETURN_IF_ERROR(Copy(Tensor(host_t.data(), DType::kI32, targets.shape()), targets));
    x = host_x.data();
    t = host_t.data();
    loss = host_loss.data();
  }
  for (int64_t i = 0; i < n; ++i)
    if (t[i] < 0 || t[i] >= vocab_size)
      return InvalidArgument("vocab-parallel cross-entropy: targets[" + std::to_string(i) +
                             "] = " + std::to_string(t[i]) + " is outside the vocabulary");
  // Row maxima over the whole vocabulary.
  std::vector<float> mx(static_cast<size_t>(n), -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < v; ++j)
      mx[static_cast<size_t>(i)] = std::max(mx[static_cast<size_t>(i)], x[i * v + j]);
  const Deadline d = Deadline::After(g.timeout);
  RETURN_IF_ERROR(HostAllReduce(g, device, mx.data(), mx.size(), comm::ReduceOp::kMax, d,
                                "vocab-parallel cross-entropy: row maxima"));
  // Per row: Σ exp(x − max) over the local vocabulary, and the target's logit if it is local.
  std::vector<float> sums(static_cast<size_t>(2 * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float m = mx[static_cast<size_t>(i)];
    double s = 0;
    for (int64_t j = 0; j < v; ++j) s += std::exp(x[i * v + j] - m);
    sums[static_cast<size_t>(2 * i)] = static_cast<float>(s);
    const int64_t local = t[i] - vocab_start;
    if (local >= 0 && local < v) sums[static_cast<size_t>(2 * i + 1)] = x[i * v + local];
  }
  RETURN_IF_ERROR(HostAllReduce(g, device, sums.data(), sums.size(), comm::ReduceOp::kSum, d,
                                "vocab-parallel cross-entropy: row sums"));
  for (int64_t i = 0; i < n; ++i) {
    const float m = mx[static_cast<size_t>(i)], sum = sums[static_cast<size_t>(2 * i)];
    loss[i] = std::log(sum) - (sums[static_cast<size_t>(2 * i + 1)] - m);
    if (dloss == 0) continue;
    const float scale = dloss / sum;
    for (int64_t j = 0; j < v; ++j) x[i * v + j] = std::exp(x[i * v + j] - m) * scale;
    const int64_t local = t[i] - vocab_start;
    if (local >= 0 && local < v) x[i * v + local] -= dloss;
  }
  if (device == Device::kCpu) return Status();
  RETURN_IF_ERROR(Copy(losses, Tensor(loss, DType::kF32, losses.shape())));
  if (dloss == 0) return Status();
  return Copy(logits, Tensor(x, DType::kF32, logits.shape()));
}

}  // namespace rt::parallel
