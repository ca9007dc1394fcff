// cmake/Packaging.cmake: `cpack -G DEB` builds ringtrain_VERSION_ARCH.deb; unpacked into a
// scratch root with `dpkg -x`, it holds the binaries, the unit, the examples and the web files,
// declares Debian runtime dependencies, and its binaries run from there (--version, --help).
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "base/version.h"
#include "tests/base/tool_path.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

ProcessOutcome RunTool(const std::vector<std::string>& argv, int64_t timeout_ms = 120'000) {
  auto outcome = RunProcess(argv, EnvironmentWithout({}), Deadline::AfterMs(timeout_ms));
  EXPECT_TRUE(outcome.ok()) << argv[0] << ": " << outcome.status().ToString();
  return outcome.ok() ? *outcome : ProcessOutcome{};
}

bool Succeeded(const ProcessOutcome& outcome) { return outcome.exited && outcome.exit_code == 0; }

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

TEST(DebianPackage, BuildsUnpacksAndRuns) {
  const std::string cpack = FindTool("cpack"), dpkg = FindTool("dpkg"),
                    dpkg_deb = FindTool("dpkg-deb");
  if (cpack.empty() || dpkg.empty() || dpkg_deb.empty())
    GTEST_SKIP() << "cpack or dpkg not found: the package was not built";
  const fs::path scratch = fs::temp_directory_path() / ("rt_deb_" + std::to_string(getpid()));
  fs::remove_all(scratch);
  fs::create_directories(scratch);

  ProcessOutcome built = RunTool(
      {cpack, "-G", "DEB", "--config", std::string(RINGTRAIN_BUILD_DIR) + "/CPackConfig.cmake",
       "-B", (scratch / "out").string()},
      600'000);
  ASSERT_TRUE(Succeeded(built)) << built.Describe() << "\n" << built.output;
  const std::string arch = Trim(RunTool({dpkg, "--print-architecture"}).output);
  const fs::path deb =
      scratch / "out" / (std::string("ringtrain_") + kRingtrainVersion + "_" + arch + ".deb");
  ASSERT_TRUE(fs::exists(deb)) << deb << " not built; cpack said:\n" << built.output;

  // Runtime dependencies found by dpkg-shlibdeps, and the maintainer script.
  const std::string depends = RunTool({dpkg_deb, "--field", deb.string(), "Depends"}).output;
  for (const char* library :
       {"libc6", "libstdc++6", "liburing2", "libopenblas0", "libzstd1", "systemd"})
    EXPECT_NE(depends.find(library), std::string::npos) << "Depends: " << depends;
  const std::string version = Trim(RunTool({dpkg_deb, "--field", deb.string(), "Version"}).output);
  EXPECT_EQ(version, kRingtrainVersion);
  const std::string listing = RunTool({dpkg_deb, "--contents", deb.string()}).output;
  EXPECT_EQ(listing.find("_test"), std::string::npos) << "a test binary is packaged:\n" << listing;

  const fs::path root = scratch / "root";
  ASSERT_TRUE(Succeeded(RunTool({dpkg, "-x", deb.string(), root.string()})));
  for (const char* file :
       {"usr/bin/ringtrain", "usr/bin/ringfs", "usr/bin/ringfsd",
        "usr/lib/systemd/system/ringtraind.service", "usr/lib/sysusers.d/ringtrain.conf",
        "usr/share/ringtrain/web/index.html", "usr/share/ringtrain/web/status.js",
        "usr/share/doc/ringtrain/examples/node.toml",
        "usr/share/doc/ringtrain/examples/jobs/s.toml", "usr/share/doc/ringtrain/README.md",
        "usr/share/doc/ringtrain/docs/metrics.md"})
    EXPECT_TRUE(fs::exists(root / file)) << file << " missing from the package";

  // The binaries run from the unpacked tree and report this version.
  for (const char* binary : {"ringtrain", "ringfs", "ringfsd", "ringtraind", "ringctl"}) {
    const fs::path path = root / "usr/bin" / binary;
    if (!fs::exists(path)) {
      std::cout << binary << " is not built in this tree: not checked\n";
      continue;
    }
    ProcessOutcome reported = RunTool({path.string(), "--version"});
    EXPECT_TRUE(Succeeded(reported)) << binary << ": " << reported.Describe() << "\n"
                                     << reported.output;
    EXPECT_NE(reported.output.find(kRingtrainVersion), std::string::npos)
        << binary << " --version printed: " << reported.output;
    ProcessOutcome help = RunTool({path.string(), "--help"});
    EXPECT_TRUE(Succeeded(help)) << binary << " --help: " << help.Describe();
  }
  fs::remove_all(scratch);
}

}  // namespace
}  // namespace rt
