// The embedded chunk store of ringtraind (node.toml [store]; docs/daemon.md "The embedded chunk
// store"): the same server as ringfsd, run inside the daemon; the daemons' stores form one iofs
// cluster whose chains follow the ring's views, and a job names it as ckpt.dir = "ringfs:///PATH".
#pragma once

#include <string>

#include "base/status.h"
#include "daemon/node_config.h"
#include "iofs/server.h"

namespace rt::daemon {

// The URI prefix that names the embedded chunk store of the daemon that runs a process:
// "ringfs:///PATH" (no host).
inline constexpr std::string_view kLocalStorePrefix = "ringfs:///";

// The chunk server options of `config`'s [store] section: node `config.id` of the store nodes
// (store.nodes, or this node alone), bound to store.listen, data under STATE_DIR/store, the
// cluster secret of [auth]. Errors: InvalidArgument naming the key: a malformed listen or node
// list, a listen port of 0 in a cluster of several store nodes, this node missing from the list
// or listed at another port, a node id above 2^32-1, a replication above the node count.
Result<iofs::ServerOptions> StoreServerOptions(const NodeConfig& config);

// `uri` with "ringfs:///PATH" turned into "ringfs://STORE/PATH", where STORE is the "host:port"
// of the embedded chunk server of the daemon (`store`, "" when it has none); any other URI is
// returned as it is. Errors: FailedPrecondition for ringfs:///PATH on a daemon without [store].
Result<std::string> ResolveLocalStore(const std::string& uri, const std::string& store);

}  // namespace rt::daemon
