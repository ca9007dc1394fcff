// Argument checks for every op, then dispatch to the backend of the tensors' device.
#include "kernels/ops.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "kernels/impl/backend.h"

namespace rt {

namespace {

using internal::BackendFor;
using internal::KernelBackend;

// A named argument of an op (name for error messages; the tensor may be undefined = absent).
struct Arg {
  const char* name;
  const Tensor& t;
};

Status ShapeError(const char* op, const std::string& what) {
  return Status(StatusCode::kShapeMismatch, std::string(op) + ": " + what);
}
Status DTypeError(const char* op, const std::string& what) {
  return Status(StatusCode::kDTypeMismatch, std::string(op) + ": " + what);
}

std::string S(const Tensor& t) { return t.shape().ToString(); }
std::string S(const Shape& s) { return s.ToString(); }
std::string I(int64_t v) { return std::to_string(v); }

// Every tensor in `required` must be defined.
Status CheckDefined(const char* op, std::initializer_list<Arg> required) {
  for (const Arg& a : required) {
    if (!a.t.defined()) return InvalidArgument(std::string(op) + ": " + a.name + " is undefined");
  }
  return Status::Ok();
}

// All defined tensors share one device; returns its backend.
Result<const KernelBackend*> CheckDevices(const char* op, std::initializer_list<Arg> args) {
  const Arg* first = nullptr;
  for (const Arg& a : args) {
    if (!a.t.defined()) continue;
    if (first == nullptr) {
      first = &a;
    } else if (a.t.device() != first->t.device()) {
      return Status(StatusCode::kDeviceMismatch, std::string(op) + ": " + a.name + " is " +
                                                     a.t.Describe() + " but " + first->name +
                                                     " is " + first->t.Describe());
    }
  }
  const Device device = first ? first->t.device() : Device::kCpu;
  const KernelBackend* backend = BackendFor(device);
  if (backend == nullptr) {
    return Unimplemented(std::string(op) + ": no CUDA backend in this build (" + first->name +
                         " is " + first->t.Describe() + ")");
  }
  return backend;
}

// All defined tensors in `args` share one floating dtype (that of the first defined one).
Status CheckSameFloating(const char* op, std::initializer_list<Arg> args) {
  const Arg* first = nullptr;
  for (const Arg& a : args) {
    if (!a.t.defined()) continue;
    if (first == nullptr) {
      first = &a;
      if (!IsFloating(a.t.dtype())) {
        return DTypeError(
            op, std::string(a.name) + " is " + a.t.Describe() + "; expected f32, bf16 or f16");
      }
    } else if (a.t.dtype() != first->t.dtype()) {
      return DTypeError(op, std::string(a.name) + " is " + a.t.Describe() + " but " + first->name +
                                " is " + first->t.Describe() +
                                " (floating arguments of one op share a dtype)");
    }
  }
  return Status::Ok();
}

// `a` (when defined) has dtype `want`.
Status CheckDType(const char* op, const Arg& a, DType want) {
  if (a.t.defined() && a.t.dtype() != want) {
    return DTypeError(op, std::string(a.name) + " is " + a.t.Describe() + "; expected " +
                              std::string(DTypeName(want)));
  }
  return Status::Ok();
}

// `a` (when defined) has exactly shape `want`; `why` explains where `want` comes from.
template <typename Why>
Status CheckShape(const char* op, const Arg& a, const Shape& want, const Why& why) {
  if (a.t.defined() && !(a.t.shape() == want)) {
    return ShapeError(op, std::string(a.name) + " has shape " + S(a.t) + " but expected " +
                              S(want) + " (" + why() + ")");
  }
  return Status::Ok();
}

// `a` (when defined) has `want` elements.
template <typename Why>
Status CheckNumel(const char* op, const Arg& a, int64_t want, const Why& why) {
  if (a.t.defined() && a.t.numel() != want) {
    return ShapeError(op, std::string(a.name) + " has shape " + S(a.t) + " (" + I(a.t.numel()) +
                              " elements) but expected " + I(want) + " elements (" + why() + ")");
  }
  return Status::Ok();
}

Status CheckNdimAtLeast(const char* op, const Arg& a, int n) {
  if (a.t.defined() && a.t.ndim() < n) {
    return ShapeError(op, std::string(a.name) + " has shape " + S(a.t) + "; expected at least " +
                              I(n) + " dimensions");
  }
  return Status::Ok();
}

// [rows, cols] of a tensor seen as a matrix.
Shape Matrix(int64_t rows, int64_t cols) { return Shape{rows, cols}; }

// True when the tensor seen as [rows, last] is [rows, cols]; for messages see CheckMatrix.
template <typename Why>
Status CheckMatrix(const char* op, const Arg& a, int64_t rows, int64_t cols, const Why& why) {
  if (!a.t.defined()) return Status::Ok();
  if (a.t.ndim() < 1 || a.t.shape().last() != cols || a.t.shape().rows() != rows) {
    return ShapeError(op, std::string(a.name) + " has shape " + S(a.t) + " but expected " +
                              S(Matrix(rows, cols)) + " (" + why() + ")");
  }
  return Status::Ok();
}

}  // namespace

Status Gemm(Tensor c, Tensor a, Tensor b, bool trans_a, bool trans_b, float alpha, float beta) {
  constexpr const char* op = "Gemm";
  RETURN_IF_ERROR(CheckDefined(op, {{"c", c}, {"a", a}, {"b", b}}));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, {{"c", c}, {"a", a}, {"b", b}}));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"c", c}, {"a", a}, {"b", b}}));
  // Leading dimensions are flattened into rows: each operand is seen as [rows, last].
  for (const Arg& x : {Arg{"a", a}, Arg{"b", b}, Arg{"c", c}}) {
    if (x.t.ndim() < 1) {
      return ShapeError(op, std::string(x.name) + " has shape " + S(x.t) + "; expected a matrix");
    }
  }
  const int64_t a_rows = a.shape().rows(), a_cols = a.shape().last();
  const int64_t b_rows = b.shape().rows(), b_cols = b.shape().last();
  const int64_t m = trans_a ? a_cols : a_rows;
  const int64_t k = trans_a ? a_rows : a_cols;
  const int64_t kb = trans_b ? b_cols : b_rows;
  const int64_t n = trans_b ? b_rows : b_cols;
  if (k != kb) {
    return ShapeError(op, "inner dimensions differ: op(a) of a" + S(a) + (trans_a ? "ᵀ" : "") +
                              " has K=" + I(k) + ", op(b) of b" + S(b) + (trans_b ? "ᵀ" : "") +
                              " has K=" + I(kb));
  }
  RETURN_IF_ERROR(CheckMatrix(
      op, {"c", c}, m, n, [&] { return std::string("[M,N] from a" + S(a) + " and b" + S(b)); }));
  return be->gemm(c, a, b, trans_a, trans_b, alpha, beta);
}

Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  constexpr const char* op = "MatmulForward";
  RETURN_IF_ERROR(CheckDefined(op, {{"out", out}, {"inp", inp}, {"weight", weight}}));
  ASSIGN_OR_RETURN(
      const KernelBackend* be,
      CheckDevices(op, {{"out", out}, {"inp", inp}, {"weight", weight}, {"bias", bias}}));
  RETURN_IF_ERROR(
      CheckSameFloating(op, {{"out", out}, {"inp", inp}, {"weight", weight}, {"bias", bias}}));
  RETURN_IF_ERROR(CheckNdimAtLeast(op, {"inp", inp}, 1));
  if (weight.ndim() != 2) {
    return ShapeError(op, "weight has shape " + S(weight) + "; expected [OC,IC]");
  }
  const int64_t oc = weight.dim(0), ic = weight.dim(1);
  if (inp.shape().last() != ic) {
    return ShapeError(op, "inp has shape " + S(inp) + " but weight " + S(weight) +
                              " expects IC=" + I(ic) + " in its last dimension");
  }
  const int64_t n = inp.shape().rows();
  RETURN_IF_ERROR(CheckMatrix(op, {"out", out}, n, oc, [&] {
    return std::string("[N,OC] from inp " + S(inp) + " and weight " + S(weight));
  }));
  RETURN_IF_ERROR(CheckShape(op, {"bias", bias}, Shape{oc},
                             [&] { return std::string("[OC] of weight " + S(weight)); }));
  return be->matmul_forward(out, inp, weight, bias);
}

Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                      Tensor weight) {
  constexpr const char* op = "MatmulBackward";
  RETURN_IF_ERROR(
      CheckDefined(op, {{"dweight", dweight}, {"dout", dout}, {"inp", inp}, {"weight", weight}}));
  const std::initializer_list<Arg> all = {{"dinp", dinp}, {"dweight", dweight}, {"dbias", dbias},
                                          {"dout", dout}, {"inp", inp},         {"weight", weight}};
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, all));
  RETURN_IF_ERROR(CheckNdimAtLeast(op, {"inp", inp}, 1));
  if (weight.ndim() != 2) {
    return ShapeError(op, "weight has shape " + S(weight) + "; expected [OC,IC]");
  }
  const int64_t oc = weight.dim(0), ic = weight.dim(1);
  if (inp.shape().last() != ic) {
    return ShapeError(op, "inp has shape " + S(inp) + " but weight " + S(weight) +
                              " expects IC=" + I(ic) + " in its last dimension");
  }
  const int64_t n = inp.shape().rows();
  RETURN_IF_ERROR(CheckMatrix(op, {"dout", dout}, n, oc, [&] {
    return std::string("[N,OC] from inp " + S(inp) + " and weight " + S(weight));
  }));
  RETURN_IF_ERROR(CheckNumel(op, {"dinp", dinp}, inp.numel(),
                             [&] { return std::string("like inp " + S(inp)); }));
  RETURN_IF_ERROR(CheckShape(op, {"dweight", dweight}, weight.shape(),
                             [&] { return std::string("like weight"); }));
  RETURN_IF_ERROR(CheckShape(op, {"dbias", dbias}, Shape{oc},
                             [&] { return std::string("[OC] of weight " + S(weight)); }));
  return be->matmul_backward(dinp, dweight, dbias, dout, inp, weight);
}

