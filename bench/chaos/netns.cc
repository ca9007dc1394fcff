#include "bench/chaos/netns.h"

#include <sys/mount.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "base/deadline.h"
#include "base/log.h"
#include "base/subprocess.h"

namespace rt::chaos {
namespace {

constexpr int64_t kIpDeadlineMs = 15'000;

// The `ip` binary ("" when none is found).
const std::string& IpPath() {
  static const std::string path = [] {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
      if (::access(p, X_OK) == 0) return std::string(p);
    return std::string();
  }();
  return path;
}

// Runs `ip ARGS` under a deadline: its output, or Internal naming the command and how it
// ended.
Result<std::string> Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {IpPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string command = "ip";
  for (const std::string& a : args) command += " " + a;
  if (IpPath().empty()) return FailedPrecondition("`" + command + "`: no `ip` binary found");
  Result<ProcessOutcome> run =
      RunProcess(argv, EnvironmentWithout({}), Deadline::AfterMs(kIpDeadlineMs));
  if (!run.ok()) return run.status().WithContext("`" + command + "`");
  if (!run->exited || run->exit_code != 0)
    return Internal("`" + command + "` failed (" + run->Describe() + "): " + run->output);
  return run->output;
}

// True while process `pid` exists.
bool PidRuns(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

// Kills every process in namespace `ns` and deletes it. Failures are logged.
void DeleteNamespace(const std::string& ns) {
  if (Result<std::string> pids = Ip({"netns", "pids", ns}); pids.ok()) {
    std::istringstream in(*pids);
    long pid = 0;
    while (in >> pid)
      if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
  if (Result<std::string> del = Ip({"netns", "del", ns}); !del.ok())
    LOG_WARN("chaos: {}", del.status().ToString());
}

std::string BridgeName(const std::string& tag) { return "rtcb" + tag; }

}  // namespace

std::string NetnsUnavailable() {
  if (::geteuid() != 0) return "network namespaces need root (ip netns add)";
  if (IpPath().empty()) return "no `ip` binary (iproute2) found";
  const std::string probe = "rtc-" + std::to_string(::getpid()) + "-probe";
  Result<std::string> add = Ip({"netns", "add", probe});
  if (!add.ok()) return "network namespaces do not work here: " + add.status().ToString();
  DeleteNamespace(probe);
  return "";
}

void RemoveLeftoverNetworks() {
  if (IpPath().empty()) return;
  static const std::regex ns_name(R"(^rtc-(\d+)-\S+)");
  if (Result<std::string> list = Ip({"netns", "list"}); list.ok()) {
    std::istringstream in(*list);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, ns_name) && !PidRuns(std::stol(m[1]))) {
        const std::string ns = line.substr(0, line.find(' '));
        LOG_WARN("chaos: removing namespace {} left by a killed campaign", ns);
        DeleteNamespace(ns);
      }
    }
  }
  static const std::regex bridge_name(R"(^\d+: (rtcb(\d+))[:@])");
  if (Result<std::string> list = Ip({"-o", "link", "show", "type", "bridge"}); list.ok()) {
    std::istringstream in(*list);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, bridge_name) && !PidRuns(std::stol(m[2]))) {
        LOG_WARN("chaos: removing bridge {} left by a killed campaign", m[1].str());
        if (Result<std::string> del = Ip({"link", "del", m[1].str()}); !del.ok())
          LOG_WARN("chaos: {}", del.status().ToString());
      }
    }
  }
  static const std::regex mount_point(R"(^tmpfs (\S*/ringchaos-(\d+)/ckpt) )");
  std::ifstream mounts("/proc/mounts");
  for (std::string line; std::getline(mounts, line);) {
    std::smatch m;
    if (std::regex_search(line, m, mount_point) && !PidRuns(std::stol(m[2]))) {
      LOG_WARN("chaos: unmounting {} left by a killed campaign", m[1].str());
      if (::umount2(m[1].str().c_str(), MNT_DETACH) != 0)
        LOG_WARN("chaos: umount {}: {}", m[1].str(), std::strerror(errno));
    }
  }
}

