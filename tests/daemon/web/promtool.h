// `promtool check metrics` (Debian's prometheus package) on a scrape, for the metrics tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "base/subprocess.h"

namespace rt::web {

// Runs `promtool check metrics` on `text`; returns its outcome.
inline ProcessOutcome Promtool(const std::string& promtool, const std::string& text) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("ringtrain_metrics_" + std::to_string(getpid()) + ".txt");
  std::ofstream(file) << text;
  auto outcome =
      RunProcess({"/bin/sh", "-c", "\"$0\" check metrics < \"$1\"", promtool, file.string()},
                 EnvironmentWithout({}), Deadline::AfterMs(60'000));
  std::filesystem::remove(file);
  EXPECT_TRUE(outcome.ok()) << outcome.status().ToString();
  return outcome.ok() ? *outcome : ProcessOutcome{};
}

}  // namespace rt::web
