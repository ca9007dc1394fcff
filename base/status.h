// Status and Result<T>: the one error type of ringtrain (STYLE.md rule 4).
//
// A Status is either OK or carries a code, a message naming what failed, and a retryable flag.
// An OK Status holds no allocation. Result<T> holds either a value or a non-OK Status.
// No exceptions cross a folder's boundary: functions that can fail return one of these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace rt {

// Status codes, grouped per folder. Values are stable: never change the meaning of one.
enum class StatusCode : uint16_t {
  kOk = 0,
  // base: 1-99
  kInvalidArgument = 1,      // bad input from a caller, a file or a command line
  kNotFound = 2,             // a named thing does not exist
  kAlreadyExists = 3,        // a named thing exists and must not
  kOutOfRange = 4,           // an index, offset or value beyond its bounds
  kDeadlineExceeded = 5,     // a wait ran past its deadline
  kAborted = 6,              // the operation was aborted (by Abort() or shutdown)
  kUnavailable = 7,          // a peer or service cannot be reached now
  kCorruption = 8,           // stored or received data failed a check (magic, CRC, length)
  kIoError = 9,              // an operating-system I/O call failed
  kNoSpace = 10,             // a device or allocator is full (ENOSPC)
  kFailedPrecondition = 11,  // the system is not in a state where the call is allowed
  kUnimplemented = 12,       // the operation is not supported by this backend
  kInternal = 13,            // a bug or an unexpected state
  kCancelled = 14,           // the caller gave up on the operation
  kResourceExhausted = 15,   // memory or another resource ran out
  kUnauthenticated = 16,     // the peer did not prove that it holds the cluster secret
  // kernels: 100-199
  kShapeMismatch = 100,   // tensor shapes do not fit the operation
  kDTypeMismatch = 101,   // tensor dtypes do not fit the operation
  kDeviceMismatch = 102,  // tensors on different devices
  kCudaError = 110,       // a CUDA runtime or driver call failed
  kCublasError = 111,     // a cuBLAS/cuBLASLt call failed
  // comm: 200-299
  kPeerFailed = 200,     // a peer rank died, closed its connection or fell silent
  kCommAborted = 201,    // the communicator was aborted
  kProtocolError = 202,  // a peer broke the wire protocol (bad frame, mismatched op)
  kNcclError = 210,      // an NCCL call failed
  // iofs: 300-399
  kChecksumMismatch = 300,  // a chunk or block checksum did not verify
  kStaleVersion = 301,      // a chunk or chain version is older than required
  kNotServing = 302,        // a replica is syncing or has left its chain
  kRocksDbError = 310,      // a RocksDB call failed
  // ckpt: 400-499, parallel: 500-599, elastic: 600-699, daemon: 700-799
  kStaleGeneration = 600,  // a message from an old membership generation
};

// Returns the name of a code, e.g. "InvalidArgument".
std::string_view StatusCodeName(StatusCode code);

// The result of an operation that can fail. Cheap to copy when OK. Thread-compatible.
class [[nodiscard]] Status {
 public:
  // An OK status.
  Status() = default;
  // A non-OK status; `code` must not be kOk. `retryable` marks transient failures
  // (a peer restarting, a full queue) that a caller may retry.
  Status(StatusCode code, std::string message, bool retryable = false);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status Ok() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // The message without the code name; empty when OK.
  std::string_view message() const;
  bool retryable() const { return state_ && state_->retryable; }
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;
  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

 private:
  struct State {
    StatusCode code;
    bool retryable;
    std::string message;
  };
  std::unique_ptr<State> state_;
};

// Convenience constructors, one per common code.
Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status OutOfRange(std::string message);
Status DeadlineExceeded(std::string message);
Status Aborted(std::string message);
Status Unavailable(std::string message);
Status Corruption(std::string message);
Status FailedPrecondition(std::string message);
Status Internal(std::string message);
Status Unimplemented(std::string message);
Status Unauthenticated(std::string message);

// The caller's file and line, taken as a default argument (`SourceLocation where =
// SourceLocation::current()`), like std::source_location, which clang 14 cannot provide with
// libstdc++ (it lacks __builtin_source_location); __builtin_FILE/LINE work in GCC and clang.
class SourceLocation {
 public:
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          unsigned line = __builtin_LINE()) {
    return SourceLocation(file, line);
  }
  // The source file's path as the compiler saw it.
  constexpr const char* file_name() const { return file_; }
  // The 1-based line number.
  constexpr unsigned line() const { return line_; }

 private:
  constexpr SourceLocation(const char* file, unsigned line) : file_(file), line_(line) {}
  const char* file_;
  unsigned line_;
};

