// Element-wise reductions of the CPU backend: dst[i] = op(dst[i], src[i]) for every dtype;
// bf16 and fp16 are reduced in fp32 (kernels/element.h conversions) and rounded once.
#pragma once

#include <cstddef>
#include <span>

#include "comm/communicator.h"

namespace rt::comm::tcp {

// dst[i] = op(dst[i], src[i]) for i < count. kAvg reduces as kSum (see FinishAverage).
void ReduceInto(void* dst, const void* src, size_t count, DType dtype, ReduceOp op);
// out[i] = op(a[i], b[i]).
void ReduceTo(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);
// dst[i] = op(dst[i], srcs[0][i], srcs[1][i], ...) for i < count, in that order; bf16/fp16
// accumulate in fp32 and round once. Works in cache-sized blocks. kAvg reduces as kSum.
void ReduceMany(void* dst, std::span<const void* const> srcs, size_t count, DType dtype,
                ReduceOp op);
// For kAvg: buf[i] /= n (integer division for integer types). No-op for other ops.
void FinishAverage(void* buf, size_t count, DType dtype, ReduceOp op, int n);

}  // namespace rt::comm::tcp
