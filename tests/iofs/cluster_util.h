// An in-process cluster for tests: N chain nodes, each with its own real chunk engine in its own
// folder, connected by an in-memory transport pumped by one thread, and a chain manager. Nodes
// can be killed (their engine closed, in-flight messages to them lost) and restarted from disk.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "iofs/chain/chain_manager.h"
#include "iofs/chain_node.h"
#include "iofs/chain_store.h"
#include "tests/iofs/test_util.h"

namespace rt::iofs::testing {

inline ChunkEngineOptions ClusterEngineOptions(const std::string& dir) {
  ChunkEngineOptions o;
  o.dir = dir;
  o.chunk_size = 256 << 10;
  o.small_chunk_size = 64 << 10;
  o.slots_per_file = 32;
  o.capacity_bytes = 512 << 20;
  o.io_buffers = 8;
  return o;
}

class Cluster : public ChainTransport, public ChainRouter {
 public:
  Cluster(const std::string& root, int nodes, int rf, int chains) : root_(root), chains_(chains) {
    std::vector<chain::NodeId> ids;
    for (int n = 1; n <= nodes; ++n) ids.push_back(static_cast<chain::NodeId>(n));
    auto layout = chain::BuildChains(ids, rf, chains);
    RT_CHECK(layout.ok());
    layout_ = *layout;
    manager_ = std::make_unique<chain::ChainManager>(layout_);
    for (chain::NodeId n : ids) {
      ids_.push_back(n);
      RT_CHECK(Start(n).ok());
    }
    for (const auto& c : layout_) DeliverConfig(c);
    pump_ = std::thread([this] { Pump(); });
  }

  ~Cluster() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    pump_.join();
  }

