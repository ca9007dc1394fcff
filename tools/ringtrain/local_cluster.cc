// The local cluster of `ringtrain launch` and `ringtrain demo` (local_cluster.h).
#include "tools/ringtrain/local_cluster.h"

#include <sys/wait.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "base/net/auth.h"
#include "base/net/free_port.h"
#include "base/net/tls_certs.h"
#include "base/subprocess.h"
#include "daemon/control_api.h"

namespace rt::cli {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using Json = nlohmann::json;

Status IoErrorStatus(std::string message) {
  return Status(StatusCode::kIoError, std::move(message));
}

std::atomic<bool> g_stop_requested{false};

void RecordStopRequest(int) { g_stop_requested.store(true); }

}  // namespace

LocalCluster::LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}

LocalCluster::~LocalCluster() = default;  // ~ChildProcess SIGKILLs and reaps what still runs

Result<std::unique_ptr<LocalCluster>> LocalCluster::Start(LocalClusterOptions options) {
  if (options.nodes < 1 || options.nodes > 1000)
    return InvalidArgument("--nodes must be 1..1000, not " + std::to_string(options.nodes));
  if (options.slots < 1 || options.slots > 1024)
    return InvalidArgument("--slots must be 1..1024, not " + std::to_string(options.slots));
  const int ports_per_node = options.store ? 2 : 1;
  if (options.base_port != 0 && options.base_port + ports_per_node * options.nodes - 1 > 65535)
    return InvalidArgument("--base-port " + std::to_string(options.base_port) + " with " +
                           std::to_string(options.nodes) + " nodes goes past port 65535");
  if (options.dir.empty()) return InvalidArgument("local cluster: no state folder given");
  if (options.daemon_binary.empty()) return InvalidArgument("local cluster: no ringtraind path");
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) return IoErrorStatus("creating the state folder " + options.dir + ": " + ec.message());
  options.dir = fs::absolute(options.dir).string();

  std::unique_ptr<LocalCluster> cluster(new LocalCluster(std::move(options)));
  const LocalClusterOptions& o = cluster->options_;
  const std::string secret = cluster->SecretFile();
  if (!fs::exists(secret)) RETURN_IF_ERROR(net::ClusterSecret::Create(secret));
  net::TlsFiles client_tls;
  if (o.tls) {
    std::vector<std::string> names = {"client"};
    for (int id = 1; id <= o.nodes; ++id) names.push_back("node-" + std::to_string(id));
    RETURN_IF_ERROR(net::CreateTlsFiles(cluster->TlsDir(), names, 825).status());
    client_tls = net::TlsFilesIn(cluster->TlsDir(), "client");
  }
  ASSIGN_OR_RETURN(cluster->secret_, net::ClusterSecret::LoadWithTls(secret, client_tls));
  for (int id = 1; id <= o.nodes; ++id) {
    if (fs::exists(cluster->NodeDir(id)))
      return FailedPrecondition(cluster->NodeDir(id) +
                                " holds an earlier cluster's state: remove "
                                "it or pick another folder");
  }
  for (int id = 1; id <= o.nodes; ++id) {
    if (o.base_port != 0) {
      cluster->ports_[id] = static_cast<uint16_t>(o.base_port + id - 1);
      if (o.store)
        cluster->store_ports_[id] = static_cast<uint16_t>(o.base_port + o.nodes + id - 1);
    } else {
      ASSIGN_OR_RETURN(cluster->ports_[id], net::FreeLoopbackPort());
      if (o.store) {
        ASSIGN_OR_RETURN(cluster->store_ports_[id], net::FreeLoopbackPort());
      }
    }
  }
  for (int id = 1; id <= o.nodes; ++id) RETURN_IF_ERROR(cluster->WriteNodeConfig(id));
  for (int id = 1; id <= o.nodes; ++id) RETURN_IF_ERROR(cluster->StartNode(id));
  return cluster;
}

std::string LocalCluster::Address(int id) const {
  auto it = ports_.find(id);
  return "127.0.0.1:" + (it == ports_.end() ? std::string("0") : std::to_string(it->second));
}

std::string LocalCluster::StoreAddress(int id) const {
  auto it = store_ports_.find(id);
  return it == store_ports_.end() ? "" : "127.0.0.1:" + std::to_string(it->second);
}

