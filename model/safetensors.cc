#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "base/file.h"

namespace rt {
namespace {

// safetensors' dtype names.
const char* SafeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU8:
      return "U8";
  }
  return nullptr;
}

bool ParseSafeName(const std::string& s, DType* t) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8}) {
    if (s == SafeName(d)) {
      *t = d;
      return true;
    }
  }
  return false;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// numel·size, or -1 on overflow or a negative dimension.
int64_t ByteSize(const std::vector<int64_t>& shape, DType t) {
  int64_t n = static_cast<int64_t>(DTypeSize(t));
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 50) / d)) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

Result<const SafetensorsEntry*> SafetensorsFile::Find(const std::string& name,
                                                      const std::vector<int64_t>& shape) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) return NotFound(what + ": tensor '" + name + "' is missing");
  if (it->second.shape != shape)
    return InvalidArgument(what + ": tensor '" + name + "' has shape " +
                           ShapeText(it->second.shape) + ", expected " + ShapeText(shape));
  return &it->second;
}

Result<std::vector<std::byte>> EncodeSafetensors(
    const std::vector<SafetensorsInput>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  int64_t offset = 0;
  for (const SafetensorsInput& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      return InvalidArgument("safetensors: tensor name '" + t.name +
                             "' is empty, reserved or repeated");
    const int64_t size = ByteSize(t.shape, t.dtype);
    if (size < 0) return InvalidArgument("safetensors: tensor '" + t.name + "' has a bad shape");
    header[t.name] = {{"dtype", SafeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // align the data to 8 bytes, as the spec allows
  std::vector<std::byte> out(8 + json.size() + static_cast<size_t>(offset));
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, json.data(), json.size());
  std::byte* data = out.data() + 8 + json.size();
  for (const SafetensorsInput& t : tensors) {
    const size_t size = static_cast<size_t>(ByteSize(t.shape, t.dtype));
    if (size) std::memcpy(data, t.data, size);
    data += size;
  }
  return out;
}

Result<SafetensorsFile> DecodeSafetensors(std::vector<std::byte> bytes, std::string what) {
  SafetensorsFile file;
  file.what = std::move(what);
  file.bytes = std::move(bytes);
  const std::vector<std::byte>& b = file.bytes;
  if (b.size() < 8) return Corruption(file.what + ": shorter than the 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, b.data(), 8);
  if (header_len > b.size() - 8)
    return Corruption(file.what + ": header length " + std::to_string(header_len) +
                      " runs past the end of the file (" + std::to_string(b.size()) + " bytes)");
  const char* json_begin = reinterpret_cast<const char*>(b.data() + 8);
  nlohmann::json header = nlohmann::json::parse(json_begin, json_begin + header_len, nullptr,
                                                /*allow_exceptions=*/false);
  if (!header.is_object()) return Corruption(file.what + ": header is not a JSON object");
  const size_t data_start = 8 + header_len;
  const uint64_t data_size = b.size() - data_start;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Corruption(file.what + ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          return Corruption(file.what + ": metadata '" + m.key() + "' is not a string");
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = file.what + ": tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      return Corruption(where + ": needs dtype, shape and data_offsets");
    SafetensorsEntry e;
    if (!v["dtype"].is_string() || !ParseSafeName(v["dtype"].get<std::string>(), &e.dtype))
      return Corruption(where + ": unsupported dtype " + v["dtype"].dump());
    if (!v["shape"].is_array()) return Corruption(where + ": shape is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return Corruption(where + ": bad dimension " + d.dump());
      e.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      return Corruption(where + ": data_offsets is not [begin, end]");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    const int64_t size = ByteSize(e.shape, e.dtype);
    if (size < 0 || end < begin || end - begin != static_cast<uint64_t>(size) || end > data_size)
      return Corruption(where + ": data_offsets [" + std::to_string(begin) + ", " +
                        std::to_string(end) + "] do not fit shape " + ShapeText(e.shape) +
                        " and the data section of " + std::to_string(data_size) + " bytes");
    e.data = std::span<const std::byte>(b.data() + data_start + begin, end - begin);
    ranges.emplace_back(begin, end);
    file.tensors.emplace(name, std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered)
      return Corruption(file.what + ": tensor data " +
                        (begin < covered ? "overlaps" : "has a hole") + " at byte " +
                        std::to_string(begin));
    covered = end;
  }
  if (covered != data_size)
    return Corruption(file.what + ": " + std::to_string(data_size - covered) +
                      " bytes after the last tensor");
  return file;
}

Result<SafetensorsFile> ReadSafetensors(const std::string& path) {
  ASSIGN_OR_RETURN(auto bytes, ReadFileBytes(path));
  return DecodeSafetensors(std::move(bytes), "safetensors '" + path + "'");
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(auto bytes, EncodeSafetensors(tensors, metadata));
  return WriteFileBytes(path, bytes).WithContext("safetensors");
}

}  // namespace rt
