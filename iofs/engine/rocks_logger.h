// RocksDB's diagnostic log routed into our spdlog logger instead of a LOG file beside the
// metadata. Besides putting every message in one place, this keeps RocksDB from writing its own
// log file on the data disk: on a full disk that file's writer fails, and RocksDB 7.8 asserts
// when it logs again through a writer that has failed (seen while closing the engine).
#pragma once

#include <memory>
#include <string>

#include <rocksdb/env.h>

namespace rt::iofs {

// A logger for rocksdb::Options::info_log that writes RocksDB's messages of at least `level` to
// spdlog (RocksDB's WARN and above as warnings/errors, lower levels as debug), each prefixed with
// `name` (e.g. the metadata folder). Thread-safe.
std::shared_ptr<rocksdb::Logger> NewRocksLogger(
    std::string name, rocksdb::InfoLogLevel level = rocksdb::InfoLogLevel::WARN_LEVEL);

}  // namespace rt::iofs
