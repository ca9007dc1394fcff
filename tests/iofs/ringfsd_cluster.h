// A cluster of real ringfsd processes on loopback for the multi-process iofs tests: one
// node.toml per node (3 chains, 256 KiB chunks, short heartbeats), each node started, killed
// (kill -9) and restarted on its own.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/bytes.h"
#include "base/net/auth.h"
#include "iofs/net/wire.h"
#include "tests/iofs/io_util.h"
#include "tests/iofs/process_util.h"

namespace rt::iofs::testing {

class RingfsdCluster {
 public:
  // `collect_ms`: period of the metadata node's orphan collector (timing.collect_ms).
  RingfsdCluster(const std::string& dir, int nodes, int rf, int collect_ms = 10000) : dir_(dir) {
    for (int n = 1; n <= nodes; ++n) ports_.push_back(FreePort());
    std::string list;
    for (int n = 1; n <= nodes; ++n)
      list +=
          (n > 1 ? "," : "") + std::to_string(n) + "@127.0.0.1:" + std::to_string(ports_[n - 1]);
    for (int n = 1; n <= nodes; ++n) {
      std::ofstream out(Config(n));
      out << "[node]\nid = " << n << "\nstate = \"" << dir << "/node" << n << "\"\n"
          << "[cluster]\nnodes = \"" << list << "\"\nreplication = " << rf << "\nchains = 3\n"
          << "[engine]\nchunk_size = 262144\nsmall_chunk_size = 65536\nslots_per_file = 64\n"
          << "capacity_gib = 1\nio_buffers = 8\nqueue_depth = 8\n"
          << "[timing]\ntick_ms = 50\nheartbeat_ms = 100\ndown_after = 10\ncollect_ms = "
          << collect_ms << "\n";
    }
    procs_.resize(nodes);
    for (auto& p : procs_) p = std::make_unique<Process>();
  }
  // Gives node `n` the cluster secret file `path` ([auth] secret_file). Call before Start(n).
  void UseSecret(int n, const std::string& path) {
    std::ofstream(Config(n), std::ios::app) << "[auth]\nsecret_file = \"" << path << "\"\n";
  }
  // Gives node `n` the TLS identity NAME in `dir` (files of `ringctl init-tls`; [tls]). Call
  // before Start(n).
  void UseTls(int n, const std::string& dir, const std::string& name) {
    std::ofstream(Config(n), std::ios::app)
        << "[tls]\ncert_file = \"" << dir << "/" << name << ".pem\"\nkey_file = \"" << dir << "/"
        << name << ".key\"\nca_file = \"" << dir << "/ca.pem\"\n";
  }
  std::string Config(int n) const { return dir_ + "/node" + std::to_string(n) + ".toml"; }
  std::string Log(int n) const { return dir_ + "/node" + std::to_string(n) + ".log"; }
  bool Start(int n, const std::string& faults = "") {
    std::vector<std::string> env;
    if (!faults.empty()) env.push_back("RINGTRAIN_FAULTS=" + faults);
    return procs_[n - 1]->Start({RINGFSD, "--config", Config(n)}, env, Log(n));
  }
  Process& proc(int n) { return *procs_[n - 1]; }
  uint16_t port(int n) const { return ports_[n - 1]; }
  std::string Logs() const {
    std::string all;
    for (size_t n = 1; n <= ports_.size(); ++n)
      all += "--- node " + std::to_string(n) + "\n" + testing::ReadText(Log(static_cast<int>(n)));
    return all;
  }

 private:
  std::string dir_;
  std::vector<uint16_t> ports_;
  std::vector<std::unique_ptr<Process>> procs_;
};

// The keys the node on 127.0.0.1:`port` serves, with their data (asked with `secret`), or an
// error while it is not serving them all.
inline Result<std::map<uint64_t, std::vector<std::byte>>> NodeContents(
    Io& io, uint16_t port, std::shared_ptr<const net::ClusterSecret> secret = nullptr) {
  ASSIGN_OR_RETURN(auto keys_payload, RawCall(io, port, wire::kChunkKeys, {}, secret));
  ByteReader r(keys_payload, "keys");
  ASSIGN_OR_RETURN(uint64_t n, r.Get<uint64_t>());
  std::map<uint64_t, std::vector<std::byte>> out;
  for (uint64_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(uint64_t key, r.Get<uint64_t>());
    ByteWriter w;
    w.Put<uint64_t>(key);
    w.Put<uint64_t>(0);
    w.Put<uint64_t>(UINT64_MAX);
    ASSIGN_OR_RETURN(out[key], RawCall(io, port, wire::kChunkRead, w.Take(), secret));
  }
  return out;
}

// Waits up to `timeout_s` until node `n` serves exactly what node 1 serves, and that is not
// nothing (its replication or resync finished).
inline bool WaitConverged(Io& io, RingfsdCluster& cluster, int n, int timeout_s,
                          std::shared_ptr<const net::ClusterSecret> secret = nullptr) {
  const Deadline deadline = Deadline::After(std::chrono::seconds(timeout_s));
  while (!deadline.Expired()) {
    auto reference = NodeContents(io, cluster.port(1), secret);
    auto mine = NodeContents(io, cluster.port(n), secret);
    if (reference.ok() && mine.ok() && !reference->empty() && *reference == *mine) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace rt::iofs::testing