Status LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                        Tensor bias) {
  constexpr const char* op = "LayerNormForward";
  const std::initializer_list<Arg> all = {{"out", out}, {"mean", mean},     {"rstd", rstd},
                                          {"inp", inp}, {"weight", weight}, {"bias", bias}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(
      CheckSameFloating(op, {{"out", out}, {"inp", inp}, {"weight", weight}, {"bias", bias}}));
  RETURN_IF_ERROR(CheckDType(op, {"mean", mean}, DType::kF32));
  RETURN_IF_ERROR(CheckDType(op, {"rstd", rstd}, DType::kF32));
  RETURN_IF_ERROR(CheckNdimAtLeast(op, {"inp", inp}, 1));
  const int64_t c = inp.shape().last(), n = inp.shape().rows();
  RETURN_IF_ERROR(
      CheckShape(op, {"out", out}, inp.shape(), [&] { return std::string("like inp"); }));
  RETURN_IF_ERROR(
      CheckNumel(op, {"mean", mean}, n, [&] { return std::string("[N] rows of inp " + S(inp)); }));
  RETURN_IF_ERROR(
      CheckNumel(op, {"rstd", rstd}, n, [&] { return std::string("[N] rows of inp " + S(inp)); }));
  RETURN_IF_ERROR(CheckShape(op, {"weight", weight}, Shape{c},
                             [&] { return std::string("[C] of inp " + S(inp)); }));
  RETURN_IF_ERROR(CheckShape(op, {"bias", bias}, Shape{c},
                             [&] { return std::string("[C] of inp " + S(inp)); }));
  return be->layernorm_forward(out, mean, rstd, inp, weight, bias);
}

Status LayerNormBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                         Tensor weight, Tensor mean, Tensor rstd) {
  constexpr const char* op = "LayerNormBackward";
  RETURN_IF_ERROR(CheckDefined(op, {{"dweight", dweight},
                                    {"dbias", dbias},
                                    {"dout", dout},
                                    {"inp", inp},
                                    {"weight", weight},
                                    {"mean", mean},
                                    {"rstd", rstd}}));
  const std::initializer_list<Arg> all = {{"dinp", dinp}, {"dweight", dweight}, {"dbias", dbias},
                                          {"dout", dout}, {"inp", inp},         {"weight", weight},
                                          {"mean", mean}, {"rstd", rstd}};
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"dinp", dinp},
                                         {"dweight", dweight},
                                         {"dbias", dbias},
                                         {"dout", dout},
                                         {"inp", inp},
                                         {"weight", weight}}));
  RETURN_IF_ERROR(CheckDType(op, {"mean", mean}, DType::kF32));
  RETURN_IF_ERROR(CheckDType(op, {"rstd", rstd}, DType::kF32));
  RETURN_IF_ERROR(CheckNdimAtLeast(op, {"inp", inp}, 1));
  const int64_t c = inp.shape().last(), n = inp.shape().rows();
  RETURN_IF_ERROR(
      CheckShape(op, {"dout", dout}, inp.shape(), [&] { return std::string("like inp"); }));
  RETURN_IF_ERROR(
      CheckShape(op, {"dinp", dinp}, inp.shape(), [&] { return std::string("like inp"); }));
  RETURN_IF_ERROR(
      CheckNumel(op, {"mean", mean}, n, [&] { return std::string("[N] rows of inp " + S(inp)); }));
  RETURN_IF_ERROR(
      CheckNumel(op, {"rstd", rstd}, n, [&] { return std::string("[N] rows of inp " + S(inp)); }));
  RETURN_IF_ERROR(CheckShape(op, {"weight", weight}, Shape{c},
                             [&] { return std::string("[C] of inp " + S(inp)); }));
  RETURN_IF_ERROR(CheckShape(op, {"dweight", dweight}, Shape{c},
                             [&] { return std::string("[C] of inp " + S(inp)); }));
  RETURN_IF_ERROR(CheckShape(op, {"dbias", dbias}, Shape{c},
                             [&] { return std::string("[C] of inp " + S(inp)); }));
  return be->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
}

