// Logging through spdlog. One process-wide logger writing to stderr; every binary calls
// InitLogging() once at start. The macros take fmt-style format strings:
//     LOG_INFO("chunk {} written in {} us", id, us);
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

#include "base/status.h"

namespace rt {

// Sets up the stderr logger with `level` ("trace", "debug", "info", "warn", "error", "off")
// and `name` (printed in each line, e.g. "ringtraind"). Errors name a bad level. Not thread-safe:
// call before starting threads.
Status InitLogging(std::string_view level, std::string_view name = "ringtrain");

// Logs a warning "`what` took N s" when more than `limit_s` seconds passed since `started_s`
// (a MonoSeconds() value): the steps of a recovery say where a slow one spent its time.
void WarnIfSlow(double started_s, std::string_view what, double limit_s = 3.0);

}  // namespace rt

#define LOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
