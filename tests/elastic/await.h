// Await(awaitable): runs a coroutine to completion on a fresh io_context of the calling thread,
// for tests that call the membership services' awaitables from plain test code.
#pragma once

#include <optional>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

namespace rt::testing {

template <typename T>
boost::asio::awaitable<std::optional<T>> AwaitAsOptional(boost::asio::awaitable<T> work) {
  co_return co_await std::move(work);
}

// The value of `work` (through an optional: co_spawn needs a default-constructible result,
// which Result<T> is not).
template <typename T>
T Await(boost::asio::awaitable<T> work) {
  boost::asio::io_context io;
  auto result =
      boost::asio::co_spawn(io, AwaitAsOptional(std::move(work)), boost::asio::use_future);
  io.run();
  return *result.get();
}

}  // namespace rt::testing
