#include <charconv>

#include "base/config.h"
#include "iofs/server.h"

namespace rt::iofs {

Result<std::vector<NodeEndpoint>> ParseNodeList(const std::string& text, const std::string& what) {
  std::vector<NodeEndpoint> nodes;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t at = item.find('@');
    const size_t colon = item.rfind(':');
    if (at == std::string_view::npos || colon == std::string_view::npos || colon < at)
      return InvalidArgument(what + " entry '" + std::string(item) + "' is not ID@HOST:PORT");
    NodeEndpoint n;
    uint32_t port = 0;
    auto r1 = std::from_chars(item.data(), item.data() + at, n.id);
    auto r2 = std::from_chars(item.data() + colon + 1, item.data() + item.size(), port);
    if (r1.ec != std::errc() || r1.ptr != item.data() + at || r2.ec != std::errc() ||
        r2.ptr != item.data() + item.size() || port > 65535 || n.id == 0)
      return InvalidArgument(what + " entry '" + std::string(item) + "': bad id or port");
    n.host = std::string(item.substr(at + 1, colon - at - 1));
    n.port = static_cast<uint16_t>(port);
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return InvalidArgument(what + " is empty");
  for (size_t i = 0; i < nodes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (nodes[i].id == nodes[j].id)
        return InvalidArgument(what + " names node " + std::to_string(nodes[i].id) + " twice");
  return nodes;
}

Result<ServerOptions> LoadServerOptions(const std::string& path) {
  ASSIGN_OR_RETURN(ConfigFile file, ConfigFile::Load(path));
  ServerOptions o;
  int64_t self = 1, chunk_size = o.engine.chunk_size, small = o.engine.small_chunk_size,
          slots = o.engine.slots_per_file, capacity_gib = 64, file_chunk = 0;
  std::string nodes;
  ConfigSchema schema;
  schema.Int("node.id", &self, 1, UINT32_MAX, "this node's id, one of cluster.nodes");
  schema.String("node.state", &o.state_dir, "folder for chunk data, metadata and manager state");
  schema.String("node.listen", &o.listen_host, "address to bind");
  schema.String("auth.secret_file", &o.secret_file,
                "cluster secret file (ringctl init-secret); \"\" = none (loopback only)");
  schema.String("tls.cert_file", &o.tls.cert_file,
                "this node's TLS certificate (PEM; ringctl init-tls); \"\" = no TLS");
  schema.String("tls.key_file", &o.tls.key_file, "its private key (PEM, mode 0600)");
  schema.String("tls.ca_file", &o.tls.ca_file, "the cluster CA's certificate (PEM)");
  schema.String("cluster.nodes", &nodes, "every node as ID@HOST:PORT, comma-separated");
  schema.Int("cluster.replication", &o.replication, 1, 3, "replicas per chain");
  schema.Int("cluster.chains", &o.chains, 1, 4096, "replication chains");
  schema.Int("cluster.file_chunk_size", &file_chunk, 0, 1 << 30,
             "bytes per file chunk (0 = engine.chunk_size)");
  schema.Int("engine.chunk_size", &chunk_size, 65536, 64 << 20, "bytes per large chunk slot");
  schema.Int("engine.small_chunk_size", &small, 65536, 64 << 20,
             "bytes per small chunk slot (tails)");
  schema.Int("engine.slots_per_file", &slots, 1, 1 << 20, "chunk slots per preallocated data file");
  schema.Int("engine.capacity_gib", &capacity_gib, 1, 1 << 20, "most GiB of data files");
  schema.Int("engine.queue_depth", &o.engine.queue_depth, 1, 4096, "io_uring queue depth");
  schema.Int("engine.io_buffers", &o.engine.io_buffers, 1, 1024, "registered I/O buffers");
  schema.Int("timing.tick_ms", &o.tick_ms, 1, 60000, "chain retransmission period");
  schema.Int("timing.heartbeat_ms", &o.heartbeat_ms, 10, 60000, "heartbeat period");
  schema.Int("timing.down_after", &o.down_after, 1, 1000, "missed heartbeats before a node leaves");
  schema.Int("timing.collect_ms", &o.collect_ms, 10, 86400000,
             "period of the orphan collector of the metadata node");
  schema.Require("node.state");
  schema.Require("cluster.nodes");
  RETURN_IF_ERROR(schema.Read(file));
  ASSIGN_OR_RETURN(o.nodes, ParseNodeList(nodes, "cluster.nodes"));
  o.self = static_cast<uint32_t>(self);
  o.engine.chunk_size = static_cast<uint32_t>(chunk_size);
  o.engine.small_chunk_size = static_cast<uint32_t>(small);
  o.engine.slots_per_file = static_cast<uint32_t>(slots);
  o.engine.capacity_bytes = static_cast<uint64_t>(capacity_gib) << 30;
  o.file_chunk_size = static_cast<uint32_t>(file_chunk);
  return o;
}

ServerOptions EmbeddedServerOptions(const std::string& state_dir, uint16_t port) {
  ServerOptions o;
  o.self = 1;
  o.state_dir = state_dir;
  o.nodes = {NodeEndpoint{1, "127.0.0.1", port}};
  o.replication = 1;
  return o;
}

}  // namespace rt::iofs
