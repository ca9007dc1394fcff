// Tensors: shapes, non-owning views, owned device buffers and the arena that carves one buffer
// into many tensors (STYLE.md rule 8: memory has one owner, views never own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kernels/dtype.h"

namespace rt {

// Where a tensor's memory lives.
enum class Device : uint8_t { kCpu = 0, kCuda = 1 };

// "cpu" or "cuda".
const char* DeviceName(Device device);
// Parses "cpu" or "cuda". Errors: InvalidArgument naming the value.
Result<Device> ParseDevice(std::string_view name);
// OK when tensors can be allocated and ops run on `device` here: always on the CPU; for kCuda, in
// a build with the CUDA backend and on a machine whose CUDA runtime reports a usable device.
// Errors: Unimplemented (no CUDA backend in this build) or Unavailable (no usable device), naming
// why. Initialises the CUDA runtime on first call for kCuda.
Status CheckDeviceAvailable(Device device);

// Up to four dimensions, row-major (the last dimension is contiguous).
struct Shape {
  static constexpr int kMaxDims = 4;
  int ndim = 0;
  int64_t dims[kMaxDims] = {0, 0, 0, 0};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);  // aborts on more than kMaxDims (a programming error)

  // Product of the dimensions (1 for a scalar, ndim = 0).
  int64_t numel() const;
  // Size of the last dimension; 1 for a scalar.
  int64_t last() const { return ndim ? dims[ndim - 1] : 1; }
  // Product of all but the last dimension (the "rows" of a matrix view).
  int64_t rows() const { return ndim ? numel() / last() : 1; }
  std::string ToString() const;  // "[4,64]"
  bool operator==(const Shape& o) const;
};

// A non-owning view of contiguous memory with a dtype, shape and device. Cheap to copy. A
// default-constructed Tensor is "undefined" and stands for an absent optional argument (e.g. no
// bias). Whoever created the memory (a Buffer or Arena) must outlive every view.
class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape, Device device = Device::kCpu)
      : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

  bool defined() const { return data_ != nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  int64_t dim(int i) const { return shape_.dims[i]; }
  int ndim() const { return shape_.ndim; }

  // The same memory with another shape of equal numel; InvalidArgument otherwise.
  Result<Tensor> Reshape(Shape shape) const;
  // Rows [begin, begin+count) of the tensor seen as [rows, last]; OutOfRange if outside.
  Result<Tensor> Rows(int64_t begin, int64_t count) const;
  // Elements [offset, offset+count) as a 1-D view; OutOfRange if outside.
  Result<Tensor> Flat(int64_t offset, int64_t count) const;
  // "f32[4,64]@cpu".
  std::string Describe() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_ = Device::kCpu;
};

// An owned block of device memory, 64-byte aligned on the CPU (cudaMalloc on CUDA). Movable.
// Zero-filled on allocation.
class Buffer {
 public:
  // Allocates `bytes`. Errors: ResourceExhausted if out of memory; Unimplemented for kCuda in a
  // build without CUDA; CudaError if the CUDA runtime fails.
  static Result<Buffer> Allocate(Device device, size_t bytes);

  Buffer() = default;
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  void* data() const { return data_.get(); }
  size_t size() const { return size_; }
  Device device() const { return device_; }
  // A view of the whole buffer as `dtype` with `shape` (numel must fit; RT_CHECKed).
  Tensor View(DType dtype, Shape shape, size_t byte_offset = 0) const;

 private:
  struct Free {
    Device device;
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_{nullptr, Free{Device::kCpu}};
  size_t size_ = 0;
  Device device_ = Device::kCpu;
};

// One buffer carved into named tensors (after llm.c's malloc_and_point_parameters): add every
// tensor's dtype and shape, then Allocate once; each tensor starts 64-byte aligned. The model's
// parameters, gradients and optimizer state each live in one arena, so a whole set can be
// reduced, copied or checkpointed as one flat range. Not thread-safe during building.
class Arena {
 public:
  // Adds a tensor to the layout and returns its index. Only before Allocate().
  int Add(std::string name, DType dtype, Shape shape);
  // Allocates the buffer (zero-filled) on `device`.
  Status Allocate(Device device);

  int size() const { return static_cast<int>(entries_.size()); }
  // The view of tensor `index` (after Allocate).
  Tensor Get(int index) const;
  const std::string& name(int index) const { return entries_[index].name; }
  // Byte offset of tensor `index` in the buffer.
  size_t offset(int index) const { return entries_[index].offset; }
  // Total bytes including alignment padding.
  size_t bytes() const { return total_; }
  // The whole buffer as bytes (after Allocate).
  Tensor All() const { return buffer_.View(DType::kU8, Shape{static_cast<int64_t>(total_)}); }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    size_t offset;
  };
  std::vector<Entry> entries_;
  size_t total_ = 0;
  Buffer buffer_;
};

}  // namespace rt
