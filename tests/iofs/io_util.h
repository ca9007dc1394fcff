// An io_context on its own thread for client-side coroutines in the iofs tests.
#pragma once

#include <cstdlib>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "base/net/frame_io.h"
#include "base/net/rpc.h"
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

// One raw RPC of `type` to the server on 127.0.0.1:`port` (a fresh connection, authenticated
// with `secret` when set); its reply payload.
inline Result<std::vector<std::byte>> RawCall(
    Io& io, uint16_t port, uint16_t type, std::vector<std::byte> payload,
    std::shared_ptr<const net::ClusterSecret> secret = nullptr) {
  return io.Run([](uint16_t port, uint16_t type, std::vector<std::byte> payload,
                   std::shared_ptr<const net::ClusterSecret> secret)
                    -> boost::asio::awaitable<Result<std::vector<std::byte>>> {
    net::RpcClientOptions options;
    options.secret = std::move(secret);
    auto client = co_await net::RpcClient::Connect(
        "127.0.0.1", port, Deadline::After(std::chrono::seconds(5)), options);
    if (!client.ok()) co_return client.status();
    auto reply = co_await (*client)->Call(type, payload, Deadline::After(std::chrono::seconds(10)));
    (*client)->Close();
    if (!reply.ok()) co_return reply.status();
    co_return std::move(reply->payload);
  }(port, type, std::move(payload), std::move(secret)));
}

// Writes a whole file through the client: create, parallel chunk writes, seal.
inline Status PutFile(Io& io, Client& c, const std::string& path,
                      const std::vector<std::byte>& data) {
  auto created = io.Run(c.Create(path, Deadline::After(std::chrono::seconds(30))));
  if (!created.ok()) return created.status();
  RETURN_IF_ERROR(
      io.Run(c.WriteParallel(path, 0, data, 4, Deadline::After(std::chrono::seconds(60)))));
  return io.Run(c.Seal(path, Deadline::After(std::chrono::seconds(30))));
}

// Reads a whole file through the client.
inline Result<std::vector<std::byte>> GetFile(Io& io, Client& c, const std::string& path) {
  std::vector<std::byte> out;
  RETURN_IF_ERROR(io.Run(
      c.ReadParallel(path, 0, UINT64_MAX, 4, &out, Deadline::After(std::chrono::seconds(60)))));
  return out;
}

}  // namespace rt::iofs::testing
