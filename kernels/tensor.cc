#include "kernels/tensor.h"

#include <cstring>
#include <string>
#include <utility>

#include "kernels/impl/backend.h"

namespace rt {

namespace {
constexpr size_t kAlign = 64;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

const char* DeviceName(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

Result<Device> ParseDevice(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return InvalidArgument("unknown device '" + std::string(name) + "' (expected cpu or cuda)");
}

Status CheckDeviceAvailable(Device device) {
  const internal::KernelBackend* backend = internal::BackendFor(device);
  if (backend == nullptr) {
    return Unimplemented(std::string("no ") + DeviceName(device) +
                         " backend in this build (configure with -DRINGTRAIN_CUDA=ON and the CUDA "
                         "toolkit)");
  }
  return backend->available();
}

Shape::Shape(std::initializer_list<int64_t> d) {
  RT_CHECK(d.size() <= static_cast<size_t>(kMaxDims));
  for (int64_t v : d) dims[ndim++] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i) {
    if (dims[i] != o.dims[i]) return false;
  }
  return true;
}

Result<Tensor> Tensor::Reshape(Shape shape) const {
  if (shape.numel() != numel()) {
    return InvalidArgument("Reshape: " + Describe() + " has " + std::to_string(numel()) +
                           " elements, new shape " + shape.ToString() + " has " +
                           std::to_string(shape.numel()));
  }
  return Tensor(data_, dtype_, shape, device_);
}

Result<Tensor> Tensor::Rows(int64_t begin, int64_t count) const {
  const int64_t rows = shape_.rows();
  if (begin < 0 || count < 0 || begin + count > rows) {
    return OutOfRange("Rows: [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                      ") outside the " + std::to_string(rows) + " rows of " + Describe());
  }
  const Shape s{count, shape_.last()};
  char* p = static_cast<char*>(data_) + begin * shape_.last() * DTypeSize(dtype_);
  return Tensor(p, dtype_, s, device_);
}

Result<Tensor> Tensor::Flat(int64_t offset, int64_t count) const {
  if (offset < 0 || count < 0 || offset + count > numel()) {
    return OutOfRange("Flat: [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                      ") outside the " + std::to_string(numel()) + " elements of " + Describe());
  }
  char* p = static_cast<char*>(data_) + offset * DTypeSize(dtype_);
  return Tensor(p, dtype_, Shape{count}, device_);
}

std::string Tensor::Describe() const {
  return std::string(DTypeName(dtype_)) + shape_.ToString() + "@" + DeviceName(device_);
}

Result<Buffer> Buffer::Allocate(Device device, size_t bytes) {
  const internal::KernelBackend* backend = internal::BackendFor(device);
  if (backend == nullptr) {
    return Unimplemented("Buffer::Allocate: no CUDA backend in this build (" +
                         std::to_string(bytes) + " bytes requested)");
  }
  Buffer b;
  // Even an empty buffer gets memory, so that views of it (zero-element tensors) are defined
  // tensors rather than the "absent" Tensor().
  ASSIGN_OR_RETURN(void* p, backend->allocate(bytes > 0 ? bytes : kAlign));
  b.data_ = std::unique_ptr<void, Free>(p, Free{device});
  b.size_ = bytes;
  b.device_ = device;
  return b;
}

void Buffer::Free::operator()(void* p) const {
  if (p == nullptr) return;
  const internal::KernelBackend* backend = internal::BackendFor(device);
  RT_CHECK(backend != nullptr);
  backend->free(p);
}

Tensor Buffer::View(DType dtype, Shape shape, size_t byte_offset) const {
  RT_CHECK(shape.numel() >= 0);
  RT_CHECK(byte_offset + static_cast<size_t>(shape.numel()) * DTypeSize(dtype) <= size_);
  return Tensor(static_cast<char*>(data()) + byte_offset, dtype, shape, device_);
}

int Arena::Add(std::string name, DType dtype, Shape shape) {
  RT_CHECK(buffer_.data() == nullptr);
  const size_t offset = total_;
  entries_.push_back(Entry{std::move(name), dtype, shape, offset});
  total_ = AlignUp(offset + static_cast<size_t>(shape.numel()) * DTypeSize(dtype));
  return static_cast<int>(entries_.size()) - 1;
}

Status Arena::Allocate(Device device) {
  if (buffer_.data() != nullptr) return FailedPrecondition("Arena::Allocate: already allocated");
  ASSIGN_OR_RETURN(buffer_, Buffer::Allocate(device, total_));
  return Status::Ok();
}

Tensor Arena::Get(int index) const {
  RT_CHECK(index >= 0 && index < size());
  const Entry& e = entries_[index];
  if (buffer_.data() == nullptr) return Tensor();
  return buffer_.View(e.dtype, e.shape, e.offset);
}

}  // namespace rt
