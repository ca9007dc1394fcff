// Little-endian encoding helpers for wire frames and on-disk formats. ByteWriter appends to a
// growable buffer; ByteReader reads from a span with bounds checks, so a truncated or malformed
// input is an error (Corruption), never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/status.h"

namespace rt {

// Appends little-endian values to an owned byte vector. Not thread-safe.
class ByteWriter {
 public:
  template <typename T>
  requires std::is_arithmetic_v<T>
  void Put(T value) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));  // little-endian hosts only
  }
  void PutBytes(const void* data, size_t n) {
    const size_t at = bytes_.size();
    bytes_.resize(at + n);
    if (n) std::memcpy(bytes_.data() + at, data, n);
  }
  // A uint32 length followed by the bytes.
  void PutString(std::string_view s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    PutBytes(s.data(), s.size());
  }
  size_t size() const { return bytes_.size(); }
  std::vector<std::byte>& bytes() { return bytes_; }
  std::vector<std::byte> Take() { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

// Reads little-endian values from a borrowed span. `what` names the input in errors.
class ByteReader {
 public:
  ByteReader(std::span<const std::byte> bytes, std::string what)
      : bytes_(bytes), what_(std::move(what)) {}

  template <typename T>
  requires std::is_arithmetic_v<T> Result<T> Get() {
    RETURN_IF_ERROR(Need(sizeof(T)));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  // A view of the next n bytes.
  Result<std::span<const std::byte>> GetBytes(size_t n) {
    RETURN_IF_ERROR(Need(n));
    auto view = bytes_.subspan(pos_, n);
    pos_ += n;
    return view;
  }
  // A uint32 length then that many bytes, at most `max_len`.
  Result<std::string> GetString(size_t max_len) {
    ASSIGN_OR_RETURN(uint32_t n, Get<uint32_t>());
    if (n > max_len)
      return Corruption(what_ + ": string length " + std::to_string(n) + " exceeds " +
                        std::to_string(max_len));
    ASSIGN_OR_RETURN(auto view, GetBytes(n));
    return std::string(reinterpret_cast<const char*>(view.data()), view.size());
  }
  size_t remaining() const { return bytes_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  Status Need(size_t n) const {
    if (bytes_.size() - pos_ < n)
      return Corruption(what_ + ": truncated at byte " + std::to_string(pos_) + " (need " +
                        std::to_string(n) + ", have " + std::to_string(bytes_.size() - pos_) + ")");
    return Status();
  }
  std::span<const std::byte> bytes_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace rt