  // ChainTransport:
  void Send(const chain::Message& message) override {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(message);
    }
    cv_.notify_one();
  }
  void ReportSyncComplete(chain::NodeId node, chain::ChainId chain, uint64_t version) override {
    std::lock_guard lock(mu_);
    syncs_.push_back({node, chain, version});
    cv_.notify_one();
  }

  // ChainRouter:
  chain::NodeId self() const override { return self_; }
  std::vector<chain::NodeId> nodes() const override { return ids_; }
  size_t chain_count() const override { return chains_; }
  chain::ChainConfig Config(chain::ChainId c) override {
    std::lock_guard lock(manager_mu_);
    return manager_->config(c);
  }
  Result<uint64_t> WriteAt(chain::NodeId n, chain::ChunkKey key,
                           std::optional<std::span<const std::byte>> data, uint64_t chain_version,
                           Deadline deadline) override {
    std::shared_ptr<Node> node = Get(n);
    if (!node)
      return Status(StatusCode::kUnavailable, "node " + std::to_string(n) + " is down", true);
    ChainWriteOrigin origin;
    origin.chain_version = chain_version;
    return node->chain->Write(key, data, deadline, origin);
  }
  Status ReadAt(chain::NodeId n, chain::ChunkKey key, uint64_t offset, uint64_t length,
                std::vector<std::byte>* out, Deadline) override {
    std::shared_ptr<Node> node = Get(n);
    if (!node)
      return Status(StatusCode::kUnavailable, "node " + std::to_string(n) + " is down", true);
    return node->chain->Read(key, offset, length, out, nullptr);
  }
  Result<std::vector<chain::ChunkKey>> KeysAt(chain::NodeId n, Deadline) override {
    std::shared_ptr<Node> node = Get(n);
    if (!node)
      return Status(StatusCode::kUnavailable, "node " + std::to_string(n) + " is down", true);
    return node->chain->Keys();
  }
  Result<std::vector<std::string>> CheckAt(chain::NodeId n, Deadline) override {
    std::shared_ptr<Node> node = Get(n);
    if (!node)
      return Status(StatusCode::kUnavailable, "node " + std::to_string(n) + " is down", true);
    return node->engine->Check();
  }

  void set_self(chain::NodeId n) { self_ = n; }
  std::string DirOf(chain::NodeId n) const { return root_ + "/node" + std::to_string(n); }

  // Kills a node: its state on disk stays, everything in memory is lost.
  void Kill(chain::NodeId n) {
    {
      std::lock_guard lock(nodes_mu_);
      nodes_.erase(n);
    }
    std::vector<chain::ChainConfig> changed;
    {
      std::lock_guard lock(manager_mu_);
      changed = manager_->OnNodeDown(n);
    }
    for (const auto& c : changed) DeliverConfig(c);
  }

  // Restarts a killed node from its folder.
  Status Restart(chain::NodeId n) {
    RETURN_IF_ERROR(Start(n));
    std::vector<chain::ChainConfig> changed;
    {
      std::lock_guard lock(manager_mu_);
      changed = manager_->OnNodeUp(n);
    }
    for (const auto& c : changed) DeliverConfig(c);
    return Status();
  }

  // Waits until every chain has every home member serving, and every live home member holds
  // the manager's current config (the pump delivers a config after the manager decided it).
  bool WaitHealthy(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (HealthyAndDelivered()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  ChunkEngine* engine(chain::NodeId n) { return Get(n)->engine.get(); }
  ChainNode* node(chain::NodeId n) { return Get(n)->chain.get(); }

 private:
  struct Node {
    std::unique_ptr<ChunkEngine> engine;
    std::unique_ptr<ChainNode> chain;
  };
  struct SyncReport {
    chain::NodeId node;
    chain::ChainId chain;
    uint64_t version;
  };

  Status Start(chain::NodeId n) {
    auto node = std::make_shared<Node>();
    ASSIGN_OR_RETURN(node->engine, ChunkEngine::Open(ClusterEngineOptions(DirOf(n))));
    std::vector<chain::ChainId> home;
    for (const auto& c : layout_)
      for (const auto& m : c.members)
        if (m.node == n) home.push_back(c.chain);
    ASSIGN_OR_RETURN(node->chain, ChainNode::Open(n, chains_, home, node->engine.get(), this));
    std::lock_guard lock(nodes_mu_);
    nodes_[n] = node;
    return Status();
  }

  // Whether the manager has every chain healthy and every live home member holds its config.
  bool HealthyAndDelivered() {
    std::vector<chain::ChainConfig> current;
    {
      std::lock_guard lock(manager_mu_);
      if (!manager_->AllHealthy()) return false;
      for (const auto& c : layout_) current.push_back(manager_->config(c.chain));
    }
    for (const auto& c : current)
      for (const auto& home : layout_[c.chain].members)
        if (auto node = Get(home.node)) {
          const std::optional<chain::ChainConfig> held = node->chain->Config(c.chain);
          if (!held || held->version != c.version) return false;
        }
    return true;
  }

  std::shared_ptr<Node> Get(chain::NodeId n) {
    std::lock_guard lock(nodes_mu_);
    auto it = nodes_.find(n);
    return it == nodes_.end() ? nullptr : it->second;
  }

  void DeliverConfig(const chain::ChainConfig& c) {
    for (const auto& home : layout_[c.chain].members)
      if (auto node = Get(home.node)) node->chain->OnConfig(c);
  }

  void Pump() {
    auto next_tick = std::chrono::steady_clock::now();
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_until(lock, next_tick, [&] { return stop_ || !queue_.empty() || !syncs_.empty(); });
      std::deque<chain::Message> messages;
      messages.swap(queue_);
      std::deque<SyncReport> syncs;
      syncs.swap(syncs_);
      lock.unlock();
      for (const auto& m : messages)
        if (auto node = Get(m.to)) node->chain->OnMessage(m);
      for (const auto& s : syncs) {
        std::vector<chain::ChainConfig> changed;
        {
          std::lock_guard g(manager_mu_);
          changed = manager_->OnSyncComplete(s.node, s.chain, s.version);
        }
        for (const auto& c : changed) DeliverConfig(c);
      }
      if (std::chrono::steady_clock::now() >= next_tick) {
        for (chain::NodeId n : ids_)
          if (auto node = Get(n)) node->chain->Tick();
        next_tick = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      }
      lock.lock();
    }
  }

  const std::string root_;
  const size_t chains_;
  std::vector<chain::ChainConfig> layout_;
  std::vector<chain::NodeId> ids_;
  chain::NodeId self_ = 0;

  std::mutex manager_mu_;
  std::unique_ptr<chain::ChainManager> manager_;

  std::mutex nodes_mu_;
  std::map<chain::NodeId, std::shared_ptr<Node>> nodes_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<chain::Message> queue_;
  std::deque<SyncReport> syncs_;
  bool stop_ = false;
  std::thread pump_;
};

}  // namespace rt::iofs::testing
