// An io_context on its own thread for client-side coroutines in the iofs tests.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "base/net/frame_io.h"
#include "iofs/client.h"

namespace rt::iofs::testing {

// Run() blocks the calling thread on one coroutine run on the context's thread.
class Io {
 public:
  Io() : work_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~Io() {
    work_.reset();
    io_.stop();
    thread_.join();
  }
  template <typename T>
  T Run(boost::asio::awaitable<T> op) {
    return net::BlockOn<T>(io_.get_executor(), std::move(op));
  }
  boost::asio::io_context& io() { return io_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

// A client of the server on 127.0.0.1:`port`; aborts the test binary if it cannot connect.
inline std::shared_ptr<Client> ConnectOrDie(Io& io, uint16_t port) {
  auto c = io.Run(Client::Connect("127.0.0.1", port, Deadline::After(std::chrono::seconds(10))));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) std::abort();
  return *c;
}

}  // namespace rt::iofs::testing
