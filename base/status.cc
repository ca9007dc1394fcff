#include "base/status.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rt {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kOutOfRange:
      return "OutOfRange";
    case StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kNoSpace:
      return "NoSpace";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kUnauthenticated:
      return "Unauthenticated";
    case StatusCode::kShapeMismatch:
      return "ShapeMismatch";
    case StatusCode::kDTypeMismatch:
      return "DTypeMismatch";
    case StatusCode::kDeviceMismatch:
      return "DeviceMismatch";
    case StatusCode::kCudaError:
      return "CudaError";
    case StatusCode::kCublasError:
      return "CublasError";
    case StatusCode::kPeerFailed:
      return "PeerFailed";
    case StatusCode::kCommAborted:
      return "CommAborted";
    case StatusCode::kProtocolError:
      return "ProtocolError";
    case StatusCode::kNcclError:
      return "NcclError";
    case StatusCode::kChecksumMismatch:
      return "ChecksumMismatch";
    case StatusCode::kStaleVersion:
      return "StaleVersion";
    case StatusCode::kNotServing:
      return "NotServing";
    case StatusCode::kRocksDbError:
      return "RocksDbError";
    case StatusCode::kStaleGeneration:
      return "StaleGeneration";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message, bool retryable) {
  if (code == StatusCode::kOk) internal::AbortWithMessage("Status(kOk, ...) is not an error");
  state_ = std::make_unique<State>(State{code, retryable, std::move(message)});
}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  return *this;
}

std::string_view Status::message() const { return state_ ? state_->message : std::string_view(); }

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(state_->code));
  out += ": ";
  out += state_->message;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  std::string message(context);
  message += ": ";
  message += state_->message;
  return Status(state_->code, std::move(message), state_->retryable);
}

Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status OutOfRange(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
Status DeadlineExceeded(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m), /*retryable=*/true);
}
Status Aborted(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
Status Unavailable(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m), /*retryable=*/true);
}
Status Corruption(std::string m) { return Status(StatusCode::kCorruption, std::move(m)); }
Status FailedPrecondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status Unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }
Status Unauthenticated(std::string m) { return Status(StatusCode::kUnauthenticated, std::move(m)); }

namespace {
std::string Location(const SourceLocation& where) {
  std::string_view file = where.file_name();
  size_t slash = file.rfind('/');
  if (slash != std::string_view::npos) file.remove_prefix(slash + 1);
  return " [" + std::string(file) + ":" + std::to_string(where.line()) + "]";
}
}  // namespace

Status ErrnoStatus(int err, std::string_view what, SourceLocation where) {
  StatusCode code = StatusCode::kIoError;
  bool retryable = false;
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      code = StatusCode::kNoSpace;
      break;
    case ETIMEDOUT:
      code = StatusCode::kDeadlineExceeded;
      retryable = true;
      break;
    case ECONNRESET:
    case EPIPE:
    case ECONNREFUSED:
    case ECONNABORTED:
    case EHOSTUNREACH:
      code = StatusCode::kUnavailable;
      retryable = true;
      break;
    case ENOENT:
      code = StatusCode::kNotFound;
      break;
    case EEXIST:
      code = StatusCode::kAlreadyExists;
      break;
    case EINVAL:
      code = StatusCode::kInvalidArgument;
      break;
    case ENOMEM:
      code = StatusCode::kResourceExhausted;
      break;
    case EAGAIN:
    case EINTR:
      retryable = true;
      break;
    default:
      break;
  }
  std::string message(what);
  message += ": ";
  message += std::strerror(err);
  message += Location(where);
  return Status(code, std::move(message), retryable);
}

Status ForeignError(StatusCode code, std::string_view what, SourceLocation where) {
  return Status(code, std::string(what) + Location(where));
}

namespace internal {
void AbortWithMessage(std::string_view message) {
  std::fprintf(stderr, "ringtrain fatal: %.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::abort();
}
}  // namespace internal

}  // namespace rt
