// A client session for the ringfs command line: an io_context on its own thread, and Run() to
// block the main thread on one coroutine against it.
#pragma once

#include <memory>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "base/net/frame_io.h"
#include "iofs/client.h"

namespace ringfs {

class Session {
 public:
  Session() : work_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~Session() {
    client.reset();
    work_.reset();
    io_.stop();
    thread_.join();
  }
  template <typename T>
  T Run(boost::asio::awaitable<T> op) {
    return rt::net::BlockOn<T>(io_.get_executor(), std::move(op));
  }
  std::shared_ptr<rt::iofs::Client> client;

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

// Options of `ringfs bench`.
struct BenchOptions {
  uint64_t size_mib = 4096;  // file size for the sequential passes
  int parallel = 16;         // requests in flight
  int random_reads = 4096;   // 64 KiB random reads
  std::string path = "/bench/ringfs-bench.dat";
  int64_t timeout_s = 600;
  bool tcp = false;  // never use the shared-memory path
};

// Runs the benchmark and prints one line per pass; returns the exit code.
int RunBench(Session& session, const BenchOptions& options);

}  // namespace ringfs
