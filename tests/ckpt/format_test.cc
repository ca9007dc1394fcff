// Codecs, the region geometry against a naive per-element reference, the manifest and fragment
// encodings, and the storage backends.
#include <algorithm>
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "base/crc32c.h"
#include "ckpt/codec.h"
#include "ckpt/manifest.h"
#include "ckpt/region.h"
#include "ckpt/storage.h"
#include "tests/ckpt/util.h"

namespace rt::ckpt {
namespace {

using testing::TempDir;

std::vector<uint8_t> FloatBytes(size_t n) {
  std::vector<float> v(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0, 0.02f);
  for (float& x : v) x = dist(rng);
  std::vector<uint8_t> out(n * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(CodecTest, RoundTripEveryCodecAndElementSize) {
  const std::vector<uint8_t> raw = FloatBytes(10000);
  for (Codec c : {Codec::kNone, Codec::kZstd, Codec::kByteGroupedZstd}) {
    for (size_t esize : {1, 2, 4, 8}) {
      auto enc = Encode(c, esize, raw);
      ASSERT_TRUE(enc.ok()) << enc.status().ToString();
      std::vector<uint8_t> back(raw.size());
      ASSERT_TRUE(Decode(c, esize, *enc, back).ok()) << CodecName(c) << " " << esize;
      EXPECT_EQ(back, raw) << CodecName(c) << " " << esize;
    }
  }
  // Byte planes make floats' exponent bytes compressible: bgzstd beats zstd on weights (zstd
  // has one literal table per 128 KiB block, so the planes need a few blocks each).
  const std::vector<uint8_t> weights = FloatBytes(1 << 20);
  auto zstd = Encode(Codec::kZstd, 4, weights);
  auto bg = Encode(Codec::kByteGroupedZstd, 4, weights);
  EXPECT_LT(bg->size(), zstd->size() * 95 / 100);
  EXPECT_LT(bg->size(), weights.size() * 9 / 10);
}

TEST(CodecTest, BadInputIsAnError) {
  const std::vector<uint8_t> raw = FloatBytes(100);
  auto enc = Encode(Codec::kZstd, 4, raw);
  std::vector<uint8_t> back(raw.size());
  std::vector<uint8_t> cut(enc->begin(), enc->end() - 3);
  EXPECT_EQ(Decode(Codec::kZstd, 4, cut, back).code(), StatusCode::kCorruption);
  std::vector<uint8_t> wrong_size(raw.size() + 4);
  EXPECT_EQ(Decode(Codec::kZstd, 4, *enc, wrong_size).code(), StatusCode::kCorruption);
  EXPECT_EQ(Decode(Codec::kNone, 4, raw, wrong_size).code(), StatusCode::kCorruption);
  EXPECT_FALSE(Encode(Codec::kZstd, 4, std::span<const uint8_t>(raw.data(), 7)).ok());
  EXPECT_EQ(ParseCodec("bgzstd").value(), Codec::kByteGroupedZstd);
  auto bad = ParseCodec("gzip");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("gzip"), std::string::npos);
}

// Every element of a region, by its naive global index.
std::vector<int64_t> NaiveElements(const Region& r) {
  testing::SynthRank dummy;
  TensorShard s;
  s.global_shape = r.global_shape;
  s.box_offset = r.box_offset;
  s.box_size = r.box_size;
  s.has_flat_range = r.has_flat_range;
  s.flat_begin = r.flat_begin;
  s.flat_end = r.flat_end;
  std::vector<int64_t> out;
  for (int64_t k = 0; k < r.numel(); ++k) out.push_back(testing::NaiveGlobalIndex(s, k));
  return out;
}

Region RandomRegion(std::mt19937& rng, const Shape& g) {
  Region r;
  r.global_shape = g;
  r.box_offset.ndim = r.box_size.ndim = g.ndim;
  for (int d = 0; d < g.ndim; ++d) {
    const int64_t a = std::uniform_int_distribution<int64_t>(0, g.dims[d] - 1)(rng);
    const int64_t b = std::uniform_int_distribution<int64_t>(a + 1, g.dims[d])(rng);
    r.box_offset.dims[d] = a;
    r.box_size.dims[d] = b - a;
  }
  if (rng() % 2) {
    const int64_t n = r.box_size.numel();
    const int64_t a = std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
    const int64_t b = std::uniform_int_distribution<int64_t>(a + 1, n)(rng);
    r.has_flat_range = true;
    r.flat_begin = a;
    r.flat_end = b;
  }
  return r;
}

TEST(RegionTest, OverlapMatchesNaiveReference) {
  std::mt19937 rng(11);
  const std::vector<Shape> shapes = {Shape{17}, Shape{6, 9}, Shape{4, 5, 6}, Shape{3, 2, 4, 5}};
  for (int iter = 0; iter < 3000; ++iter) {
    const Shape& g = shapes[iter % shapes.size()];
    const Region a = RandomRegion(rng, g), b = RandomRegion(rng, g);
    ASSERT_TRUE(CheckRegion(a).ok());
    const std::vector<int64_t> ea = NaiveElements(a), eb = NaiveElements(b);
    // Naive: pairs (i, j) with the same global element.
    std::vector<std::pair<int64_t, int64_t>> naive;
    for (size_t i = 0; i < ea.size(); ++i)
      for (size_t j = 0; j < eb.size(); ++j)
        if (ea[i] == eb[j]) naive.push_back({static_cast<int64_t>(i), static_cast<int64_t>(j)});
    std::vector<std::pair<int64_t, int64_t>> got;
    ForEachOverlap(a, b, [&](int64_t i, int64_t j, int64_t n) {
      for (int64_t k = 0; k < n; ++k) got.push_back({i + k, j + k});
    });
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, naive) << "iteration " << iter;
    for (int64_t k = 0; k < a.numel(); ++k) ASSERT_EQ(GlobalIndexOf(a, k), ea[k]);
  }
}

TEST(RegionTest, ZeroDimensionalTensor) {
  Region step;  // a 0-d tensor held whole
  int runs = 0;
  ForEachOverlap(step, step, [&](int64_t a, int64_t b, int64_t n) {
    EXPECT_EQ(a, 0);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(n, 1);
    ++runs;
  });
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(CheckRegion(step).ok());
}

Manifest SampleManifest() {
  Manifest m;
  m.step = 30;
  m.run_id = "abc";
  m.config_toml = "[model]\n";
  m.layout = "tp=2";
  m.engine_state = std::string("\0\1\2", 3);
  m.world = 2;
  m.files = {"rank-00000.data", "rank-00001.data"};
  TensorEntry t{StateKind::kAdamV, "wte", Shape{4, 6}, DType::kF32, {}};
  StoredPiece p;
  p.box_offset = Shape{0, 0};
  p.box_size = Shape{2, 6};
  p.file = 1;
  p.offset = 100;
  p.length = 48;
  p.raw_length = 48;
  p.crc32c = 77;
  t.pieces.push_back(p);
  p.box_offset = Shape{2, 0};
  p.has_flat_range = true;
  p.flat_begin = 1;
  p.flat_end = 12;
  p.codec = Codec::kZstd;
  p.length = 9;
  p.raw_length = 44;
  t.pieces.push_back(p);
  m.tensors.push_back(t);
  m.tensors.push_back(TensorEntry{StateKind::kStep, "step", Shape(), DType::kI64, {}});
  StoredPiece sp;
  sp.raw_length = sp.length = 8;
  m.tensors.back().pieces.push_back(sp);
  return m;
}

TEST(ManifestTest, RoundTripAndEveryFlippedByteDetected) {
  const Manifest m = SampleManifest();
  const std::vector<uint8_t> bytes = EncodeManifest(m);
  auto back = DecodeManifest(bytes, "sample");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeManifest(*back), bytes);
  EXPECT_EQ(back->engine_state, m.engine_state);
  EXPECT_EQ(back->tensors[0].pieces[1].flat_end, 12);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_FALSE(DecodeManifest(bad, "sample").ok()) << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(DecodeManifest({bytes.data(), n}, "sample").ok()) << "length " << n;
}

TEST(ManifestTest, NewerVersionIsAClearError) {
  std::vector<uint8_t> bytes = EncodeManifest(SampleManifest());
  bytes[8] = kFormatVersion + 1;
  const uint32_t crc = Crc32c(bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  auto r = DecodeManifest(bytes, "m");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().ToString().find("newer"), std::string::npos) << r.status().ToString();
}

// Found by libFuzzer: dimensions each in range whose product overflowed int64 while the pieces
// were checked. A shape of more than 2^48 elements is corruption, named as such.
TEST(ManifestTest, ShapeWhoseElementCountOverflowsIsCorruption) {
  Manifest m = SampleManifest();
  m.tensors[0].global_shape = Shape{int64_t{1} << 30, int64_t{1} << 34};
  auto r = DecodeManifest(EncodeManifest(m), "huge");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().ToString().find("bad shape"), std::string::npos) << r.status().ToString();
  m.tensors[0].global_shape = Shape{int64_t{1} << 24, int64_t{1} << 24};  // 2^48: still allowed
  auto large = DecodeManifest(EncodeManifest(m), "large");
  EXPECT_TRUE(large.ok()) << large.status().ToString();
}