Status GeluForward(Tensor out, Tensor inp) {
  constexpr const char* op = "GeluForward";
  RETURN_IF_ERROR(CheckDefined(op, {{"out", out}, {"inp", inp}}));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, {{"out", out}, {"inp", inp}}));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"out", out}, {"inp", inp}}));
  RETURN_IF_ERROR(
      CheckShape(op, {"out", out}, inp.shape(), [&] { return std::string("like inp"); }));
  return be->gelu_forward(out, inp);
}

Status GeluBackward(Tensor dinp, Tensor inp, Tensor dout, bool accumulate) {
  constexpr const char* op = "GeluBackward";
  const std::initializer_list<Arg> all = {{"dinp", dinp}, {"inp", inp}, {"dout", dout}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, all));
  RETURN_IF_ERROR(
      CheckShape(op, {"dinp", dinp}, inp.shape(), [&] { return std::string("like inp"); }));
  RETURN_IF_ERROR(
      CheckShape(op, {"dout", dout}, inp.shape(), [&] { return std::string("like inp"); }));
  return be->gelu_backward(dinp, inp, dout, accumulate);
}

namespace {
// Shared checks of the attention pair: qkv [B,T,3C], n_head divides C.
Status CheckAttentionQkv(const char* op, const Tensor& qkv, int n_head) {
  if (qkv.ndim() != 3 || qkv.dim(2) % 3 != 0) {
    return ShapeError(op, "qkv has shape " + S(qkv) + "; expected [B,T,3C]");
  }
  const int64_t c = qkv.dim(2) / 3;
  if (n_head <= 0 || c % n_head != 0) {
    return InvalidArgument(std::string(op) + ": n_head " + I(n_head) +
                           " does not divide C=" + I(c) + " of qkv " + S(qkv));
  }
  return Status::Ok();
}
}  // namespace

