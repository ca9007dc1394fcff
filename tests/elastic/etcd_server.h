// A real etcd (Debian's etcd-server, /usr/bin/etcd) for the tests of membership in etcd: one
// member on two free loopback ports with its data in a temporary folder, started and waited
// for, killed (and its folder removed) when the object is destroyed.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "base/net/frame_io.h"
#include "base/net/http_client.h"
#include "base/process.h"
#include "base/subprocess.h"
#include "tests/iofs/process_util.h"

namespace rt::testing {

class EtcdServer {
 public:
  // The etcd binary, or "" when it is not installed.
  static std::string Binary() {
    for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"})
      if (::access(path, X_OK) == 0) return path;
    return "";
  }

  // Starts etcd under `dir` (created; removed by the destructor) and waits until it answers.
  // Errors: the spawn's, or DeadlineExceeded naming its log when it does not answer in 30 s.
  static Result<std::unique_ptr<EtcdServer>> Start(const std::filesystem::path& dir) {
    std::unique_ptr<EtcdServer> etcd(new EtcdServer());
    etcd->dir_ = dir;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    etcd->client_port_ = iofs::testing::FreePort();
    const uint16_t peer_port = iofs::testing::FreePort();
    const std::string client = "http://127.0.0.1:" + std::to_string(etcd->client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    SpawnOptions o;
    o.argv = {Binary(),
              "--name",
              "test",
              "--data-dir",
              (dir / "data").string(),
              "--listen-client-urls",
              client,
              "--advertise-client-urls",
              client,
              "--listen-peer-urls",
              peer,
              "--initial-advertise-peer-urls",
              peer,
              "--initial-cluster",
              "test=" + peer,
              "--log-level",
              "warn"};
    o.env = EnvironmentWithout({"ETCD_NAME", "ETCD_DATA_DIR"});
    o.stdout_path = (dir / "etcd.log").string();
    ASSIGN_OR_RETURN(etcd->process_, ChildProcess::Spawn(etcd->io_.get_executor(), o));
    const Deadline deadline = Deadline::AfterMs(30'000);
    while (!deadline.Expired()) {
      if (etcd->Answers()) return etcd;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return DeadlineExceeded("etcd did not answer within 30 s; see " + (dir / "etcd.log").string());
  }

  ~EtcdServer() {
    process_.reset();  // SIGKILL and reap
    guard_.reset();
    io_.stop();
    thread_.join();
    std::filesystem::remove_all(dir_);
  }

  // "http://127.0.0.1:PORT".
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
  // Sends `signal` to etcd (SIGSTOP/SIGCONT: an etcd that does not answer).
  void Signal(int signal) { (void)process_->Signal(signal); }

  // True when a range request is answered.
  bool Answers() {
    net::HttpCallRequest request;
    request.method = "POST";
    request.port = client_port_;
    request.target = "/v3/kv/range";
    request.body = R"({"key":"AA=="})";
    Result<net::HttpResponse> r =
        net::BlockOn(io_.get_executor(), net::HttpCall(request, Deadline::AfterMs(500)));
    return r.ok() && r->status == 200;
  }

 private:
  EtcdServer() : guard_(io_.get_executor()), thread_([this] { io_.run(); }) {}

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::jthread thread_;
  std::filesystem::path dir_;
  uint16_t client_port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace rt::testing