TEST(ManifestTest, FragmentAndLatestRoundTrip) {
  Fragment f;
  f.step = 5;
  f.run_id = "r";
  f.rank = 3;
  f.files = {"rank-00003.data"};
  f.tensors = SampleManifest().tensors;
  for (auto& t : f.tensors)
    for (auto& p : t.pieces) p.file = 0;
  auto back = DecodeFragment(EncodeFragment(f), "frag");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeFragment(*back), EncodeFragment(f));
  // A manifest is not a fragment.
  EXPECT_FALSE(DecodeFragment(EncodeManifest(SampleManifest()), "frag").ok());
  const std::string latest = EncodeLatest({1234, 5, 0});
  EXPECT_EQ(latest, "step-000000001234\nstep-000000000005\nstep-000000000000\n");
  auto bytes = [](std::string_view s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  EXPECT_EQ(DecodeLatest(bytes(latest)).value(), (std::vector<int64_t>{1234, 5, 0}));
  EXPECT_FALSE(DecodeLatest(bytes("step-x\n")).ok());
  EXPECT_FALSE(DecodeLatest(bytes("")).ok());
  EXPECT_FALSE(DecodeLatest(bytes(latest.substr(0, latest.size() - 1))).ok());  // truncated
  EXPECT_FALSE(DecodeLatest(bytes("step-000000000005\nstep-000000000005\n")).ok());
  EXPECT_EQ(ParseStepDir(StepDir(7)).value(), 7);
  EXPECT_FALSE(ParseStepDir("step-00000000000x").has_value());
  // Found by libFuzzer: a signed number was taken as a step (and re-encoded differently).
  EXPECT_FALSE(ParseStepDir("step--00000000000").has_value());
  EXPECT_FALSE(ParseStepDir("step-+00000000007").has_value());
  EXPECT_FALSE(DecodeLatest(bytes("step--00000000000\n")).ok());
}

