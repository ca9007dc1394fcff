#include "base/frame.h"

#include <gtest/gtest.h>

namespace rt {
namespace {

std::vector<std::byte> Bytes(std::string_view s) {
  auto p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

TEST(FrameTest, RoundTrip) {
  auto payload = Bytes("hello ring");
  auto wire = EncodeFrame(7, 1, 42, payload);
  ASSERT_EQ(wire.size(), kFrameHeaderSize + payload.size());
  size_t used = 0;
  Result<Frame> f = DecodeFrame(wire, kDefaultMaxFramePayload, &used);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(used, wire.size());
  EXPECT_EQ(f->header.type, 7);
  EXPECT_EQ(f->header.flags, 1u);
  EXPECT_EQ(f->header.request_id, 42u);
  EXPECT_EQ(f->payload, payload);
}

TEST(FrameTest, RejectsBadInput) {
  auto wire = EncodeFrame(1, 0, 0, Bytes("payload"));
  size_t used = 0;
  // Truncated: need more bytes.
  EXPECT_EQ(DecodeFrame(std::span(wire).first(10), 1024, &used).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(DecodeFrame(std::span(wire).first(wire.size() - 1), 1024, &used).status().code(),
            StatusCode::kOutOfRange);
  // Over the length limit.
  EXPECT_EQ(DecodeFrame(wire, 3, &used).status().code(), StatusCode::kProtocolError);
  // Flipped payload bit → checksum.
  auto flipped = wire;
  flipped.back() ^= std::byte{1};
  EXPECT_EQ(DecodeFrame(flipped, 1024, &used).status().code(), StatusCode::kCorruption);
  // Bad magic.
  auto bad = wire;
  bad[0] = std::byte{0};
  EXPECT_EQ(DecodeFrame(bad, 1024, &used).status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace rt
