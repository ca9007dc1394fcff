// The daemon's embedded chunk store (node.toml [store]; docs/daemon.md "The embedded chunk
// store"): started with the daemon, told every view so its chains follow the membership,
// resolving a job's ringfs:/// URIs, and feeding the chunk-store metrics.
#include <vector>

#include "base/log.h"
#include "daemon/embedded_store.h"
#include "daemon/node.h"

namespace rt::daemon {

Status Node::StartStore() {
  if (config_.store_listen.empty()) return Status();
  ASSIGN_OR_RETURN(iofs::ServerOptions options, StoreServerOptions(config_));
  std::string host;
  for (const iofs::NodeEndpoint& n : options.nodes)
    if (n.id == options.self) host = n.host;
  const int replication = options.replication;
  const size_t nodes = options.nodes.size();
  ASSIGN_OR_RETURN(store_, iofs::Server::Start(std::move(options)));
  store_address_ = host + ":" + std::to_string(store_->port());
  LOG_INFO("ringtraind node {}: chunk store on {} ({} store node(s), replication {})", config_.id,
           store_address_, nodes, replication);
  return Status();
}

void Node::FollowViewInStore(const elastic::View& view) {
  if (!store_ || view.generation == store_view_) return;
  store_view_ = view.generation;
  std::vector<uint32_t> eldest_first;
  for (elastic::NodeId id : view.EldestFirst()) eldest_first.push_back(static_cast<uint32_t>(id));
  store_->SetMembers(eldest_first, view.generation);
}

Result<std::string> Node::ResolveStoreUri(const std::string& uri) const {
  return ResolveLocalStore(uri, store_address_);
}

void Node::ObserveStore() {
  if (!store_) return;
  const iofs::ServerStats now = store_->Stats();
  iofs::ServerStats& was = store_seen_;
  // The engine's counters only grow while it is open; the metrics add what is new.
  auto add = [](MetricFamily<Counter>* family, std::vector<std::string> labels, uint64_t now_value,
                uint64_t was_value) {
    if (now_value > was_value)
      family->With(labels).Increment(static_cast<double>(now_value - was_value));
  };
  add(metrics_.chunkstore_read_bytes, {}, now.read_bytes, was.read_bytes);
  add(metrics_.chunkstore_written_bytes, {}, now.written_bytes, was.written_bytes);
  add(metrics_.chunkstore_errors, {"read"}, now.read_errors, was.read_errors);
  add(metrics_.chunkstore_errors, {"write"}, now.write_errors, was.write_errors);
  add(metrics_.chunkstore_errors, {"sync"}, now.sync_errors, was.sync_errors);
  metrics_.chunkstore_used_bytes->Get().Set(static_cast<double>(now.data_bytes));
  metrics_.chunkstore_chains_degraded->Get().Set(static_cast<double>(now.chains_degraded));
  was = now;
}

}  // namespace rt::daemon
