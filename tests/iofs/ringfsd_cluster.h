// A cluster of real ringfsd processes on loopback for the multi-process iofs tests: one
// node.toml per node (3 chains, 256 KiB chunks, short heartbeats), each node started, killed
// (kill -9) and restarted on its own.
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/iofs/process_util.h"

namespace rt::iofs::testing {

class RingfsdCluster {
 public:
  // `collect_ms`: period of the metadata node's orphan collector (timing.collect_ms).
  RingfsdCluster(const std::string& dir, int nodes, int rf, int collect_ms = 10000) : dir_(dir) {
    for (int n = 1; n <= nodes; ++n) ports_.push_back(FreePort());
    std::string list;
    for (int n = 1; n <= nodes; ++n)
      list += (n > 1 ? "," : "") + std::to_string(n) + "@127.0.0.1:" + std::to_string(ports_[n - 1]);
    for (int n = 1; n <= nodes; ++n) {
      std::ofstream out(Config(n));
      out << "[node]\nid = " << n << "\nstate = \"" << dir << "/node" << n << "\"\n"
          << "[cluster]\nnodes = \"" << list << "\"\nreplication = " << rf << "\nchains = 3\n"
          << "[engine]\nchunk_size = 262144\nsmall_chunk_size = 65536\nslots_per_file = 64\n"
          << "capacity_gib = 1\nio_buffers = 8\nqueue_depth = 8\n"
          << "[timing]\ntick_ms = 50\nheartbeat_ms = 100\ndown_after = 10\ncollect_ms = " << collect_ms
          << "\n";
    }
    procs_.resize(nodes);
    for (auto& p : procs_) p = std::make_unique<Process>();
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
    for (size_t n = 1; n <= ports_.size(); ++n) all += "--- node " + std::to_string(n) + "\n" + testing::ReadText(Log(static_cast<int>(n)));
    return all;
  }

 private:
  std::string dir_;
  std::vector<uint16_t> ports_;
  std::vector<std::unique_ptr<Process>> procs_;
};

}  // namespace rt::iofs::testing