Status AttentionForward(Tensor out, Tensor att, Tensor qkv, int n_head) {
  constexpr const char* op = "AttentionForward";
  const std::initializer_list<Arg> all = {{"out", out}, {"att", att}, {"qkv", qkv}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"out", out}, {"qkv", qkv}}));
  RETURN_IF_ERROR(CheckDType(op, {"att", att}, DType::kF32));
  RETURN_IF_ERROR(CheckAttentionQkv(op, qkv, n_head));
  const int64_t b = qkv.dim(0), t = qkv.dim(1), c = qkv.dim(2) / 3;
  RETURN_IF_ERROR(CheckShape(op, {"out", out}, Shape{b, t, c},
                             [&] { return std::string("[B,T,C] of qkv " + S(qkv)); }));
  RETURN_IF_ERROR(CheckShape(op, {"att", att}, Shape{b, n_head, t, t}, [&] {
    return std::string("[B,n_head,T,T] of qkv " + S(qkv) + " and n_head " + I(n_head));
  }));
  return be->attention_forward(out, att, qkv, n_head);
}

Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor att, int n_head,
                         bool accumulate) {
  constexpr const char* op = "AttentionBackward";
  const std::initializer_list<Arg> all = {
      {"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"att", att}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}}));
  RETURN_IF_ERROR(CheckDType(op, {"att", att}, DType::kF32));
  RETURN_IF_ERROR(CheckAttentionQkv(op, qkv, n_head));
  const int64_t b = qkv.dim(0), t = qkv.dim(1), c = qkv.dim(2) / 3;
  RETURN_IF_ERROR(
      CheckShape(op, {"dqkv", dqkv}, qkv.shape(), [&] { return std::string("like qkv"); }));
  RETURN_IF_ERROR(CheckShape(op, {"dout", dout}, Shape{b, t, c},
                             [&] { return std::string("[B,T,C] of qkv " + S(qkv)); }));
  RETURN_IF_ERROR(CheckShape(op, {"att", att}, Shape{b, n_head, t, t}, [&] {
    return std::string("[B,n_head,T,T] of qkv " + S(qkv) + " and n_head " + I(n_head));
  }));
  return be->attention_backward(dqkv, dout, qkv, att, n_head, accumulate);
}

Status EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, int64_t vocab_start) {
  constexpr const char* op = "EmbeddingForward";
  const std::initializer_list<Arg> all = {{"out", out}, {"tokens", tokens}, {"wte", wte}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"out", out}, {"wte", wte}}));
  RETURN_IF_ERROR(CheckDType(op, {"tokens", tokens}, DType::kI32));
  if (wte.ndim() != 2) return ShapeError(op, "wte has shape " + S(wte) + "; expected [V,C]");
  RETURN_IF_ERROR(CheckMatrix(op, {"out", out}, tokens.numel(), wte.dim(1), [&] {
    return std::string("one row of C per token: tokens " + S(tokens) + ", wte " + S(wte));
  }));
  return be->embedding_forward(out, tokens, wte, vocab_start);
}