std::string LocalCluster::SecretFile() const { return options_.dir + "/secret"; }

std::string LocalCluster::TlsDir() const { return options_.tls ? options_.dir + "/tls" : ""; }

std::string LocalCluster::NodeDir(int id) const {
  return options_.dir + "/node" + std::to_string(id);
}

std::string LocalCluster::LogPath(int id) const { return NodeDir(id) + "/daemon.log"; }

std::vector<int> LocalCluster::RunningNodes() const {
  std::vector<int> ids;
  for (const auto& [id, child] : daemons_) ids.push_back(id);
  return ids;
}

pid_t LocalCluster::DaemonPid(int id) const {
  auto it = daemons_.find(id);
  return it == daemons_.end() ? 0 : it->second->pid();
}

Status LocalCluster::WriteNodeConfig(int id) const {
  const std::string dir = NodeDir(id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoErrorStatus("creating " + dir + ": " + ec.message());
  const std::string path = dir + "/node.toml";
  std::ofstream out(path, std::ios::trunc);
  out << "# Written by `ringtrain launch` (tools/ringtrain/local_cluster.cc).\n"
      << "[node]\nid = " << id << "\nlisten = \"" << Address(id) << "\"\nstate_dir = \"" << dir
      << "\"\nslots = " << options_.slots << "\n[cluster]\nseeds = \""
      << (id == 1 ? "" : Address(1)) << "\"\netcd = \"" << options_.etcd
      << "\"\n[auth]\nsecret_file = \"" << SecretFile()
      << "\"\n[worker]\nstop_grace_ms = " << options_.stop_grace_ms << "\nenv = \""
      << options_.worker_env << "\"\n";
  if (options_.tls) {
    const net::TlsFiles tls = net::TlsFilesIn(TlsDir(), "node-" + std::to_string(id));
    out << "[tls]\ncert_file = \"" << tls.cert_file << "\"\nkey_file = \"" << tls.key_file
        << "\"\nca_file = \"" << tls.ca_file << "\"\n";
  }
  if (options_.store) {
    std::string nodes;
    for (const auto& [n, port] : store_ports_)
      nodes +=
          (nodes.empty() ? "" : ",") + std::to_string(n) + "@127.0.0.1:" + std::to_string(port);
    out << "[store]\nlisten = \"" << StoreAddress(id) << "\"\nnodes = \"" << nodes
        << "\"\ncapacity_gib = 4\n";
  }
  out.close();
  if (!out) return IoErrorStatus("writing " + path);
  return Status();
}

Status LocalCluster::StartNode(int id) {
  if (!ports_.count(id)) return FailedPrecondition("node " + std::to_string(id) + " is no node");
  if (daemons_.count(id))
    return FailedPrecondition("node " + std::to_string(id) + "'s daemon already runs");
  SpawnOptions spawn;
  spawn.argv = {options_.daemon_binary, "--config", NodeDir(id) + "/node.toml"};
  spawn.env = EnvironmentWithout({"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"});
  spawn.stdout_path = LogPath(id);
  ASSIGN_OR_RETURN(daemons_[id], ChildProcess::Spawn(io_.get_executor(), spawn));
  return Status();
}

Status LocalCluster::KillNode(int id) {
  auto it = daemons_.find(id);
  if (it == daemons_.end())
    return FailedPrecondition("node " + std::to_string(id) + "'s daemon does not run");
  RETURN_IF_ERROR(it->second->Signal(SIGKILL));
  Result<ChildExit> exit = DeadlineExceeded("not waited");
  asio::co_spawn(
      io_,
      [&]() -> asio::awaitable<void> {
        exit = co_await it->second->Wait(Deadline::AfterMs(10'000));
      },
      asio::detached);
  io_.restart();
  io_.run();
  if (!exit.ok()) return exit.status().WithContext("kill -9 of node " + std::to_string(id));
  daemons_.erase(it);
  return Status();
}

std::vector<std::pair<int, ChildExit>> LocalCluster::TakeEnded() {
  std::vector<std::pair<int, ChildExit>> ended;
  for (auto it = daemons_.begin(); it != daemons_.end();) {
    // WNOWAIT: only asks; the child stays a zombie for ChildProcess::Wait to reap.
    siginfo_t info{};
    const pid_t pid = it->second->pid();
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != pid) {
      ++it;
      continue;
    }
    Result<ChildExit> exit = DeadlineExceeded("not waited");
    asio::co_spawn(
        io_,
        [&, child = it->second.get()]() -> asio::awaitable<void> {
          exit = co_await child->Wait(Deadline::AfterMs(10'000));
        },
        asio::detached);
    io_.restart();
    io_.run();
    if (exit.ok()) ended.emplace_back(it->first, *exit);
    it = exit.ok() ? daemons_.erase(it) : std::next(it);
  }
  return ended;
}

Status LocalCluster::Stop(Deadline deadline) {
  // One at a time, highest id first, so each leave is agreed by the members that remain. The
  // last member has nothing to leave: it stops its workers and exits, or gets SIGKILL after
  // kLastMemberGrace.
  constexpr std::chrono::milliseconds kLastMemberGrace{3'000};
  std::string failed;
  while (!daemons_.empty()) {
    auto last = std::prev(daemons_.end());
    const int id = last->first;
    auto grace = std::chrono::milliseconds(std::max<int64_t>(0, deadline.RemainingMs()));
    if (daemons_.size() == 1) grace = std::min(grace, kLastMemberGrace);
    Result<ChildExit> exit = DeadlineExceeded("not waited");
    asio::co_spawn(
        io_,
        [&, child = last->second.get()]() -> asio::awaitable<void> {
          exit = co_await child->Terminate(grace);
        },
        asio::detached);
    io_.restart();
    io_.run();
    const bool last_member_ended =
        daemons_.size() == 1 && exit.ok() && (exit->exited || exit->signal == SIGKILL);
    if (!(exit.ok() && (exit->ok() || last_member_ended)))
      failed += (failed.empty() ? "" : "; ") + std::string("node ") + std::to_string(id) + ": " +
                (exit.ok() ? exit->Describe() : exit.status().ToString());
    daemons_.erase(last);  // one still running (a failed Terminate) is SIGKILLed here
  }
  if (!failed.empty()) return Internal("stopping the local cluster: " + failed);
  return Status();
}

Result<Json> LocalCluster::QueryStatus(int id, Deadline deadline) const {
  return daemon::CallJsonBlocking(Address(id), secret_, daemon::kCtlStatus, Json::object(),
                                  deadline);
}

Result<Json> LocalCluster::WaitFor(const std::string& what,
                                   const std::function<bool(const Json&)>& done, Deadline deadline,
                                   const std::function<bool()>& interrupted) {
  Json last;
  std::string last_error = "no daemon answered";
  while (!deadline.Expired()) {
    if (interrupted && interrupted()) return Aborted("interrupted while waiting for " + what);
    for (int id : RunningNodes()) {
      Result<Json> s = QueryStatus(id, Deadline::AfterMs(std::min<int64_t>(
                                           5'000, std::max<int64_t>(1, deadline.RemainingMs()))));
      if (!s.ok()) {
        last_error = s.status().ToString();
        continue;
      }
      last = std::move(*s);
      if (done(last)) return last;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return DeadlineExceeded("timed out waiting for " + what +
                          "; last status: " + (last.is_null() ? last_error : last.dump()));
}

Status LocalCluster::WaitForMembers(size_t members, Deadline deadline,
                                    const std::function<bool()>& interrupted) {
  Result<Json> seen = WaitFor(
      "a view of " + std::to_string(members) + " members",
      [members](const Json& s) { return s["view"]["members"].size() == members; }, deadline,
      interrupted);
  return seen.ok() ? Status() : seen.status();
}

Result<std::string> FindTool(const std::string& name) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return IoErrorStatus("reading /proc/self/exe: " + ec.message());
  const fs::path beside = self.parent_path() / name;
  const fs::path build_tree = self.parent_path().parent_path() / name / name;
  for (const fs::path& p : {beside, build_tree})
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  return NotFound(name + " not found at " + beside.string() + " or " + build_tree.string());
}

void InstallStopSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = RecordStopRequest;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

bool StopRequested() { return g_stop_requested.load(); }

}  // namespace rt::cli
