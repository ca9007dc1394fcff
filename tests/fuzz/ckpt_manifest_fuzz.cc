// Fuzz target: the checkpoint manifest, fragment and `latest` decoders must reject or accept any
// byte string without crashing, and whatever they accept must re-encode to the same bytes.
#include <cstring>
#include <vector>

#include "base/crc32c.h"
#include "ckpt/manifest.h"

namespace {

// Decodes `bytes` as a manifest and as a fragment; what decodes must re-encode to the same bytes.
void DecodeBoth(std::span<const uint8_t> bytes) {
  auto manifest = rt::ckpt::DecodeManifest(bytes, "fuzz");
  if (manifest.ok()) {
    auto again = rt::ckpt::EncodeManifest(*manifest);
    if (again.size() != bytes.size() || std::memcmp(again.data(), bytes.data(), bytes.size()) != 0)
      __builtin_trap();
  }
  auto fragment = rt::ckpt::DecodeFragment(bytes, "fuzz");
  if (fragment.ok()) {
    auto again = rt::ckpt::EncodeFragment(*fragment);
    if (again.size() != bytes.size() || std::memcmp(again.data(), bytes.data(), bytes.size()) != 0)
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  DecodeBoth(bytes);
  // Again with the trailing CRC32C made right, so that mutations reach the body's decoder.
  if (size >= 4) {
    std::vector<uint8_t> fixed(data, data + size);
    const uint32_t crc = rt::Crc32c(fixed.data(), size - 4);
    std::memcpy(fixed.data() + size - 4, &crc, 4);
    DecodeBoth(fixed);
  }
  auto latest = rt::ckpt::DecodeLatest(bytes);
  if (latest.ok()) {
    const std::string again = rt::ckpt::EncodeLatest(*latest);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  using namespace rt::ckpt;
  Manifest m;
  m.step = 7;
  m.run_id = "run";
  m.layout = "tp=2";
  m.world = 2;
  m.files = {"rank-00000.data", "rank-00001.data"};
  TensorEntry t{StateKind::kMaster, "wte", rt::Shape{4, 6}, rt::DType::kF32, {}};
  StoredPiece p;
  p.box_offset = rt::Shape{0, 0};
  p.box_size = rt::Shape{4, 6};
  p.has_flat_range = true;
  p.flat_begin = 2;
  p.flat_end = 20;
  p.file = 1;
  p.length = p.raw_length = 72;
  t.pieces.push_back(p);
  m.tensors.push_back(t);
  Fragment f;
  f.step = 7;
  f.run_id = "run";
  f.rank = 1;
  f.files = {"rank-00001.data"};
  f.tensors = m.tensors;
  f.tensors[0].pieces[0].file = 0;
  const std::string latest = EncodeLatest({7, 3});
  return {EncodeManifest(m), EncodeFragment(f), std::vector<uint8_t>(latest.begin(), latest.end())};
}
