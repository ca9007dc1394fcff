#include "base/crc32c.h"

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace rt {
namespace {

// Test vectors from RFC 3720 (iSCSI), appendix B.4, and the common "123456789" check value.
TEST(Crc32cTest, PublishedVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> buf(32, 0);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  std::fill(buf.begin(), buf.end(), 0xFF);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  std::iota(buf.begin(), buf.end(), 0);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

TEST(Crc32cTest, HardwareMatchesSoftwareAndExtends) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(10007);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 4096u, 10007u}) {
    EXPECT_EQ(Crc32c(data.data(), n), Crc32cExtendSoftware(0, data.data(), n)) << n;
  }
  uint32_t whole = Crc32c(data.data(), data.size());
  uint32_t split = Crc32cExtend(Crc32c(data.data(), 1234), data.data() + 1234, data.size() - 1234);
  EXPECT_EQ(whole, split);
}

}  // namespace
}  // namespace rt
