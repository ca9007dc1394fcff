#include "ckpt/manifest.h"

#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>

#include "base/bytes.h"
#include "base/crc32c.h"

namespace rt::ckpt {
namespace {

constexpr char kManifestMagic[8] = {'R', 'T', 'C', 'K', 'P', 'T', 'M', 'F'};
constexpr char kFragmentMagic[8] = {'R', 'T', 'C', 'K', 'P', 'T', 'F', 'R'};
constexpr size_t kHeaderBytes = 8 + 4 + 8;  // magic, version, body length
constexpr size_t kMaxName = 4096;
constexpr size_t kMaxText = 64 << 20;  // config, layout, engine state
constexpr int kMaxElementsLog2 = 48;   // elements of one tensor: 2^48 x 8 bytes fits in int64
constexpr int64_t kMaxElements = int64_t{1} << kMaxElementsLog2;

std::span<const std::byte> AsBytes(std::span<const uint8_t> s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

void PutBlob(ByteWriter& w, const std::string& s) {
  w.Put<uint64_t>(s.size());
  w.PutBytes(s.data(), s.size());
}

Result<std::string> GetBlob(ByteReader& r, const std::string& what, const char* field) {
  ASSIGN_OR_RETURN(uint64_t n, r.Get<uint64_t>());
  if (n > kMaxText || n > r.remaining())
    return Corruption(what + ": " + field + " length " + std::to_string(n) + " is beyond the " +
                      std::to_string(r.remaining()) + " bytes left");
  ASSIGN_OR_RETURN(auto view, r.GetBytes(n));
  return std::string(reinterpret_cast<const char*>(view.data()), view.size());
}

void PutShape(ByteWriter& w, const Shape& s, int ndim) {
  for (int i = 0; i < ndim; ++i) w.Put<int64_t>(s.dims[i]);
}

Result<Shape> GetShape(ByteReader& r, int ndim) {
  Shape s;
  s.ndim = ndim;
  for (int i = 0; i < ndim; ++i) {
    ASSIGN_OR_RETURN(s.dims[i], r.Get<int64_t>());
  }
  return s;
}

void PutTensors(ByteWriter& w, const std::vector<TensorEntry>& tensors) {
  w.Put<uint32_t>(static_cast<uint32_t>(tensors.size()));
  for (const TensorEntry& t : tensors) {
    w.PutString(t.name);
    w.Put<uint8_t>(static_cast<uint8_t>(t.kind));
    w.Put<uint8_t>(static_cast<uint8_t>(t.dtype));
    const int ndim = t.global_shape.ndim;
    w.Put<uint8_t>(static_cast<uint8_t>(ndim));
    PutShape(w, t.global_shape, ndim);
    w.Put<uint32_t>(static_cast<uint32_t>(t.pieces.size()));
    for (const StoredPiece& p : t.pieces) {
      PutShape(w, p.box_offset, ndim);
      PutShape(w, p.box_size, ndim);
      w.Put<uint8_t>(p.has_flat_range ? 1 : 0);
      w.Put<int64_t>(p.flat_begin);
      w.Put<int64_t>(p.flat_end);
      w.Put<uint32_t>(p.file);
      w.Put<uint64_t>(p.offset);
      w.Put<uint64_t>(p.length);
      w.Put<uint32_t>(p.crc32c);
      w.Put<uint8_t>(static_cast<uint8_t>(p.codec));
      w.Put<uint64_t>(p.raw_length);
    }
  }
}

// Checks one decoded piece of tensor `t` against the tensor and the file table.
Status CheckPiece(const TensorEntry& t, const StoredPiece& p, size_t files,
                  const std::string& where) {
  for (int i = 0; i < t.global_shape.ndim; ++i) {
    const int64_t off = p.box_offset.dims[i], size = p.box_size.dims[i];
    if (off < 0 || size <= 0 || off > t.global_shape.dims[i] - size)
      return Corruption(where + ": box offset " + p.box_offset.ToString() + " size " +
                        p.box_size.ToString() + " is outside the tensor's shape " +
                        t.global_shape.ToString());
  }
  const int64_t box = p.box_size.numel();
  if (p.has_flat_range && (p.flat_begin < 0 || p.flat_begin >= p.flat_end || p.flat_end > box))
    return Corruption(where + ": flat range [" + std::to_string(p.flat_begin) + ", " +
                      std::to_string(p.flat_end) + ") is not inside the box of " +
                      std::to_string(box) + " elements");
  if (!p.has_flat_range && (p.flat_begin != 0 || p.flat_end != 0))
    return Corruption(where + ": flat range set without its flag");
  if (p.file >= files)
    return Corruption(where + ": file index " + std::to_string(p.file) + " beyond the " +
                      std::to_string(files) + " files");
  if (p.offset > std::numeric_limits<uint64_t>::max() - p.length)
    return Corruption(where + ": byte range overflows");
  const uint64_t raw = static_cast<uint64_t>(p.numel()) * DTypeSize(t.dtype);
  if (p.raw_length != raw)
    return Corruption(where + ": raw length " + std::to_string(p.raw_length) + " but " +
                      std::to_string(p.numel()) + " elements of " +
                      std::string(DTypeName(t.dtype)) + " are " + std::to_string(raw) + " bytes");
  if (p.codec == Codec::kNone && p.length != p.raw_length)
    return Corruption(where + ": stored length " + std::to_string(p.length) +
                      " differs from the raw length " + std::to_string(raw) + " of codec none");
  return Status();
}

Result<std::vector<TensorEntry>> GetTensors(ByteReader& r, size_t files, const std::string& what) {
  ASSIGN_OR_RETURN(uint32_t count, r.Get<uint32_t>());
  if (count > r.remaining() / 8)
    return Corruption(what + ": " + std::to_string(count) + " tensors cannot fit in " +
                      std::to_string(r.remaining()) + " bytes");
  std::vector<TensorEntry> tensors(count);
  for (uint32_t ti = 0; ti < count; ++ti) {
    TensorEntry& t = tensors[ti];
    ASSIGN_OR_RETURN(t.name, r.GetString(kMaxName));
    ASSIGN_OR_RETURN(uint8_t kind, r.Get<uint8_t>());
    ASSIGN_OR_RETURN(uint8_t dtype, r.Get<uint8_t>());
    ASSIGN_OR_RETURN(uint8_t ndim, r.Get<uint8_t>());
    const std::string where = what + ": tensor " + std::to_string(ti) + " '" + t.name + "'";
    if (kind > static_cast<uint8_t>(StateKind::kStep))
      return Corruption(where + ": unknown kind " + std::to_string(kind));
    if (dtype > static_cast<uint8_t>(DType::kU8))
      return Corruption(where + ": unknown dtype " + std::to_string(dtype));
    if (ndim > Shape::kMaxDims)
      return Corruption(where + ": " + std::to_string(ndim) + " dimensions (at most " +
                        std::to_string(Shape::kMaxDims) + ")");
    t.kind = static_cast<StateKind>(kind);
    t.dtype = static_cast<DType>(dtype);
    ASSIGN_OR_RETURN(t.global_shape, GetShape(r, ndim));
    // Every dimension positive and the element count at most kMaxElements, so that no count or
    // byte length derived from the shape (a box is inside it) can overflow.
    int64_t elements = 1;
    for (int i = 0; i < ndim; ++i) {
      const int64_t d = t.global_shape.dims[i];
      if (d <= 0 || d > kMaxElements || elements > kMaxElements / d)
        return Corruption(where + ": bad shape " + t.global_shape.ToString() + " (more than 2^" +
                          std::to_string(kMaxElementsLog2) + " elements or a dimension < 1)");
      elements *= d;
    }
    ASSIGN_OR_RETURN(uint32_t pieces, r.Get<uint32_t>());
    if (pieces > r.remaining() / 45)
      return Corruption(where + ": " + std::to_string(pieces) + " pieces cannot fit in " +
                        std::to_string(r.remaining()) + " bytes");
    t.pieces.resize(pieces);
    for (uint32_t pi = 0; pi < pieces; ++pi) {
      StoredPiece& p = t.pieces[pi];
      ASSIGN_OR_RETURN(p.box_offset, GetShape(r, ndim));
      ASSIGN_OR_RETURN(p.box_size, GetShape(r, ndim));
      ASSIGN_OR_RETURN(uint8_t flat, r.Get<uint8_t>());
      if (flat > 1) return Corruption(where + ": bad flat-range flag");
      p.has_flat_range = flat == 1;
      ASSIGN_OR_RETURN(p.flat_begin, r.Get<int64_t>());
      ASSIGN_OR_RETURN(p.flat_end, r.Get<int64_t>());
      ASSIGN_OR_RETURN(p.file, r.Get<uint32_t>());
      ASSIGN_OR_RETURN(p.offset, r.Get<uint64_t>());
      ASSIGN_OR_RETURN(p.length, r.Get<uint64_t>());
      ASSIGN_OR_RETURN(p.crc32c, r.Get<uint32_t>());
      ASSIGN_OR_RETURN(uint8_t codec, r.Get<uint8_t>());
      ASSIGN_OR_RETURN(p.codec, CodecFromByte(codec));
      ASSIGN_OR_RETURN(p.raw_length, r.Get<uint64_t>());
      RETURN_IF_ERROR(CheckPiece(t, p, files, where + " piece " + std::to_string(pi)));
    }
  }
  return tensors;
}

void PutFiles(ByteWriter& w, const std::vector<std::string>& files) {
  w.Put<uint32_t>(static_cast<uint32_t>(files.size()));
  for (const std::string& f : files) w.PutString(f);
}

Result<std::vector<std::string>> GetFiles(ByteReader& r, const std::string& what) {
  ASSIGN_OR_RETURN(uint32_t count, r.Get<uint32_t>());
  if (count > r.remaining() / 4)
    return Corruption(what + ": " + std::to_string(count) + " files cannot fit");
  std::vector<std::string> files(count);
  for (auto& f : files) {
    ASSIGN_OR_RETURN(f, r.GetString(kMaxName));
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      return Corruption(what + ": bad data file name '" + f + "'");
  }
  return files;
}

// Wraps a body: magic, version, body length, body, CRC32C of all before it.
std::vector<uint8_t> Seal(const char (&magic)[8], const std::vector<std::byte>& body) {
  ByteWriter w;
  w.PutBytes(magic, 8);
  w.Put<uint32_t>(kFormatVersion);
  w.Put<uint64_t>(body.size());
  w.PutBytes(body.data(), body.size());
  w.Put<uint32_t>(Crc32c(w.bytes().data(), w.bytes().size()));
  auto bytes = w.Take();
  std::vector<uint8_t> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// Checks the frame around a body and returns a view of the body.
Result<std::span<const uint8_t>> Unseal(const char (&magic)[8], std::span<const uint8_t> bytes,
                                        const std::string& what) {
  if (bytes.size() < kHeaderBytes + 4)
    return Corruption(what + ": " + std::to_string(bytes.size()) + " bytes is too short");
  if (std::memcmp(bytes.data(), magic, 8) != 0)
    return Corruption(what + ": bad magic (not a " + std::string(magic, 8) + " file)");
  uint32_t version = 0;
  uint64_t body = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&body, bytes.data() + 12, 8);
  if (version > kFormatVersion)
    return FailedPrecondition(what + ": format version " + std::to_string(version) +
                              " is newer than this build reads (up to " +
                              std::to_string(kFormatVersion) + ")");
  if (version == 0) return Corruption(what + ": format version 0");
  if (body != bytes.size() - kHeaderBytes - 4)
    return Corruption(what + ": body length " + std::to_string(body) + " but the file holds " +
                      std::to_string(bytes.size() - kHeaderBytes - 4) + " (truncated?)");
  uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  const uint32_t actual = Crc32c(bytes.data(), bytes.size() - 4);
  if (stored != actual)
    return Corruption(what + ": CRC32C mismatch (stored " + std::to_string(stored) + ", computed " +
                      std::to_string(actual) + ")");
  return bytes.subspan(kHeaderBytes, body);
}

}  // namespace

const TensorEntry* Manifest::Find(StateKind kind, const std::string& name) const {
  for (const TensorEntry& t : tensors)
    if (t.kind == kind && t.name == name) return &t;
  return nullptr;
}

std::vector<uint8_t> EncodeManifest(const Manifest& m) {
  ByteWriter w;
  w.Put<int64_t>(m.step);
  w.PutString(m.run_id);
  PutBlob(w, m.config_toml);
  PutBlob(w, m.layout);
  PutBlob(w, m.engine_state);
  w.Put<int32_t>(m.world);
  PutFiles(w, m.files);
  PutTensors(w, m.tensors);
  return Seal(kManifestMagic, w.bytes());
}

Result<Manifest> DecodeManifest(std::span<const uint8_t> bytes, const std::string& what) {
  ASSIGN_OR_RETURN(std::span<const uint8_t> body, Unseal(kManifestMagic, bytes, what));
  ByteReader r(AsBytes(body), what);
  Manifest m;
  ASSIGN_OR_RETURN(m.step, r.Get<int64_t>());
  ASSIGN_OR_RETURN(m.run_id, r.GetString(kMaxName));
  ASSIGN_OR_RETURN(m.config_toml, GetBlob(r, what, "config"));
  ASSIGN_OR_RETURN(m.layout, GetBlob(r, what, "layout"));
  ASSIGN_OR_RETURN(m.engine_state, GetBlob(r, what, "engine state"));
  ASSIGN_OR_RETURN(m.world, r.Get<int32_t>());
  if (m.step < 0 || m.world <= 0)
    return Corruption(what + ": bad step " + std::to_string(m.step) + " or world " +
                      std::to_string(m.world));
  ASSIGN_OR_RETURN(m.files, GetFiles(r, what));
  ASSIGN_OR_RETURN(m.tensors, GetTensors(r, m.files.size(), what));
  if (r.remaining() != 0)
    return Corruption(what + ": " + std::to_string(r.remaining()) + " bytes after the tensors");
  return m;
}

std::vector<uint8_t> EncodeFragment(const Fragment& f) {
  ByteWriter w;
  w.Put<int64_t>(f.step);
  w.PutString(f.run_id);
  w.Put<int32_t>(f.rank);
  PutFiles(w, f.files);
  PutTensors(w, f.tensors);
  return Seal(kFragmentMagic, w.bytes());
}

Result<Fragment> DecodeFragment(std::span<const uint8_t> bytes, const std::string& what) {
  ASSIGN_OR_RETURN(std::span<const uint8_t> body, Unseal(kFragmentMagic, bytes, what));
  ByteReader r(AsBytes(body), what);
  Fragment f;
  ASSIGN_OR_RETURN(f.step, r.Get<int64_t>());
  ASSIGN_OR_RETURN(f.run_id, r.GetString(kMaxName));
  ASSIGN_OR_RETURN(f.rank, r.Get<int32_t>());
  if (f.step < 0 || f.rank < 0)
    return Corruption(what + ": bad step " + std::to_string(f.step) + " or rank " +
                      std::to_string(f.rank));
  ASSIGN_OR_RETURN(f.files, GetFiles(r, what));
  ASSIGN_OR_RETURN(f.tensors, GetTensors(r, f.files.size(), what));
  if (r.remaining() != 0)
    return Corruption(what + ": " + std::to_string(r.remaining()) + " bytes after the tensors");
  return f;
}

std::string EncodeLatest(const std::vector<int64_t>& steps) {
  std::string text;
  for (int64_t step : steps) text += StepDir(step) + "\n";
  return text;
}

Result<std::vector<int64_t>> DecodeLatest(std::span<const uint8_t> bytes) {
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<int64_t> steps;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) return Corruption("latest: last line unterminated (truncated?)");
    const std::string line = text.substr(start, end - start);
    std::optional<int64_t> step = ParseStepDir(line);
    if (!step) return Corruption("latest: line '" + line.substr(0, 64) + "' names no step folder");
    if (!steps.empty() && *step >= steps.back())
      return Corruption("latest: steps not in decreasing order at '" + line + "'");
    steps.push_back(*step);
    start = end + 1;
  }
  if (steps.empty()) return Corruption("latest: empty");
  return steps;
}

std::string StepDir(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%012lld", static_cast<long long>(step));
  return name;
}

std::optional<int64_t> ParseStepDir(const std::string& name) {
  if (name.size() != 17 || !name.starts_with("step-")) return std::nullopt;
  // Twelve digits: from_chars alone would take a sign ("step--00000000000" as step 0).
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
  if (ec != std::errc() || end != name.data() + name.size() || step < 0) return std::nullopt;
  return step;
}

std::string DataFile(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.data", rank);
  return name;
}

std::string FragmentFile(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.frag", rank);
  return name;
}

}  // namespace rt::ckpt
