// The safetensors encoder and decoder.
#include "model/safetensors.h"

#include <cstring>

#include <gtest/gtest.h>

namespace rt {
namespace {

TEST(Safetensors, RoundTripIsBitwise) {
  std::vector<float> a = {1.5f, -0.0f, 3e-38f, 7.0f, 8.0f, 9.0f};
  std::vector<uint16_t> b = {1, 2, 3};
  auto bytes = EncodeSafetensors(
      {{"a", DType::kF32, {2, 3}, a.data()}, {"b.x", DType::kBF16, {3}, b.data()}},
      {{"n_layer", "2"}});
  ASSERT_TRUE(bytes.ok());
  auto file = DecodeSafetensors(*bytes, "t");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->metadata.at("n_layer"), "2");
  auto ea = file->Find("a", {2, 3});
  ASSERT_TRUE(ea.ok());
  EXPECT_EQ((*ea)->dtype, DType::kF32);
  EXPECT_EQ(std::memcmp((*ea)->data.data(), a.data(), a.size() * 4), 0);
  auto eb = file->Find("b.x", {3});
  ASSERT_TRUE(eb.ok());
  EXPECT_EQ((*eb)->dtype, DType::kBF16);
  // Missing and mis-shaped tensors name themselves.
  auto missing = file->Find("c", {1});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'c'"), std::string::npos);
  auto shaped = file->Find("a", {3, 2});
  ASSERT_FALSE(shaped.ok());
  EXPECT_NE(shaped.status().message().find("[2,3]"), std::string::npos);
}

TEST(Safetensors, RejectsMalformedFiles) {
  std::vector<float> a(4, 1.0f);
  auto bytes = EncodeSafetensors({{"a", DType::kF32, {4}, a.data()}}, {});
  ASSERT_TRUE(bytes.ok());
  auto with_header = [&](const std::string& json, size_t data_bytes) {
    std::vector<std::byte> out(8 + json.size() + data_bytes);
    const uint64_t n = json.size();
    std::memcpy(out.data(), &n, 8);
    std::memcpy(out.data() + 8, json.data(), json.size());
    return out;
  };
  std::vector<std::vector<std::byte>> bad = {
      std::vector<std::byte>(bytes->begin(), bytes->begin() + 5),
      std::vector<std::byte>(bytes->begin(), bytes->end() - 1),
      with_header("{not json", 0),
      with_header(R"({"a":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})", 4),
      with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
      with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
      with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
      with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
  };
  std::vector<std::byte> huge = *bytes;
  huge[6] = std::byte{1};  // header length beyond the file
  bad.push_back(huge);
  for (size_t i = 0; i < bad.size(); ++i) {
    auto r = DecodeSafetensors(bad[i], "file q");
    ASSERT_FALSE(r.ok()) << i;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << i;
    EXPECT_NE(r.status().message().find("file q"), std::string::npos);
  }
  EXPECT_FALSE(
      EncodeSafetensors({{"a", DType::kF32, {1}, a.data()}, {"a", DType::kF32, {1}, a.data()}}, {})
          .ok());
}

}  // namespace
}  // namespace rt
