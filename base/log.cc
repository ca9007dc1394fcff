#include "base/log.h"

#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "base/deadline.h"

namespace rt {

Status InitLogging(std::string_view level, std::string_view name) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off")
    return InvalidArgument("log level '" + std::string(level) +
                           "' is not one of trace, debug, info, warn, error, off");
  spdlog::drop(std::string(name));
  auto logger = spdlog::stderr_color_mt(std::string(name));
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %n[%P] %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  spdlog::set_level(parsed);
  return Status();
}

void WarnIfSlow(double started_s, std::string_view what, double limit_s) {
  const double took = MonoSeconds() - started_s;
  if (took > limit_s) LOG_WARN("{} took {:.2f} s", what, took);
}

}  // namespace rt
