// Helpers shared by the base/net tests: byte strings and an io_context on its own thread.
#pragma once

#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "base/net/frame_io.h"

namespace rt::net {

using Bytes = std::vector<std::byte>;

inline Bytes B(std::string_view s) {
  auto p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}
// Payloads passed to a call that is started now and awaited later must outlive it.
inline std::span<const std::byte> Keep(Bytes b) {
  static std::mutex mu;
  static std::deque<Bytes> kept;
  std::lock_guard lock(mu);
  kept.push_back(std::move(b));
  return kept.back();
}
inline std::string S(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// An io_context run by one background thread for the duration of a test.
class Loop {
 public:
  Loop() : guard_(io_.get_executor()), thread_([this] { io_.run(); }) {}
  ~Loop() {
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  asio::io_context& io() { return io_; }
  // Runs a coroutine on the loop and returns its result.
  template <typename T>
  T Run(std::function<asio::awaitable<T>()> fn) {
    return BlockOn(io_.get_executor(), fn());
  }
  template <typename T>
  std::future<T> Start(asio::awaitable<T> op) {
    return std::async(std::launch::async, [this, op = std::move(op)]() mutable {
      return BlockOn(io_.get_executor(), std::move(op));
    });
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

}  // namespace rt::net