Result<std::unique_ptr<NodeNetwork>> NodeNetwork::Create(int nodes) {
  if (nodes < 1 || nodes > 200) return InvalidArgument("a node network needs 1..200 nodes");
  if (const std::string why = NetnsUnavailable(); !why.empty()) return FailedPrecondition(why);
  // A /24 that no interface here uses yet, starting at one drawn from the pid.
  ASSIGN_OR_RETURN(const std::string addresses, Ip({"-o", "-4", "addr", "show"}));
  int subnet = -1;
  for (int i = 0; i < 200 && subnet < 0; ++i) {
    const int x = 20 + (static_cast<int>(::getpid()) + i) % 200;
    if (addresses.find(" 10.77." + std::to_string(x) + ".") == std::string::npos) subnet = x;
  }
  if (subnet < 0) return FailedPrecondition("no free 10.77.X.0/24 for the node network");
  std::unique_ptr<NodeNetwork> net(new NodeNetwork(nodes, subnet));
  net->tag_ = std::to_string(::getpid());
  if (Status s = net->Build(); !s.ok()) {
    net->Remove();
    return s.WithContext("build the node network");
  }
  return net;
}

Status NodeNetwork::Build() {
  const std::string bridge = BridgeName(tag_);
  const std::string prefix = "10.77." + std::to_string(subnet_) + ".";
  RETURN_IF_ERROR(Ip({"link", "add", bridge, "type", "bridge"}).status());
  RETURN_IF_ERROR(Ip({"addr", "add", prefix + "254/24", "dev", bridge}).status());
  RETURN_IF_ERROR(Ip({"link", "set", bridge, "up"}).status());
  for (int id = 1; id <= nodes_; ++id) {
    const std::string ns = Namespace(id);
    const std::string host_end = "rtc" + tag_ + "h" + std::to_string(id);
    const std::string node_end = "rtc" + tag_ + "n" + std::to_string(id);
    RETURN_IF_ERROR(Ip({"netns", "add", ns}).status());
    RETURN_IF_ERROR(
        Ip({"link", "add", host_end, "type", "veth", "peer", "name", node_end}).status());
    RETURN_IF_ERROR(Ip({"link", "set", node_end, "netns", ns}).status());
    RETURN_IF_ERROR(Ip({"link", "set", host_end, "master", bridge}).status());
    RETURN_IF_ERROR(Ip({"link", "set", host_end, "up"}).status());
    RETURN_IF_ERROR(Ip({"-n", ns, "addr", "add", Address(id) + "/24", "dev", node_end}).status());
    RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", node_end, "up"}).status());
    RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "lo", "up"}).status());
    // The local table after the partition rules (pref 500), so that they see incoming packets.
    RETURN_IF_ERROR(Ip({"-n", ns, "rule", "add", "pref", "1000", "lookup", "local"}).status());
    RETURN_IF_ERROR(Ip({"-n", ns, "rule", "del", "pref", "0"}).status());
  }
  LOG_INFO("chaos: node network {}0/24 on bridge {}, namespaces {}..{}", prefix, bridge,
           Namespace(1), Namespace(nodes_));
  return Status();
}

NodeNetwork::~NodeNetwork() { Remove(); }

void NodeNetwork::Remove() {
  std::lock_guard lock(remove_mu_);
  if (removed_) return;
  removed_ = true;
  for (int id = 1; id <= nodes_; ++id) DeleteNamespace(Namespace(id));
  if (Result<std::string> del = Ip({"link", "del", BridgeName(tag_)}); !del.ok())
    LOG_WARN("chaos: {}", del.status().ToString());
}

std::string NodeNetwork::Namespace(int id) const {
  return "rtc-" + tag_ + "-" + std::to_string(id);
}

std::string NodeNetwork::Address(int id) const {
  return "10.77." + std::to_string(subnet_) + "." + std::to_string(id);
}

std::vector<std::string> NodeNetwork::ExecPrefix(int id) const {
  return {IpPath(), "netns", "exec", Namespace(id)};
}

Status NodeNetwork::Split(const std::vector<int>& a, const std::vector<int>& b) {
  for (int x : a)
    for (int y : b)
      for (auto [from, to] : {std::pair{x, y}, std::pair{y, x}}) {
        RETURN_IF_ERROR(Ip({"-n", Namespace(from), "rule", "add", "pref", "500", "from",
                            Address(to) + "/32", "blackhole"})
                            .status());
        cut_.emplace_back(from, to);
      }
  return Status();
}

Status NodeNetwork::Heal() {
  Status first;
  for (auto [from, to] : cut_) {
    Status s = Ip({"-n", Namespace(from), "rule", "del", "pref", "500", "from", Address(to) + "/32",
                   "blackhole"})
                   .status();
    if (first.ok() && !s.ok()) first = s;
  }
  cut_.clear();
  return first;
}

}  // namespace rt::chaos