void ExerciseStorage(Storage& s) {
  const std::vector<uint8_t> data = FloatBytes(1000);
  ASSERT_TRUE(s.WriteFile("a/b/file", data).ok());
  EXPECT_EQ(s.ReadFile("a/b/file").value(), data);
  std::vector<uint8_t> part(10);
  ASSERT_TRUE(s.ReadRange("a/b/file", 100, part).ok());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + 100));
  std::vector<uint8_t> past(10);
  Status beyond = s.ReadRange("a/b/file", data.size() - 5, past);
  EXPECT_EQ(beyond.code(), StatusCode::kOutOfRange) << beyond.ToString();
  EXPECT_NE(beyond.ToString().find("a/b/file"), std::string::npos) << beyond.ToString();
  EXPECT_EQ(s.ReadFile("a/none").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.FileSize("a/b/file").value(), data.size());
  {
    auto w = s.CreateFile("a/c");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append({data.data(), 10}).ok());
    ASSERT_TRUE((*w)->Append({data.data() + 10, 20}).ok());
    const auto names = s.List("a").value();  // invisible under its name until Commit
    EXPECT_EQ(std::count(names.begin(), names.end(), "c"), 0);
    ASSERT_TRUE((*w)->Commit().ok());
  }
  EXPECT_EQ(s.FileSize("a/c").value(), 30u);
  {  // abandoned: nothing left behind
    auto w = s.CreateFile("a/d");
    ASSERT_TRUE((*w)->Append(data).ok());
  }
  EXPECT_EQ(s.List("a").value(), (std::vector<std::string>{"b", "c"}));
  ASSERT_TRUE(s.RenameAtomic("a/c", "a/b/file").ok());
  EXPECT_EQ(s.FileSize("a/b/file").value(), 30u);
  EXPECT_EQ(s.List("").value(), (std::vector<std::string>{"a"}));
  ASSERT_TRUE(s.Remove("a").ok());
  EXPECT_TRUE(s.List("").value().empty());
  EXPECT_TRUE(s.List("nothing").value().empty());
  EXPECT_TRUE(s.Remove("nothing").ok());
  EXPECT_EQ(s.WriteFile("../x", data).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.WriteFile("/x", data).code(), StatusCode::kInvalidArgument);
}

TEST(StorageTest, PosixFolder) {
  TempDir dir("posix");
  auto s = OpenStorage("file://" + dir.path() + "/store");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExerciseStorage(**s);
}

TEST(StorageTest, Memory) {
  auto s = OpenStorage("mem://storage-test");
  ASSERT_TRUE(s.ok());
  ExerciseStorage(**s);
  ASSERT_TRUE((*s)->WriteFile("shared", std::vector<uint8_t>{1, 2}).ok());
  EXPECT_EQ(OpenStorage("mem://storage-test").value()->ReadFile("shared").value().size(), 2u);
  EXPECT_EQ(OpenStorage("mem://other").value()->ReadFile("shared").status().code(),
            StatusCode::kNotFound);
}

TEST(StorageTest, BadUris) {
  for (const char* uri :
       {"", "mem://", "ringfs://host/x", "ringfs://host:0/x", "ringfs://host:99999/x",
        "ringfs://h:1/../x", "s3://bucket/x", "file://relative"}) {
    auto s = OpenStorage(uri);
    ASSERT_FALSE(s.ok()) << uri;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << uri;
  }
}

}  // namespace
}  // namespace rt::ckpt
