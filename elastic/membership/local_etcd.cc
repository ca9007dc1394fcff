#include "elastic/membership/local_etcd.h"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "base/net/free_port.h"
#include "base/net/http_client.h"
#include "base/subprocess.h"

namespace rt::elastic {
namespace {

// True when etcd on `port` answers a range request within 500 ms.
bool Answers(uint16_t port) {
  boost::asio::io_context io;
  net::HttpCallRequest request;
  request.method = "POST";
  request.port = port;
  request.target = "/v3/kv/range";
  request.body = R"({"key":"AA=="})";
  std::optional<Result<net::HttpResponse>> response;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        response.emplace(co_await net::HttpCall(request, Deadline::AfterMs(500)));
      },
      boost::asio::detached);
  io.run();
  return response && response->ok() && (*response)->status == 200;
}

}  // namespace

std::string LocalEtcd::Binary() {
  for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"})
    if (::access(path, X_OK) == 0) return path;
  return "";
}

Result<std::unique_ptr<LocalEtcd>> LocalEtcd::Start(const std::string& dir) {
  const std::string binary = Binary();
  if (binary.empty())
    return NotFound("etcd is not installed (apt-get install etcd-server; tools/run setup does)");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kIoError, "creating " + dir + ": " + ec.message());
  ASSIGN_OR_RETURN(const uint16_t client_port, net::FreeLoopbackPort());
  ASSIGN_OR_RETURN(const uint16_t peer_port, net::FreeLoopbackPort());
  const std::string client = "http://127.0.0.1:" + std::to_string(client_port);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
  SpawnOptions o;
  o.argv = {binary,
            "--name",
            "local",
            "--data-dir",
            dir + "/data",
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            "local=" + peer,
            "--log-level",
            "warn"};
  o.env = EnvironmentWithout({"ETCD_NAME", "ETCD_DATA_DIR", "ETCD_LISTEN_CLIENT_URLS",
                              "ETCD_ADVERTISE_CLIENT_URLS", "ETCD_INITIAL_CLUSTER"});
  o.stdout_path = dir + "/etcd.log";
  ASSIGN_OR_RETURN(std::unique_ptr<SyncChild> process, SyncChild::Start(o));
  std::unique_ptr<LocalEtcd> etcd(new LocalEtcd(dir, client_port, std::move(process)));
  const Deadline deadline = Deadline::AfterMs(30'000);
  while (!deadline.Expired()) {
    if (Answers(client_port)) return etcd;
    if (etcd->process_->WaitExit(Deadline::AfterMs(50)))
      return Unavailable("etcd exited at start: " + etcd->process_->exit()->Describe() + "; see " +
                         dir + "/etcd.log");
  }
  return DeadlineExceeded("etcd did not answer within 30 s; see " + dir + "/etcd.log");
}

LocalEtcd::LocalEtcd(std::string dir, uint16_t port, std::unique_ptr<SyncChild> process)
    : dir_(std::move(dir)), port_(port), process_(std::move(process)) {}

LocalEtcd::~LocalEtcd() {
  process_->Kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string LocalEtcd::endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

Status LocalEtcd::Signal(int signal) { return process_->Signal(signal); }

}  // namespace rt::elastic
