// The worker mode of the real ringtraind binary against a stand-in daemon (an RpcServer in this
// test): a worker exits as soon as its daemon's connection breaks, or when the daemon ends its
// generation, even while it is blocked elsewhere (here: waiting for a rendezvous store that
// never answers).
#include "daemon/worker.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include "base/net/rpc.h"
#include "base/process.h"
#include "base/subprocess.h"
#include "daemon/control_api.h"

namespace rt::daemon {
namespace {

namespace asio = boost::asio;

uint16_t UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ringtraind_worker_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "run.toml") << "[model]\nn_layer = 1\nn_embd = 16\nn_head = 2\n"
                                     << "seq_len = 8\n";
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    if (server_) server_->Abort();
    guard_.reset();
    io_.stop();
    thread_.join();
    std::filesystem::remove_all(dir_);
  }

  // Starts the stand-in daemon; its watch answers `{"stop": stop_after.has_value()}` after
  // `stop_after`, or never.
  void StartDaemon(std::optional<std::chrono::milliseconds> stop_after) {
    server_ = net::RpcServer::Create(io_.get_executor(), {});
    server_->Handle(
        kWorkerWatch,
        [this, stop_after](net::RpcRequest) -> asio::awaitable<Result<std::vector<std::byte>>> {
          ++watches_;
          asio::steady_timer timer(io_);
          timer.expires_after(stop_after.value_or(std::chrono::hours(1)));
          co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
          co_return EncodeJson({{"stop", true}});
        });
    auto port = server_->Start();
    ASSERT_TRUE(port.ok());
    port_ = *port;
  }

  std::unique_ptr<ChildProcess> StartWorker() {
    SpawnOptions o;
    o.argv = {RINGTRAIND_BIN, "worker",
              "--daemon",     "127.0.0.1:" + std::to_string(port_),
              "--generation", "1.1.1",
              "--config",     (dir_ / "run.toml").string(),
              "--layout",     "tp=1,pp=1,dp=1",
              "--ranks",      "1",
              "--rank",       "0",
              "--store",      "127.0.0.1:" + std::to_string(UnusedPort()),
              "--job",        "x"};
    o.env = EnvironmentWithout({});
    o.stdout_path = (dir_ / "worker.log").string();
    auto child = ChildProcess::Spawn(io_.get_executor(), o);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    return child.ok() ? std::move(*child) : nullptr;
  }

  // Waits (from the test thread) for the worker's exit.
  Result<ChildExit> AwaitExit(ChildProcess& worker, std::chrono::milliseconds timeout) {
    std::promise<Result<ChildExit>> done;
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
          done.set_value(co_await worker.Wait(Deadline::After(timeout)));
        },
        asio::detached);
    return done.get_future().get();
  }

  void WaitForWatch() {
    const Deadline by = Deadline::AfterMs(30'000);
    while (watches_.load() == 0 && !by.Expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_GT(watches_.load(), 0) << "the worker never called watch";
  }

  std::filesystem::path dir_;
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_{
      io_.get_executor()};
  std::thread thread_;
  std::shared_ptr<net::RpcServer> server_;
  uint16_t port_ = 0;
  std::atomic<int> watches_{0};
};

TEST_F(WorkerTest, ExitsWhenTheDaemonConnectionBreaks) {
  StartDaemon(std::nullopt);
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  WaitForWatch();
  const auto start = MonoClock::now();
  server_->Abort();  // as the kernel does for a daemon that died
  Result<ChildExit> exit = AwaitExit(*worker, std::chrono::milliseconds(20'000));
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_TRUE(exit->exited) << exit->Describe();
  EXPECT_EQ(exit->exit_code, kWorkerOrphanedExit) << exit->Describe();
  std::printf("worker exited %.3f s after its daemon's connection broke\n",
              std::chrono::duration<double>(MonoClock::now() - start).count());
}

TEST_F(WorkerTest, ExitsWhenTheDaemonEndsItsGeneration) {
  StartDaemon(std::chrono::milliseconds(300));
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  Result<ChildExit> exit = AwaitExit(*worker, std::chrono::milliseconds(30'000));
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_EQ(exit->exit_code, kWorkerOrphanedExit) << exit->Describe();
  EXPECT_EQ(watches_.load(), 1);
}

TEST_F(WorkerTest, ExitsWithAnErrorWhenItsDaemonIsNotThere) {
  port_ = UnusedPort();
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  Result<ChildExit> exit = AwaitExit(*worker, std::chrono::milliseconds(30'000));
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_EQ(exit->exit_code, 1) << exit->Describe();
  std::ifstream log(dir_ / "worker.log");
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("127.0.0.1:" + std::to_string(port_)), std::string::npos) << text;
}

}  // namespace
}  // namespace rt::daemon