// A Status for a failed OS call: the code follows errno (ENOSPC → kNoSpace, ETIMEDOUT →
// kDeadlineExceeded, ECONNRESET/EPIPE → kUnavailable, else kIoError), the message is
// "<what>: <strerror> [file:line]" with the caller's location.
Status ErrnoStatus(int err, std::string_view what,
                   SourceLocation where = SourceLocation::current());

// A Status for a foreign library's failure (CUDA, NCCL, RocksDB, io_uring), with the caller's
// file:line appended to the message.
Status ForeignError(StatusCode code, std::string_view what,
                    SourceLocation where = SourceLocation::current());

// Either a value of type T or a non-OK Status. Accessing the value of an error aborts
// (a broken invariant, not bad input): check ok() first or use ASSIGN_OR_RETURN.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::in_place_index<1>, std::move(value)) {}        // NOLINT: implicit
  Result(Status status) : data_(std::in_place_index<0>, std::move(status)) {  // NOLINT
    if (std::get<0>(data_).ok()) AbortOkStatusInResult();
  }

  bool ok() const { return data_.index() == 1; }
  // The error; OK if this holds a value.
  Status status() const { return ok() ? Status() : std::get<0>(data_); }

  T& value() & { return Get(); }
  const T& value() const& { return const_cast<Result*>(this)->Get(); }
  T&& value() && { return std::move(Get()); }
  T& operator*() & { return Get(); }
  const T& operator*() const& { return const_cast<Result*>(this)->Get(); }
  T* operator->() { return &Get(); }
  const T* operator->() const { return &const_cast<Result*>(this)->Get(); }

 private:
  [[noreturn]] static void AbortOkStatusInResult();
  [[noreturn]] void AbortNoValue() const;
  T& Get() {
    if (!ok()) AbortNoValue();
    return std::get<1>(data_);
  }
  std::variant<Status, T> data_;
};

namespace internal {
[[noreturn]] void AbortWithMessage(std::string_view message);
inline const Status& AsStatus(const Status& s) { return s; }
template <typename T>
Status AsStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

template <typename T>
void Result<T>::AbortOkStatusInResult() {
  internal::AbortWithMessage("Result constructed from an OK Status");
}
template <typename T>
void Result<T>::AbortNoValue() const {
  internal::AbortWithMessage("Result::value() on an error: " + std::get<0>(data_).ToString());
}

}  // namespace rt

#define RT_CONCAT_INNER(a, b) a##b
#define RT_CONCAT(a, b) RT_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status or Result) is an error.
#define RETURN_IF_ERROR(expr)                                   \
  do {                                                          \
    ::rt::Status rt_status_ = ::rt::internal::AsStatus((expr)); \
    if (!rt_status_.ok()) return rt_status_;                    \
  } while (0)

// `lhs = value of expr` when `expr` (a Result) is OK, else returns its Status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  RT_ASSIGN_OR_RETURN_IMPL(RT_CONCAT(rt_result_, __LINE__), lhs, expr, return )

// Coroutine twins: co_return instead of return.
#define CO_RETURN_IF_ERROR(expr)                                \
  do {                                                          \
    ::rt::Status rt_status_ = ::rt::internal::AsStatus((expr)); \
    if (!rt_status_.ok()) co_return rt_status_;                 \
  } while (0)
#define CO_ASSIGN_OR_RETURN(lhs, expr) \
  RT_ASSIGN_OR_RETURN_IMPL(RT_CONCAT(rt_result_, __LINE__), lhs, expr, co_return )

#define RT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr, ret) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) ret tmp.status();                    \
  lhs = std::move(tmp).value()

// Aborts the process with a message if `cond` is false. Only for broken invariants,
// never for bad input (STYLE.md rule 4).
#define RT_CHECK(cond)                                                                         \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::rt::internal::AbortWithMessage(std::string("CHECK failed: " #cond " at ") + __FILE__ + \
                                       ":" + std::to_string(__LINE__));                        \
  } while (0)
