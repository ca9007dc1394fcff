#include "bench/chaos/cluster.h"

#include <csignal>
#include <filesystem>
#include <fstream>

#include "base/net/free_port.h"

namespace rt::chaos {
namespace {

// The control and chunk store ports of a daemon in its own network namespace.
constexpr uint16_t kNamespacePort = 7700;
constexpr uint16_t kNamespaceStorePort = 7701;

}  // namespace

Result<std::unique_ptr<LocalCluster>> LocalCluster::Create(ClusterOptions options) {
  if (options.nodes < 1) return InvalidArgument("a cluster needs at least one node");
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(std::move(options)));
  if (cluster->options_.network != nullptr) {
    const std::string path = cluster->options_.dir + "/cluster.secret";
    RETURN_IF_ERROR(net::ClusterSecret::Create(path));
    ASSIGN_OR_RETURN(cluster->secret_, net::ClusterSecret::Load(path));
  }
  for (int id = 1; id <= cluster->options_.nodes; ++id) {
    // In a namespace of its own every daemon has the whole port space: a fixed port.
    if (cluster->options_.network != nullptr) {
      cluster->ports_[id] = kNamespacePort;
      cluster->store_ports_[id] = kNamespaceStorePort;
    } else {
      ASSIGN_OR_RETURN(cluster->ports_[id], net::FreeLoopbackPort());
      ASSIGN_OR_RETURN(cluster->store_ports_[id], net::FreeLoopbackPort());
    }
    std::error_code ec;
    std::filesystem::create_directories(cluster->StateDir(id), ec);
    if (ec)
      return Status(StatusCode::kIoError, "create " + cluster->StateDir(id) + ": " + ec.message());
  }
  return cluster;
}

LocalCluster::~LocalCluster() {
  for (int id : paused_)
    if (daemons_.contains(id)) (void)daemons_[id]->Signal(SIGCONT);
  daemons_.clear();  // each kills its process group and reaps it
}

std::string LocalCluster::Address(int id) const {
  const std::string host = options_.network ? options_.network->Address(id) : "127.0.0.1";
  return host + ":" + std::to_string(ports_.at(id));
}

std::string LocalCluster::StoreAddress(int id) const {
  const std::string host = options_.network ? options_.network->Address(id) : "127.0.0.1";
  return host + ":" + std::to_string(store_ports_.at(id));
}

std::string LocalCluster::SecretFile() const {
  return options_.network != nullptr ? options_.dir + "/cluster.secret" : "";
}

std::string LocalCluster::StateDir(int id) const {
  return options_.dir + "/node" + std::to_string(id);
}

Status LocalCluster::Start(int id) {
  if (!ports_.contains(id)) return InvalidArgument("no node " + std::to_string(id));
  if (Running(id)) return FailedPrecondition("daemon " + std::to_string(id) + " already runs");
  daemons_.erase(id);
  paused_.erase(id);
  const std::string state = StateDir(id);
  const std::string config = state + "/node.toml";
  {
    std::ofstream out(config);
    out << "[node]\nid = " << id << "\nlisten = \"" << Address(id) << "\"\nstate_dir = \"" << state
        << "\"\nslots = " << options_.slots << "\n";
    if (options_.network != nullptr)
      out << "rendezvous_host = \"" << options_.network->Address(id) << "\"\n[auth]\n"
          << "secret_file = \"" << SecretFile() << "\"\n";
    if (options_.store_replication > 0) {
      std::string nodes;
      for (const auto& [n, port] : store_ports_)
        nodes += (nodes.empty() ? "" : ",") + std::to_string(n) + "@" + StoreAddress(n);
      out << "[store]\nlisten = \"" << StoreAddress(id) << "\"\nnodes = \"" << nodes
          << "\"\nreplication = " << options_.store_replication
          << "\nchains = 8\ncapacity_gib = 1\n";
    }
    out << "[cluster]\nseeds = \"" << (id == 1 ? "" : Address(1)) << "\"\netcd = \""
        << options_.etcd
        << "\"\netcd_prefix = \"/ringchaos\"\n[worker]\nstop_grace_ms = " << options_.stop_grace_ms
        << "\nenv = \"OMP_NUM_THREADS=1\"\n";
    if (options_.worker_nice >= 0) out << "nice = " << options_.worker_nice << "\n";
    if (!out) return Status(StatusCode::kIoError, "write " + config);
  }
  SpawnOptions o;
  if (options_.network != nullptr) o.argv = options_.network->ExecPrefix(id);
  o.argv.insert(o.argv.end(), {options_.ringtraind, "--config", config});
  o.env = EnvironmentWithout({"RINGTRAIN_FAULTS"});
  o.env.insert(o.env.end(), options_.env.begin(), options_.env.end());
  o.stdout_path = state + "/daemon.log";
  ASSIGN_OR_RETURN(daemons_[id], SyncChild::Start(o));
  return Status();
}

Status LocalCluster::Kill(int id) {
  if (!Running(id)) return FailedPrecondition("daemon " + std::to_string(id) + " does not run");
  (void)daemons_[id]->Kill();  // SIGKILL to its group, then reaps it
  daemons_.erase(id);
  paused_.erase(id);
  return Status();
}

Status LocalCluster::Pause(int id, bool stop) {
  if (!Running(id)) return FailedPrecondition("daemon " + std::to_string(id) + " does not run");
  RETURN_IF_ERROR(daemons_[id]->Signal(stop ? SIGSTOP : SIGCONT));
  if (stop) {
    paused_.insert(id);
  } else {
    paused_.erase(id);
  }
  return Status();
}

bool LocalCluster::Running(int id) {
  auto it = daemons_.find(id);
  return it != daemons_.end() && !it->second->WaitExit(Deadline::AfterMs(0)).has_value();
}

std::vector<int> LocalCluster::TakeUnexpectedExits() {
  std::vector<int> gone;
  for (auto& [id, child] : daemons_)
    if (child->WaitExit(Deadline::AfterMs(0)).has_value()) gone.push_back(id);
  for (int id : gone) {
    daemons_.erase(id);
    paused_.erase(id);
  }
  return gone;
}

std::vector<int> LocalCluster::Responsive() {
  std::vector<int> ids, reachable;
  for (const auto& [id, child] : daemons_)
    if (!child->WaitExit(Deadline::AfterMs(0)).has_value() && !paused_.contains(id)) {
      ids.push_back(id);
      if (!cut_off_.contains(id)) reachable.push_back(id);
    }
  return reachable.empty() ? ids : reachable;
}

Result<Json> LocalCluster::Call(int id, uint16_t type, const Json& request,
                                Deadline deadline) const {
  return daemon::CallJsonBlocking(Address(id), secret_, type, request, deadline);
}

Result<Json> LocalCluster::ClusterStatus(Deadline deadline) {
  Status last = Unavailable("no daemon runs");
  for (int id : Responsive()) {
    Result<Json> s = Call(id, daemon::kCtlStatus, Json::object(), deadline);
    if (s.ok()) return s;
    last = s.status();
  }
  return last.WithContext("cluster status");
}

}  // namespace rt::chaos