Status EmbeddingBackward(Tensor dwte, Tensor dout, Tensor tokens, int64_t vocab_start) {
  constexpr const char* op = "EmbeddingBackward";
  const std::initializer_list<Arg> all = {{"dwte", dwte}, {"dout", dout}, {"tokens", tokens}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"dwte", dwte}, {"dout", dout}}));
  RETURN_IF_ERROR(CheckDType(op, {"tokens", tokens}, DType::kI32));
  if (dwte.ndim() != 2) return ShapeError(op, "dwte has shape " + S(dwte) + "; expected [V,C]");
  RETURN_IF_ERROR(CheckMatrix(op, {"dout", dout}, tokens.numel(), dwte.dim(1), [&] {
    return std::string("one row of C per token: tokens " + S(tokens) + ", dwte " + S(dwte));
  }));
  return be->embedding_backward(dwte, dout, tokens, vocab_start);
}

namespace {
// out/dout [.., T, C] against wpe [T_max, C] from pos_start.
Status CheckPositions(const char* op, const Arg& x, const Arg& w, int64_t pos_start) {
  RETURN_IF_ERROR(CheckNdimAtLeast(op, x, 2));
  if (w.t.ndim() != 2) {
    return ShapeError(op, std::string(w.name) + " has shape " + S(w.t) + "; expected [T_max,C]");
  }
  const int64_t t = x.t.dim(x.t.ndim() - 2);
  if (x.t.shape().last() != w.t.dim(1)) {
    return ShapeError(op, std::string(x.name) + " has shape " + S(x.t) + " but " + w.name +
                              " has shape " + S(w.t) + " (C differs)");
  }
  if (pos_start < 0 || pos_start + t > w.t.dim(0)) {
    return ShapeError(op, "positions [" + I(pos_start) + ", " + I(pos_start + t) + ") of " +
                              x.name + " " + S(x.t) + " are outside " + w.name + " " + S(w.t));
  }
  return Status::Ok();
}
}  // namespace

