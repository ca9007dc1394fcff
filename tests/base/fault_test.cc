#include "base/fault.h"

#include <gtest/gtest.h>

namespace rt {
namespace {

TEST(FaultTest, ArmedPointsFireOnlyInTestBuilds) {
  fault::DisarmAll();
  EXPECT_TRUE(RT_FAULT_POINT("test.point").ok());
  fault::Arm("test.point", {fault::Action::kError, 0, 2});
  Status first = RT_FAULT_POINT("test.point");
  Status second = RT_FAULT_POINT("test.point");
  Status third = RT_FAULT_POINT("test.point");
  if (fault::Enabled()) {
    EXPECT_TRUE(first.ok());
    EXPECT_FALSE(second.ok());
    EXPECT_NE(second.message().find("test.point"), std::string_view::npos);
    EXPECT_TRUE(third.ok());
    EXPECT_EQ(fault::HitCount("test.point"), 3);
  } else {
    EXPECT_TRUE(second.ok());
  }
  fault::DisarmAll();
}

TEST(FaultTest, ParsesSpecsAndRejectsBadOnes) {
  fault::DisarmAll();
  EXPECT_TRUE(fault::ArmFromString("a.b=error,c.d=delay:1@2,e=crash@5").ok());
  EXPECT_EQ(fault::ArmFromString("a.b=explode").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fault::ArmFromString("noequals").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fault::ArmFromString("x=delay:abc").code(), StatusCode::kInvalidArgument);
  fault::DisarmAll();
}

TEST(FaultDeathTest, CrashKillsTheProcess) {
  if (!fault::Enabled()) GTEST_SKIP() << "fault points compiled out";
  EXPECT_EXIT(
      {
        fault::Arm("test.crash", {fault::Action::kCrash, 0, 0});
        (void)RT_FAULT_POINT("test.crash");
      },
      testing::KilledBySignal(SIGKILL), "");
}

}  // namespace
}  // namespace rt
