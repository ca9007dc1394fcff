// ringckpt inspect and verify, and the helpers the other commands share.
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "ckpt/catalog.h"
#include "kernels/ops.h"
#include "tools/ringckpt/commands.h"

namespace ringckpt {

using rt::ckpt::CheckpointReader;
using rt::ckpt::TensorEntry;

int Fail(const rt::Status& status) {
  std::fprintf(stderr, "ringckpt: %s\n", status.ToString().c_str());
  return 1;
}

rt::Result<std::unique_ptr<CheckpointReader>> OpenSource(const Source& source) {
  ASSIGN_OR_RETURN(std::shared_ptr<rt::ckpt::Storage> storage,
                   rt::ckpt::OpenStorage(source.uri, source.storage));
  int64_t step = source.step;
  if (step < 0) {
    ASSIGN_OR_RETURN(std::vector<int64_t> committed, rt::ckpt::ListCommitted(*storage));
    if (committed.empty()) return rt::NotFound("no committed checkpoint in " + source.uri);
    step = committed.front();
  }
  return CheckpointReader::Open(storage, step);
}

rt::Result<std::vector<double>> LoadWhole(CheckpointReader& reader, const TensorEntry& t) {
  rt::ckpt::TensorShard s;
  s.kind = t.kind;
  s.name = t.name;
  s.global_shape = t.global_shape;
  s.dtype = t.dtype;
  s.box_offset.ndim = s.box_size.ndim = t.global_shape.ndim;
  for (int d = 0; d < t.global_shape.ndim; ++d) s.box_size.dims[d] = t.global_shape.dims[d];
  const int64_t n = t.global_shape.numel();
  std::vector<uint8_t> raw(static_cast<size_t>(n) * rt::DTypeSize(t.dtype));
  s.view = rt::Tensor(raw.data(), t.dtype, rt::Shape{n});
  rt::ckpt::StateShards one;
  one.shards.push_back(s);
  RETURN_IF_ERROR(reader.Load(one));
  std::vector<double> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case rt::DType::kI64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(s.view.data_as<int64_t>()[i]);
      break;
    case rt::DType::kI32:
      for (int64_t i = 0; i < n; ++i) out[i] = s.view.data_as<int32_t>()[i];
      break;
    case rt::DType::kU8:
      for (int64_t i = 0; i < n; ++i) out[i] = raw[i];
      break;
    case rt::DType::kF32:
      for (int64_t i = 0; i < n; ++i) out[i] = s.view.data_as<float>()[i];
      break;
    default: {
      std::vector<float> f32(static_cast<size_t>(n));
      RETURN_IF_ERROR(rt::Convert(rt::Tensor(f32.data(), rt::DType::kF32, rt::Shape{n}), s.view));
      for (int64_t i = 0; i < n; ++i) out[i] = f32[i];
    }
  }
  return out;
}