Status PositionEmbeddingAdd(Tensor out, Tensor wpe, int64_t pos_start) {
  constexpr const char* op = "PositionEmbeddingAdd";
  const std::initializer_list<Arg> all = {{"out", out}, {"wpe", wpe}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, all));
  RETURN_IF_ERROR(CheckPositions(op, {"out", out}, {"wpe", wpe}, pos_start));
  return be->position_embedding_add(out, wpe, pos_start);
}

Status PositionEmbeddingBackward(Tensor dwpe, Tensor dout, int64_t pos_start) {
  constexpr const char* op = "PositionEmbeddingBackward";
  const std::initializer_list<Arg> all = {{"dwpe", dwpe}, {"dout", dout}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, all));
  RETURN_IF_ERROR(CheckPositions(op, {"dout", dout}, {"dwpe", dwpe}, pos_start));
  return be->position_embedding_backward(dwpe, dout, pos_start);
}

Status SoftmaxCrossEntropy(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                           float dloss) {
  constexpr const char* op = "SoftmaxCrossEntropy";
  RETURN_IF_ERROR(CheckDefined(op, {{"losses", losses}, {"logits", logits}, {"targets", targets}}));
  const std::initializer_list<Arg> all = {
      {"losses", losses}, {"dlogits", dlogits}, {"logits", logits}, {"targets", targets}};
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"logits", logits}, {"dlogits", dlogits}}));
  RETURN_IF_ERROR(CheckDType(op, {"losses", losses}, DType::kF32));
  RETURN_IF_ERROR(CheckDType(op, {"targets", targets}, DType::kI32));
  RETURN_IF_ERROR(CheckNdimAtLeast(op, {"logits", logits}, 1));
  const int64_t n = logits.shape().rows();
  RETURN_IF_ERROR(CheckNumel(op, {"losses", losses}, n,
                             [&] { return std::string("[N] rows of logits " + S(logits)); }));
  RETURN_IF_ERROR(CheckNumel(op, {"targets", targets}, n,
                             [&] { return std::string("[N] rows of logits " + S(logits)); }));
  RETURN_IF_ERROR(CheckShape(op, {"dlogits", dlogits}, logits.shape(),
                             [&] { return std::string("like logits"); }));
  return be->softmax_cross_entropy(losses, dlogits, logits, targets, dloss);
}

Status Add(Tensor out, Tensor a, Tensor b) {
  constexpr const char* op = "Add";
  const std::initializer_list<Arg> all = {{"out", out}, {"a", a}, {"b", b}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, all));
  RETURN_IF_ERROR(CheckShape(op, {"b", b}, a.shape(), [&] { return std::string("like a"); }));
  RETURN_IF_ERROR(CheckShape(op, {"out", out}, a.shape(), [&] { return std::string("like a"); }));
  return be->add(out, a, b);
}

Status Accumulate(Tensor dst, Tensor src) {
  constexpr const char* op = "Accumulate";
  const std::initializer_list<Arg> all = {{"dst", dst}, {"src", src}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, all));
  RETURN_IF_ERROR(
      CheckShape(op, {"src", src}, dst.shape(), [&] { return std::string("like dst"); }));
  return be->accumulate(dst, src);
}

Status Scale(Tensor x, float s) {
  constexpr const char* op = "Scale";
  RETURN_IF_ERROR(CheckDefined(op, {{"x", x}}));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, {{"x", x}}));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"x", x}}));
  return be->scale(x, s);
}

Status Zero(Tensor x) {
  constexpr const char* op = "Zero";
  RETURN_IF_ERROR(CheckDefined(op, {{"x", x}}));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, {{"x", x}}));
  return be->zero(x);
}

