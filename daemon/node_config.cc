#include "daemon/node_config.h"

#include <charconv>

#include "daemon/embedded_store.h"

namespace rt::daemon {

std::vector<std::string> NodeConfig::SeedList() const { return SplitCommaList(seeds); }

std::vector<std::string> SplitCommaList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item(text.substr(start, comma - start));
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    start = comma + 1;
  }
  return out;
}

std::string NodeConfig::AdvertisedAddress() const { return advertise.empty() ? listen : advertise; }

void BindNodeKeys(NodeConfig* c, ConfigSchema* s) {
  s->Int("node.id", &c->id, 1, INT64_MAX, "this node's id, unique in the cluster (required)");
  s->Require("node.id");
  s->String("node.listen", &c->listen, "control + membership RPC host:port");
  s->String("node.advertise", &c->advertise, "host:port peers reach this node at; \"\" = listen");
  s->String("node.state_dir", &c->state_dir, "membership state and worker logs (required)");
  s->Require("node.state_dir");
  s->Int("node.slots", &c->slots, 0, 1024,
         "worker processes this node may run; 0 = a witness (votes, holds snapshots, runs none)");
  s->String("node.rendezvous_host", &c->rendezvous_host,
            "address this node's rendezvous store binds and is reached at");
  s->String("cluster.seeds", &c->seeds, "host:port,host:port of peers to join through");
  s->String("cluster.etcd", &c->etcd,
            "http://host:port of etcd: membership kept there; \"\" = the ring's own");
  s->String("cluster.etcd_prefix", &c->etcd_prefix, "prefix of this cluster's keys in etcd");
  s->Int("cluster.etcd_lease_s", &c->etcd_lease_s, 1, 3600,
         "TTL of each node's etcd lease: a node silent this long leaves the view, s");
  s->String("auth.secret_file", &c->secret_file, "cluster secret file; \"\" = none");
  s->String("tls.cert_file", &c->tls.cert_file,
            "this node's TLS certificate (PEM; ringctl init-tls); \"\" = no TLS");
  s->String("tls.key_file", &c->tls.key_file, "its private key (PEM, mode 0600)");
  s->String("tls.ca_file", &c->tls.ca_file, "the cluster CA's certificate (PEM)");
  s->String("http.listen", &c->http_listen,
            "host:port for /metrics and the status page; \"\" = off, port 0 = any free port");
  s->String("store.listen", &c->store_listen,
            "host:port of this node's embedded chunk server; \"\" = no chunk store");
  s->String("store.nodes", &c->store_nodes,
            "every store node as ID@HOST:PORT,...; \"\" = this node alone");
  s->Int("store.replication", &c->store_replication, 0, 3,
         "replicas per chain; 0 = min(3, store nodes)");
  s->Int("store.chains", &c->store_chains, 1, 4096, "replication chains");
  s->Int("store.capacity_gib", &c->store_capacity_gib, 1, 1 << 20,
         "most GiB of this node's chunk data files");
  s->Int("worker.stop_grace_ms", &c->stop_grace_ms, 0, 600'000,
         "SIGTERM to SIGKILL grace when workers are stopped, ms");
  s->String("worker.env", &c->worker_env, "extra NAME=value,... for the workers");
  s->Int("worker.nice", &c->worker_nice, 0, 19,
         "niceness added to the workers: the daemon's own work preempts theirs");
  s->Int("worker.hang_ms", &c->worker_hang_ms, 0, 3'600'000,
         "kill a worker that sent no heartbeat for this long (stopped, frozen), ms; 0 = never");
  s->Int("worker.watch_hold_ms", &c->worker_watch_hold_ms, 100, 3'600'000,
         "how long a worker's watch call is held before it is answered 'keep waiting', ms");
}

Result<std::pair<std::string, uint16_t>> SplitHostPort(std::string_view text,
                                                       std::string_view what) {
  const size_t colon = text.rfind(':');
  const std::string quoted = std::string(what) + " '" + std::string(text) + "'";
  if (colon == std::string_view::npos || colon == 0)
    return InvalidArgument(quoted + " is not host:port");
  const std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  const auto [end, err] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (err != std::errc() || end != port_text.data() + port_text.size() || port > 65535)
    return InvalidArgument(quoted + " has a bad port");
  return std::make_pair(std::string(text.substr(0, colon)), static_cast<uint16_t>(port));
}

namespace {

Result<NodeConfig> ReadNodeConfig(const ConfigFile& file) {
  const std::string& source = file.source();
  NodeConfig config;
  ConfigSchema schema;
  BindNodeKeys(&config, &schema);
  RETURN_IF_ERROR(schema.Read(file));
  RETURN_IF_ERROR(SplitHostPort(config.listen, source + ": node.listen").status());
  if (!config.advertise.empty())
    RETURN_IF_ERROR(SplitHostPort(config.advertise, source + ": node.advertise").status());
  for (const std::string& seed : config.SeedList())
    RETURN_IF_ERROR(SplitHostPort(seed, source + ": cluster.seeds entry").status());
  if (!config.etcd.empty()) {
    if (config.etcd.rfind("http://", 0) != 0)
      return InvalidArgument(source + ": cluster.etcd '" + config.etcd +
                             "' is not an http://host:port URL");
    RETURN_IF_ERROR(SplitHostPort(config.etcd.substr(7), source + ": cluster.etcd").status());
    if (config.etcd_prefix.empty() || config.etcd_prefix.back() == '/')
      return InvalidArgument(source + ": cluster.etcd_prefix '" + config.etcd_prefix +
                             "' must be non-empty and not end in '/'");
  }
  if (!config.http_listen.empty())
    RETURN_IF_ERROR(SplitHostPort(config.http_listen, source + ": http.listen").status());
  if (!config.store_listen.empty())
    RETURN_IF_ERROR(StoreServerOptions(config).status().WithContext(source));
  return config;
}

}  // namespace

Result<NodeConfig> ParseNodeConfig(std::string_view text, const std::string& source) {
  ASSIGN_OR_RETURN(ConfigFile file, ConfigFile::Parse(text, source));
  return ReadNodeConfig(file);
}

Result<NodeConfig> LoadNodeConfig(const std::string& path) {
  ASSIGN_OR_RETURN(ConfigFile file, ConfigFile::Load(path));
  return ReadNodeConfig(file);
}

}  // namespace rt::daemon
