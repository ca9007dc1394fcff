// tools/systemd: the unit passes `systemd-analyze verify` (Debian's systemd package) and carries
// the settings issue 14 asks for; the example node.toml is valid TOML with every section the
// daemon reads, and the daemon's own parser accepts it.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include "base/subprocess.h"
#include "daemon/node_config.h"
#include "tests/base/tool_path.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `systemd-analyze verify` on `unit_text` saved as ringtraind.service in a scratch folder;
// returns the outcome (any output is a complaint: verify exits 0 after mere warnings).
ProcessOutcome Verify(const std::string& systemd_analyze, const std::string& unit_text) {
  const fs::path dir = fs::temp_directory_path() / ("rt_unit_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ringtraind.service") << unit_text;
  auto outcome = RunProcess({systemd_analyze, "verify", (dir / "ringtraind.service").string()},
                            EnvironmentWithout({}), Deadline::AfterMs(60'000));
  fs::remove_all(dir);
  EXPECT_TRUE(outcome.ok()) << outcome.status().ToString();
  return outcome.ok() ? *outcome : ProcessOutcome{};
}

// The unit with ExecStart's binary replaced by one that exists here (verify checks it does).
std::string UnitRunnableHere() {
  std::string unit = ReadText(fs::path(RINGTRAIN_SOURCE_DIR) / "tools/systemd/ringtraind.service");
  const std::string installed = "/usr/bin/ringtraind";
  const size_t at = unit.find("ExecStart=" + installed);
  EXPECT_NE(at, std::string::npos);
  if (at != std::string::npos)
    unit.replace(at + 10, installed.size(), fs::read_symlink("/proc/self/exe").string());
  return unit;
}

TEST(SystemdUnit, HasTheSettingsTheDaemonRelies) {
  const std::string unit =
      ReadText(fs::path(RINGTRAIN_SOURCE_DIR) / "tools/systemd/ringtraind.service");
  for (const char* line :
       {"\nType=notify\n", "\nWatchdogSec=", "\nRestart=on-failure\n", "\nNoNewPrivileges=yes\n",
        "\nProtectSystem=strict\n", "\nStateDirectory=ringtrain\n", "\nLimitMEMLOCK=infinity\n",
        "\nTimeoutStopSec=", "\nKillMode=mixed\n",
        "\nExecStart=/usr/bin/ringtraind --config /etc/ringtrain/node.toml\n"})
    EXPECT_NE(unit.find(line), std::string::npos) << "missing: " << line;
}

TEST(SystemdUnit, PassesSystemdAnalyzeVerify) {
  const std::string systemd_analyze = FindTool("systemd-analyze");
  if (systemd_analyze.empty())
    GTEST_SKIP() << "systemd-analyze not found (Debian package systemd; `tools/run setup` "
                    "installs it): the unit was not verified";
  ProcessOutcome verified = Verify(systemd_analyze, UnitRunnableHere());
  EXPECT_TRUE(verified.exited && verified.exit_code == 0) << verified.Describe();
  EXPECT_EQ(verified.output, "");
  // verify does complain about a broken unit (so the check above can fail).
  std::string broken = UnitRunnableHere();
  broken.replace(broken.find("Type=notify"), 11, "Type=notifyy");
  EXPECT_NE(Verify(systemd_analyze, broken).output.find("notifyy"), std::string::npos);
}

TEST(ExampleNodeConfig, IsValidTomlWithEverySection) {
  const fs::path path = fs::path(RINGTRAIN_SOURCE_DIR) / "tools/systemd/node.toml";
  toml::table config;
  try {
    config = toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    FAIL() << path << ": " << e.description();
  }
  EXPECT_TRUE(config["node"]["id"].is_integer());
  EXPECT_EQ(config["node"]["state_dir"].value_or(std::string()), "/var/lib/ringtrain");
  EXPECT_TRUE(config["node"]["listen"].is_string());
  EXPECT_TRUE(config["cluster"]["seeds"].is_string());
  EXPECT_TRUE(config["http"]["listen"].is_string());
  // ... and the daemon reads it as it is.
  Result<daemon::NodeConfig> node = daemon::LoadNodeConfig(path.string());
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(node->http_listen, "0.0.0.0:7780");
  EXPECT_EQ(node->state_dir, "/var/lib/ringtrain");
  EXPECT_TRUE(config["auth"]["secret_file"].is_string());
  // The unit's StateDirectory is the only writable place under ProtectSystem=strict.
  const std::string unit =
      ReadText(fs::path(RINGTRAIN_SOURCE_DIR) / "tools/systemd/ringtraind.service");
  EXPECT_NE(unit.find("StateDirectory=ringtrain\n"), std::string::npos);
}

}  // namespace
}  // namespace rt
