#include "tests/comm/table.h"

#include <cmath>
#include <cstring>
#include <functional>

#include "kernels/element.h"

namespace rt::comm::testing {
namespace {

std::vector<std::byte> Alloc(size_t count, DType dt) {
  return std::vector<std::byte>(count * DTypeSize(dt));
}

void Put(std::vector<std::byte>& b, size_t i, DType dt, double v) {
  std::byte* p = b.data() + i * DTypeSize(dt);
  switch (dt) {
    case DType::kF32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::kBF16: {
      uint16_t h = Bf16FromFloat(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kF16: {
      uint16_t h = HalfFromFloat(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kI32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::kI64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case DType::kU8: {
      uint8_t x = static_cast<uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
  }
}

double Get(const std::vector<std::byte>& b, size_t i, DType dt) {
  const std::byte* p = b.data() + i * DTypeSize(dt);
  switch (dt) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return FloatFromBf16(h);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return FloatFromHalf(h);
    }
    case DType::kI32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DType::kI64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case DType::kU8: {
      uint8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
  }
  return 0;
}

// Small integers: exact in every dtype, sums of 8 ranks included.
double Input(int rank, size_t i, DType dt, uint64_t salt) {
  if (dt == DType::kU8) return static_cast<double>((rank * 3 + i + salt) % 5);
  return static_cast<double>(static_cast<int64_t>((rank * 131 + i * 7 + salt) % 9) - 4);
}

std::vector<std::byte> MakeInput(int rank, size_t count, DType dt, uint64_t salt) {
  auto b = Alloc(count, dt);
  for (size_t i = 0; i < count; ++i) Put(b, i, dt, Input(rank, i, dt, salt));
  return b;
}

double Reference(ReduceOp op, int n, size_t i, DType dt, uint64_t salt) {
  double acc = Input(0, i, dt, salt);
  for (int r = 1; r < n; ++r) {
    double v = Input(r, i, dt, salt);
    if (op == ReduceOp::kMax)
      acc = std::max(acc, v);
    else if (op == ReduceOp::kMin)
      acc = std::min(acc, v);
    else
      acc += v;
  }
  if (op == ReduceOp::kAvg) {
    if (IsFloating(dt))
      acc /= n;
    else
      acc = static_cast<double>(static_cast<int64_t>(acc) / n);
  }
  return acc;
}

bool Close(double got, double want, DType dt) {
  double tol = dt == DType::kBF16  ? 1.0 / 64
               : dt == DType::kF16 ? 1.0 / 512
               : dt == DType::kF32 ? 1e-6
                                   : 0;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

std::string Where(std::string_view op, DType dt, size_t count) {
  return std::string(op) + " " + std::string(DTypeName(dt)) + " count " + std::to_string(count);
}

Status Check(const std::vector<std::byte>& got, size_t count, DType dt, const std::string& where,
             const std::function<double(size_t)>& want) {
  for (size_t i = 0; i < count; ++i) {
    double g = Get(got, i, dt), w = want(i);
    if (!Close(g, w, dt))
      return Internal(where + ": element " + std::to_string(i) + " is " + std::to_string(g) +
                      ", expected " + std::to_string(w));
  }
  return Status();
}

}  // namespace

std::vector<DType> AllDTypes() {
  return {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8};
}

Status RunCollectiveTable(Communicator& c, const TableOptions& o) {
  const int n = c.size(), r = c.rank();
  auto wait = [&](WorkHandle w, const std::string& where) {
    return w->Wait(o.deadline).WithContext(where);
  };
  auto run_reductions = [&](DType dt, size_t count, bool everything) -> Status {
    const uint64_t salt = count;
    // All-reduce: every op out of place, sum in place.
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      if (!everything && op != ReduceOp::kSum) continue;
      auto in = MakeInput(r, count, dt, salt), out = Alloc(count, dt);
      std::string where = Where("all_reduce " + std::string(ReduceOpName(op)), dt, count);
      RETURN_IF_ERROR(wait(c.AllReduce(in.data(), out.data(), count, dt, op), where));
      RETURN_IF_ERROR(
          Check(out, count, dt, where, [&](size_t i) { return Reference(op, n, i, dt, salt); }));
    }
    {
      auto buf = MakeInput(r, count, dt, salt);
      std::string where = Where("all_reduce in-place", dt, count);
      RETURN_IF_ERROR(wait(c.AllReduce(buf.data(), buf.data(), count, dt, ReduceOp::kSum), where));
      RETURN_IF_ERROR(Check(buf, count, dt, where,
                            [&](size_t i) { return Reference(ReduceOp::kSum, n, i, dt, salt); }));
    }
    {  // Reduce-scatter: recv_count = count / n (at least the count itself when small).
      size_t rc = everything ? count : count / n;
      auto in = MakeInput(r, rc * n, dt, salt), out = Alloc(rc, dt);
      std::string where = Where("reduce_scatter", dt, rc);
      RETURN_IF_ERROR(wait(c.ReduceScatter(in.data(), out.data(), rc, dt, ReduceOp::kSum), where));
      RETURN_IF_ERROR(Check(out, rc, dt, where, [&](size_t i) {
        return Reference(ReduceOp::kSum, n, r * rc + i, dt, salt);
      }));
    }
    {  // All-gather.
      size_t sc = everything ? count : count / n;
      auto in = MakeInput(r, sc, dt, salt), out = Alloc(sc * n, dt);
      std::string where = Where("all_gather", dt, sc);
      RETURN_IF_ERROR(wait(c.AllGather(in.data(), out.data(), sc, dt), where));
      RETURN_IF_ERROR(Check(out, sc * n, dt, where, [&](size_t i) {
        return Input(static_cast<int>(i / sc), i % sc, dt, salt);
      }));
    }
    return Status();
  };
  for (DType dt : o.dtypes) {
    for (size_t count : o.counts) {
      const uint64_t salt = count;
      RETURN_IF_ERROR(run_reductions(dt, count, true));
      {  // All-gather with variable counts.
        std::vector<size_t> counts(n);
        std::vector<size_t> begin(n + 1, 0);
        for (int k = 0; k < n; ++k) {
          counts[k] = count == 0 ? 0 : count + k;
          begin[k + 1] = begin[k] + counts[k];
        }
        auto in = MakeInput(r, counts[r], dt, salt), out = Alloc(begin[n], dt);
        std::string where = Where("all_gather_v", dt, count);
        RETURN_IF_ERROR(wait(c.AllGatherV(in.data(), out.data(), counts, dt), where));
        RETURN_IF_ERROR(Check(out, begin[n], dt, where, [&](size_t i) {
          int k = 0;
          while (i >= begin[k + 1]) ++k;
          return Input(k, i - begin[k], dt, salt);
        }));
      }
      const int root = static_cast<int>(count % n);
      {  // Broadcast.
        auto in = MakeInput(r, count, dt, salt), out = Alloc(count, dt);
        std::string where = Where("broadcast", dt, count);
        RETURN_IF_ERROR(wait(c.Broadcast(in.data(), out.data(), count, dt, root), where));
        RETURN_IF_ERROR(
            Check(out, count, dt, where, [&](size_t i) { return Input(root, i, dt, salt); }));
      }
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {  // Reduce.
        auto in = MakeInput(r, count, dt, salt), out = Alloc(count, dt);
        std::string where = Where("reduce " + std::string(ReduceOpName(op)), dt, count);
        RETURN_IF_ERROR(wait(c.Reduce(in.data(), out.data(), count, dt, op, root), where));
        if (r == root)
          RETURN_IF_ERROR(Check(out, count, dt, where,
                                [&](size_t i) { return Reference(op, n, i, dt, salt); }));
      }
      {  // Gather.
        auto in = MakeInput(r, count, dt, salt), out = Alloc(count * n, dt);
        std::string where = Where("gather", dt, count);
        RETURN_IF_ERROR(wait(c.Gather(in.data(), out.data(), count, dt, root), where));
        if (r == root)
          RETURN_IF_ERROR(Check(out, count * n, dt, where, [&](size_t i) {
            return Input(static_cast<int>(i / count), i % count, dt, salt);
          }));
      }
      {  // Scatter: the root's block k goes to rank k.
        auto in = MakeInput(root, count * n, dt, salt), out = Alloc(count, dt);
        std::string where = Where("scatter", dt, count);
        RETURN_IF_ERROR(wait(c.Scatter(in.data(), out.data(), count, dt, root), where));
        RETURN_IF_ERROR(Check(out, count, dt, where,
                              [&](size_t i) { return Input(root, r * count + i, dt, salt); }));
      }
      {  // All-to-all: block j of rank i's input is Input(i, j*count + k).
        auto in = MakeInput(r, count * n, dt, salt), out = Alloc(count * n, dt);
        std::string where = Where("all_to_all", dt, count);
        RETURN_IF_ERROR(wait(c.AllToAll(in.data(), out.data(), count, dt), where));
        RETURN_IF_ERROR(Check(out, count * n, dt, where, [&](size_t i) {
          return Input(static_cast<int>(i / count), r * count + i % count, dt, salt);
        }));
      }
      if (n > 1) {  // Send/recv around the ring, receive posted after the send (one group).
        auto in = MakeInput(r, count, dt, salt), out = Alloc(count, dt);
        int next = (r + 1) % n, prev = (r + n - 1) % n;
        std::string where = Where("send/recv", dt, count);
        auto s = c.Send(in.data(), count, dt, next, static_cast<uint32_t>(count));
        auto rv = c.Recv(out.data(), count, dt, prev, static_cast<uint32_t>(count));
        RETURN_IF_ERROR(wait(s, where));
        RETURN_IF_ERROR(wait(rv, where));
        RETURN_IF_ERROR(
            Check(out, count, dt, where, [&](size_t i) { return Input(prev, i, dt, salt); }));
      }
      RETURN_IF_ERROR(wait(c.Barrier(), "barrier"));
    }
  }
  for (auto [count, dt] : o.large) RETURN_IF_ERROR(run_reductions(dt, count, false));
  return Status();
}

}  // namespace rt::comm::testing
