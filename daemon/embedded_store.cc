#include "daemon/embedded_store.h"

#include <algorithm>
#include <cstdint>

namespace rt::daemon {

Result<iofs::ServerOptions> StoreServerOptions(const NodeConfig& config) {
  ASSIGN_OR_RETURN(auto listen, SplitHostPort(config.store_listen, "store.listen"));
  if (config.id > UINT32_MAX)
    return InvalidArgument("node.id " + std::to_string(config.id) +
                           " is above 4294967295, the largest id of a chunk-store node");
  const auto self = static_cast<uint32_t>(config.id);
  iofs::ServerOptions o;
  o.self = self;
  o.state_dir = config.state_dir + "/store";
  o.listen_host = listen.first;
  o.secret_file = config.secret_file;
  o.tls = config.tls;
  if (config.store_nodes.empty()) {
    const std::string host = listen.first == "0.0.0.0" ? "127.0.0.1" : listen.first;
    o.nodes = {iofs::NodeEndpoint{self, host, listen.second}};
  } else {
    ASSIGN_OR_RETURN(o.nodes, iofs::ParseNodeList(config.store_nodes, "store.nodes"));
    const auto me = std::find_if(o.nodes.begin(), o.nodes.end(),
                                 [self](const iofs::NodeEndpoint& n) { return n.id == self; });
    if (me == o.nodes.end())
      return InvalidArgument("store.nodes '" + config.store_nodes + "' does not list this node (" +
                             std::to_string(self) + ")");
    if (me->port != listen.second)
      return InvalidArgument("store.nodes lists node " + std::to_string(self) + " at port " +
                             std::to_string(me->port) + " but store.listen '" +
                             config.store_listen + "' binds port " + std::to_string(listen.second));
    if (listen.second == 0 && o.nodes.size() > 1)
      return InvalidArgument("store.listen '" + config.store_listen +
                             "' needs a fixed port: the other store nodes reach this one there");
  }
  const int nodes = static_cast<int>(o.nodes.size());
  o.replication = config.store_replication == 0 ? std::min(3, nodes) : config.store_replication;
  if (o.replication > nodes)
    return InvalidArgument("store.replication " + std::to_string(o.replication) + " exceeds the " +
                           std::to_string(nodes) + " store node(s)");
  o.chains = config.store_chains;
  o.follow_views = true;  // the metadata role moves with the ring's views (FollowViewInStore)
  o.engine.capacity_bytes = static_cast<uint64_t>(config.store_capacity_gib) << 30;
  return o;
}

Result<std::string> ResolveLocalStore(const std::string& uri, const std::string& store) {
  if (!uri.starts_with(kLocalStorePrefix)) return uri;
  if (store.empty())
    return FailedPrecondition("'" + uri +
                              "' names the embedded chunk store, but this ringtraind has no "
                              "[store] section in its node.toml");
  return "ringfs://" + store + "/" + uri.substr(kLocalStorePrefix.size());
}

}  // namespace rt::daemon
