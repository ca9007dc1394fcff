#include "iofs/engine/rocks_logger.h"

#include <cstdarg>
#include <cstdio>

#include "base/log.h"

namespace rt::iofs {
namespace {

class RocksLogger : public rocksdb::Logger {
 public:
  RocksLogger(std::string name, rocksdb::InfoLogLevel level)
      : rocksdb::Logger(level), name_(std::move(name)) {}

  // Messages without a level (headers) are RocksDB's start-up banner: debug.
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::DEBUG_LEVEL, format, ap);
  }

  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char line[1024];
    const int n = std::vsnprintf(line, sizeof(line), format, ap);
    if (n < 0) return;
    switch (level) {
      case rocksdb::InfoLogLevel::WARN_LEVEL:
        LOG_WARN("rocksdb {}: {}", name_, line);
        break;
      case rocksdb::InfoLogLevel::ERROR_LEVEL:
      case rocksdb::InfoLogLevel::FATAL_LEVEL:
        LOG_ERROR("rocksdb {}: {}", name_, line);
        break;
      default:
        LOG_DEBUG("rocksdb {}: {}", name_, line);
        break;
    }
  }

 private:
  const std::string name_;
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewRocksLogger(std::string name, rocksdb::InfoLogLevel level) {
  return std::make_shared<RocksLogger>(std::move(name), level);
}

}  // namespace rt::iofs
