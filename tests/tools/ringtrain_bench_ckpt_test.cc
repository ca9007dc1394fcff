// Smoke test of `ringtrain bench ckpt` (the real binary, a real ringfsd) on config tiny with tiny
// sizes: it runs, prints its JSON line, and the byte counts match the model (no timing
// assertions: the machine may be loaded). Bad arguments are refused with a message.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/ckpt/util.h"
#include "tests/iofs/process_util.h"
#include "tests/tools/shell_run.h"

namespace rt {
namespace {

using Outcome = ::rt::testing::ShellOutcome;

Outcome BenchCkpt(const std::string& args) {
  return ::rt::testing::RunShell(std::string(RINGTRAIN_BIN) + " bench ckpt " + args);
}

// Parameters of configs/tiny.toml (L=2, C=64, T=32, V=256), by GPT-2's formula: wte, wpe, per
// block 12C² + 13C (qkv, proj, fc, fc_proj with biases, two layer norms), the final layer norm.
constexpr int64_t kTinyParams = 256 * 64 + 32 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64;

TEST(RingtrainBenchCkptTest, TinyRunPrintsJson) {
  ckpt::testing::TempDir dir("bench-ckpt");
  const uint16_t port = iofs::testing::FreePort();
  iofs::testing::Process server;
  ASSERT_TRUE(
      server.Start({RINGFSD, "--state", dir.path() + "/state", "--port", std::to_string(port)}, {},
                   dir.path() + "/server.log"));
  const Outcome out = BenchCkpt("--config tiny --layout dp=2 --dir " + dir.path() +
                                "/posix --ringfs ringfs://127.0.0.1:" + std::to_string(port) +
                                "/ck --warmup 1 --steps 2 --every 1 --passes 1 --rounds 1");
  (void)server.Stop(std::chrono::seconds(15));
  ASSERT_EQ(out.exit_code, 0) << out.output << iofs::testing::ReadText(dir.path() + "/server.log");
  const size_t at = out.output.find("JSON {");
  ASSERT_NE(at, std::string::npos) << out.output;
  const auto json =
      nlohmann::json::parse(out.output.substr(at + 5, out.output.find('\n', at) - at - 5));
  EXPECT_EQ(json["ranks"], 2);
  EXPECT_EQ(json["reshard_to"], "pp=2");
  ASSERT_EQ(json["codecs"].size(), 3u) << json.dump();
  for (const auto& c : json["codecs"]) {
    // AdamW m and v: two fp32 values per parameter, whatever the codec.
    EXPECT_EQ(c["adam_raw"].get<int64_t>(), 2 * 4 * kTinyParams) << c.dump();
    EXPECT_GT(c["weights_raw"].get<int64_t>(), 0) << c.dump();
    if (c["codec"] == "none") {
      EXPECT_EQ(c["adam_stored"], c["adam_raw"]);
      EXPECT_EQ(c["weights_stored"], c["weights_raw"]);
    }
  }
  const int64_t state_bytes = json["codecs"][0]["adam_raw"].get<int64_t>() +
                              json["codecs"][0]["weights_raw"].get<int64_t>();
  for (const char* target : {"posix", "ringfs"}) {
    ASSERT_TRUE(json["targets"].contains(target)) << json.dump();
    // The data files plus the manifest and fragments.
    EXPECT_GT(json["targets"][target]["bytes"].get<int64_t>(), state_bytes) << json.dump();
    EXPECT_GT(json["targets"][target]["reshard_load_s"].get<double>(), 0) << json.dump();
    EXPECT_GT(json["targets"][target]["target_same_layout_load_s"].get<double>(), 0) << json.dump();
  }
}

TEST(RingtrainBenchCkptTest, BadArgumentsAreRefused) {
  ckpt::testing::TempDir dir("bench-ckpt-bad");
  Outcome out = BenchCkpt("--config tiny");
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("--dir"), std::string::npos) << out.output;
  out = BenchCkpt("--config tiny --dir " + dir.path() + " --reshard-to dp=4");
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("--reshard-to dp=4 has 4 ranks"), std::string::npos) << out.output;
  out = BenchCkpt("--config tiny --dir " + dir.path() + " --steps 2 --every 5");
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("--every"), std::string::npos) << out.output;
}

}  // namespace
}  // namespace rt
