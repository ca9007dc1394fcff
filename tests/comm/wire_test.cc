// The comm wire formats: data headers and hellos round-trip and reject corruption.
#include "comm/tcp/wire.h"

#include <gtest/gtest.h>

namespace rt::comm::tcp {
namespace {

TEST(Wire, DataHeaderRoundTripAndRejects) {
  DataHeader h{OpKind::kReduceScatter, DType::kBF16, 1, 42, 3, 1000, 2000};
  auto b = EncodeDataHeader(h);
  auto d = DecodeDataHeader(b, 1 << 20);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, h);
  auto bad = b;
  bad[0] = std::byte{0};
  EXPECT_EQ(DecodeDataHeader(bad, 1 << 20).status().code(), StatusCode::kCorruption);
  bad = b;
  bad[5] = std::byte{99};  // op kind
  EXPECT_EQ(DecodeDataHeader(bad, 1 << 20).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeDataHeader(b, 100).status().code(), StatusCode::kProtocolError);
  EXPECT_EQ(DecodeDataHeader(std::span(b).first(10), 100).status().code(), StatusCode::kOutOfRange);
}

TEST(Wire, HelloRoundTrip) {
  auto p = EncodeHello({0x1234, 7, kData});
  auto h = DecodeHello(p);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->nonce, 0x1234u);
  EXPECT_EQ(h->rank, 7u);
  p.push_back(std::byte{0});
  EXPECT_FALSE(DecodeHello(p).ok());
}

}  // namespace
}  // namespace rt::comm::tcp