namespace {

std::vector<int64_t> Dims(const rt::Shape& s) { return {s.dims, s.dims + s.ndim}; }

nlohmann::json ManifestJson(const rt::ckpt::Manifest& m) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorEntry& t : m.tensors) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const rt::ckpt::StoredPiece& p : t.pieces) {
      nlohmann::json flat = nullptr;
      if (p.has_flat_range) flat = {p.flat_begin, p.flat_end};
      pieces.push_back({{"box_offset", Dims(p.box_offset)},
                        {"box_size", Dims(p.box_size)},
                        {"flat_range", flat},
                        {"file", m.files[p.file]},
                        {"offset", p.offset},
                        {"length", p.length},
                        {"crc32c", p.crc32c},
                        {"codec", rt::ckpt::CodecName(p.codec)},
                        {"raw_length", p.raw_length}});
    }
    tensors.push_back({{"kind", rt::ckpt::StateKindName(t.kind)},
                       {"name", t.name},
                       {"shape", Dims(t.global_shape)},
                       {"dtype", std::string(rt::DTypeName(t.dtype))},
                       {"pieces", pieces}});
  }
  return {{"step", m.step},
          {"run_id", m.run_id},
          {"layout", m.layout},
          {"world", m.world},
          {"config_toml", m.config_toml},
          {"engine_state_bytes", m.engine_state.size()},
          {"files", m.files},
          {"tensors", tensors}};
}

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int Inspect(const Source& source, bool json) {
  auto reader = OpenSource(source);
  if (!reader.ok()) return Fail(reader.status());
  const rt::ckpt::Manifest& m = (*reader)->manifest();
  if (json) {
    std::printf("%s\n", ManifestJson(m).dump(2).c_str());
    return 0;
  }
  auto storage = rt::ckpt::OpenStorage(source.uri, source.storage);
  if (storage.ok()) {
    auto committed = rt::ckpt::ListCommitted(**storage);
    auto dirs = rt::ckpt::ListStepDirs(**storage);
    if (committed.ok() && dirs.ok()) {
      std::printf("committed ");
      for (int64_t s : *committed) std::printf(" %lld", static_cast<long long>(s));
      std::printf("\n");
      const std::set<int64_t> set(committed->begin(), committed->end());
      for (int64_t s : *dirs)
        if (!set.contains(s))
          std::printf("uncommitted %s (an aborted or running save)\n",
                      rt::ckpt::StepDir(s).c_str());
    }
  }
  uint64_t raw = 0, stored = 0;
  size_t pieces = 0;
  for (const TensorEntry& t : m.tensors)
    for (const auto& p : t.pieces) {
      raw += p.raw_length;
      stored += p.length;
      ++pieces;
    }
  std::printf("step       %lld\nrun        %s\nlayout     %s\nworld      %d\n",
              static_cast<long long>(m.step), m.run_id.c_str(), m.layout.c_str(), m.world);
  std::printf("engine     %zu bytes of trainer state\nfiles      %zu\n", m.engine_state.size(),
              m.files.size());
  std::printf("tensors    %zu, pieces %zu, raw %.2f MiB, stored %.2f MiB (%.3fx)\n\n",
              m.tensors.size(), pieces, MiB(raw), MiB(stored),
              stored ? static_cast<double>(raw) / stored : 1.0);
  std::printf("%-7s %-32s %-18s %-5s %6s %10s %10s %s\n", "kind", "name", "shape", "dtype",
              "pieces", "raw", "stored", "codecs");
  for (const TensorEntry& t : m.tensors) {
    uint64_t r = 0, s = 0;
    std::set<std::string> codecs;
    for (const auto& p : t.pieces) {
      r += p.raw_length;
      s += p.length;
      codecs.insert(rt::ckpt::CodecName(p.codec));
    }
    std::string names;
    for (const auto& c : codecs) names += (names.empty() ? "" : ",") + c;
    std::printf("%-7s %-32s %-18s %-5s %6zu %10llu %10llu %s\n", rt::ckpt::StateKindName(t.kind),
                t.name.c_str(), t.global_shape.ToString().c_str(),
                std::string(rt::DTypeName(t.dtype)).c_str(), t.pieces.size(),
                static_cast<unsigned long long>(r), static_cast<unsigned long long>(s),
                names.c_str());
  }
  return 0;
}

namespace {

// Exit status of a verify that ended with `status`: 1 if it says the checkpoint is damaged
// (a failed check, a missing or short file), 2 if the checkpoint could not be checked (the
// storage unreachable, refused, out of time).
int FailVerify(const rt::Status& status) {
  Fail(status);
  switch (status.code()) {
    case rt::StatusCode::kCorruption:
    case rt::StatusCode::kChecksumMismatch:
    case rt::StatusCode::kNotFound:
    case rt::StatusCode::kOutOfRange:
    case rt::StatusCode::kFailedPrecondition:
      return 1;
    default:
      return 2;
  }
}

}  // namespace

int Verify(const Source& source) {
  auto reader = OpenSource(source);
  if (!reader.ok()) return FailVerify(reader.status());
  auto problems = (*reader)->Verify();
  if (!problems.ok()) return FailVerify(problems.status());
  const auto& m = (*reader)->manifest();
  if (problems->empty()) {
    size_t pieces = 0;
    for (const TensorEntry& t : m.tensors) pieces += t.pieces.size();
    std::printf("step %lld: OK (%zu tensors, %zu pieces, every checksum and element)\n",
                static_cast<long long>(m.step), m.tensors.size(), pieces);
    return 0;
  }
  for (const std::string& p : *problems) std::printf("BAD %s\n", p.c_str());
  std::printf("step %lld: %zu problem(s)\n", static_cast<long long>(m.step), problems->size());
  return 1;
}

}  // namespace ringckpt