Result<double> SumOfSquares(Tensor x) {
  constexpr const char* op = "SumOfSquares";
  RETURN_IF_ERROR(CheckDefined(op, {{"x", x}}));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, {{"x", x}}));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"x", x}}));
  return be->sum_of_squares(x);
}

Status AdamW(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_copy,
             const AdamWParams& hp) {
  constexpr const char* op = "AdamW";
  RETURN_IF_ERROR(CheckDefined(op, {{"param", param}, {"grad", grad}, {"m", m}, {"v", v}}));
  const std::initializer_list<Arg> all = {
      {"param", param}, {"grad", grad}, {"m", m}, {"v", v}, {"param_copy", param_copy}};
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckDType(op, {"param", param}, DType::kF32));
  RETURN_IF_ERROR(CheckDType(op, {"m", m}, DType::kF32));
  RETURN_IF_ERROR(CheckDType(op, {"v", v}, DType::kF32));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"grad", grad}}));
  if (param_copy.defined() && param_copy.dtype() != DType::kBF16 &&
      param_copy.dtype() != DType::kF16) {
    return DTypeError(op, "param_copy is " + param_copy.Describe() + "; expected bf16 or f16");
  }
  const int64_t n = param.numel();
  const auto why = [&] { return "numel of param " + S(param); };
  RETURN_IF_ERROR(CheckNumel(op, {"grad", grad}, n, why));
  RETURN_IF_ERROR(CheckNumel(op, {"m", m}, n, why));
  RETURN_IF_ERROR(CheckNumel(op, {"v", v}, n, why));
  RETURN_IF_ERROR(CheckNumel(op, {"param_copy", param_copy}, n, why));
  if (hp.step < 1) {
    return InvalidArgument("AdamW: step " + I(hp.step) + " must be ≥ 1 (1-based)");
  }
  if (!(hp.beta1 >= 0.0f && hp.beta1 < 1.0f) || !(hp.beta2 >= 0.0f && hp.beta2 < 1.0f)) {
    return InvalidArgument("AdamW: beta1 " + std::to_string(hp.beta1) + " and beta2 " +
                           std::to_string(hp.beta2) + " must be in [0, 1)");
  }
  return be->adamw(param, grad, m, v, param_copy, hp);
}

Status Convert(Tensor dst, Tensor src) {
  constexpr const char* op = "Convert";
  const std::initializer_list<Arg> all = {{"dst", dst}, {"src", src}};
  RETURN_IF_ERROR(CheckDefined(op, all));
  ASSIGN_OR_RETURN(const KernelBackend* be, CheckDevices(op, all));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"dst", dst}}));
  RETURN_IF_ERROR(CheckSameFloating(op, {{"src", src}}));
  RETURN_IF_ERROR(CheckNumel(op, {"dst", dst}, src.numel(),
                             [&] { return std::string("numel of src " + S(src)); }));
  return be->convert(dst, src);
}

Status Copy(Tensor dst, Tensor src) {
  constexpr const char* op = "Copy";
  RETURN_IF_ERROR(CheckDefined(op, {{"dst", dst}, {"src", src}}));
  if (dst.dtype() != src.dtype()) {
    return DTypeError(op, "dst is " + dst.Describe() + " but src is " + src.Describe());
  }
  RETURN_IF_ERROR(CheckNumel(op, {"dst", dst}, src.numel(),
                             [&] { return std::string("numel of src " + S(src)); }));
  // Either side on a device: that device's backend copies (it handles host memory too).
  const Device device = dst.device() != Device::kCpu ? dst.device() : src.device();
  const KernelBackend* be = BackendFor(device);
  if (be == nullptr) {
    return Unimplemented("Copy: no CUDA backend in this build (dst " + dst.Describe() + ", src " +
                         src.Describe() + ")");
  }
  return be->copy(dst, src);
}

Status Synchronize(Device device) {
  const KernelBackend* be = BackendFor(device);
  if (be == nullptr) {
    return Unimplemented(std::string("Synchronize: no ") + DeviceName(device) +
                         " backend in this build");
  }
  return be->synchronize();
}

}  // namespace rt
