# Third-party dependencies, all from Debian's packages (tools/run setup installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(Boost 1.81 REQUIRED CONFIG)           # Asio is header-only
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(RocksDB REQUIRED)
find_package(zstd REQUIRED)
find_package(Protobuf REQUIRED)
find_package(OpenSSL REQUIRED)                     # libcrypto: HMAC-SHA256 for the cluster secret
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
