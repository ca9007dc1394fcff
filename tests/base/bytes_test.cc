#include "base/bytes.h"

#include <thread>

#include <gtest/gtest.h>

#include "base/deadline.h"

namespace rt {
namespace {

TEST(BytesTest, RoundTripAndTruncation) {
  ByteWriter w;
  w.Put<uint32_t>(0xDEADBEEF);
  w.Put<int64_t>(-5);
  w.Put<double>(0.25);
  w.PutString("wte");
  auto bytes = w.Take();
  ASSERT_EQ(bytes.size(), 4u + 8 + 8 + 4 + 3);

  ByteReader r(bytes, "test record");
  EXPECT_EQ(*r.Get<uint32_t>(), 0xDEADBEEFu);
  EXPECT_EQ(*r.Get<int64_t>(), -5);
  EXPECT_EQ(*r.Get<double>(), 0.25);
  EXPECT_EQ(*r.GetString(16), "wte");
  EXPECT_EQ(r.remaining(), 0u);
  Result<uint8_t> past = r.Get<uint8_t>();
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), StatusCode::kCorruption);
  EXPECT_NE(past.status().message().find("test record: truncated at byte 27"),
            std::string_view::npos)
      << past.status().message();

  ByteReader limited(bytes, "limited");
  ASSERT_TRUE(limited.GetBytes(20).ok());
  EXPECT_EQ(limited.GetString(2).status().code(), StatusCode::kCorruption);  // 3 > max 2
}

TEST(DeadlineTest, ExpiresOnTheMonotonicClock) {
  Deadline soon = Deadline::AfterMs(20);
  Deadline later = Deadline::AfterMs(10000);
  EXPECT_FALSE(soon.Expired());
  EXPECT_LE(soon.RemainingMs(), 20);
  EXPECT_EQ(later.Min(soon).when(), soon.when());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_TRUE(soon.Expired());
  EXPECT_EQ(soon.Remaining().count(), 0);
  EXPECT_GT(later.RemainingMs(), 9000);
}

}  // namespace
}  // namespace rt
