#include "base/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace rt {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x));
  return Status();
}

TEST(StatusTest, OkAndErrors) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "OK");
  Status bad = NotFound("tensor 'wte'");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), StatusCode::kNotFound);
  EXPECT_EQ(bad.ToString(), "NotFound: tensor 'wte'");
  Status copy = bad;
  EXPECT_EQ(copy.ToString(), bad.ToString());
  EXPECT_EQ(bad.WithContext("loading ckpt").ToString(), "NotFound: loading ckpt: tensor 'wte'");
  EXPECT_TRUE(Unavailable("peer").retryable());
  EXPECT_FALSE(Corruption("crc").retryable());
}

TEST(StatusTest, MacrosPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().ToString(), "InvalidArgument: odd 3");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), StatusCode::kInvalidArgument);
}

TEST(StatusTest, ErrnoMapping) {
  Status s = ErrnoStatus(ENOSPC, "write chunk file");
  EXPECT_EQ(s.code(), StatusCode::kNoSpace);
  EXPECT_NE(s.message().find("write chunk file"), std::string_view::npos);
  EXPECT_NE(s.message().find("status_test.cc:"), std::string_view::npos);
  EXPECT_TRUE(ErrnoStatus(ECONNRESET, "recv").retryable());
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  Result<int> r = InvalidArgument("x");
  EXPECT_DEATH((void)r.value(), "Result::value\\(\\) on an error");
}

}  // namespace
}  // namespace rt
