// ringfsd: one chunk-store node as a network service. It owns the node's chunk engine and chain
// node, answers peers (replica messages, chain versions) and clients (chunk and file operations)
// over base/net RPC, and — on the metadata node — runs the chain manager (heartbeats every node,
// removes failed replicas from their chains, lets returning ones resync) and the file namespace.
// The metadata node is the smallest node id, or with follow_views the eldest store node of the
// latest membership view: the role moves when that node leaves a view (Server::SetMembers).
// Protocol: docs/formats/iofs_wire.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/net/tls_files.h"
#include "base/status.h"
#include "iofs/chunk_engine.h"

namespace rt::net {
class ClusterSecret;
}

namespace rt::iofs {

// One node of a static cluster.
struct NodeEndpoint {
  uint32_t id = 0;
  std::string host;
  uint16_t port = 0;
};

// Configuration of a ringfsd node (node.toml; see LoadServerOptions).
struct ServerOptions {
  uint32_t self = 1;                      // this node's id (one of `nodes`)
  std::string state_dir;                  // engine data, metadata and manager state live here
  std::string listen_host = "127.0.0.1";  // address to bind ("0.0.0.0" for all)
  // The cluster secret file ([auth] secret_file; base/net/auth.h): every client and every peer
  // node must prove it holds the secret, and this node proves it to the peers it calls. ""
  // (default): none, and only a loopback listen_host is accepted (said in a warning at start).
  std::string secret_file;
  // The node's TLS identity ([tls] cert_file, key_file, ca_file; base/net/tls.h): with it every
  // connection this node accepts or opens runs over mutual TLS. Needs secret_file. Empty: none.
  net::TlsFiles tls;
  std::vector<NodeEndpoint> nodes;  // every node, this one included
  int replication = 1;              // replicas per chain, 1-3
  int chains = 8;                   // replication chains (chunks are striped over them)
  uint32_t file_chunk_size = 0;     // bytes per file chunk; 0 = the engine's chunk_size
  ChunkEngineOptions engine;        // engine.dir is set to <state_dir>/engine
  int64_t tick_ms = 100;            // retransmission period of the chain protocol
  int64_t heartbeat_ms = 200;       // manager → node ping period
  int down_after = 10;              // missed pings before a node leaves its chains (2 s)
  // Period of the metadata node's orphan collector (FileSystem::CollectOrphans), which also runs
  // once as the node starts: chunks of writes that can no longer complete are reclaimed within
  // this long of the restart (or of the failed write).
  int64_t collect_ms = 10000;
  int client_threads = 16;  // threads for client requests (may wait on the network)
  int peer_threads = 16;    // threads for replica messages (wait on the disk, never on the network)
  bool shared_memory = true;  // accept shared regions of clients on this host (shm.h)
  // How shared-memory reads of chunks this node holds are served (ringfsd --read-path).
  enum class ReadPath {
    kPoolDirect,  // on a client-pool thread, one pread straight into the client's region
    kIoThread,    // on the I/O thread's own io_uring (no thread hand-off at all)
    kPoolEngine,  // on a client-pool thread through the engine's ring (the path before)
  };
  ReadPath read_path = ReadPath::kPoolDirect;
  // The metadata role follows the membership views given to SetMembers (ringtraind): no node
  // holds it until the first view, then the eldest store node of the newest view does. false
  // (ringfsd): the smallest id of `nodes`, for good.
  bool follow_views = false;
};

// Parses a node list "1@127.0.0.1:7600,2@10.0.0.2:7600". Errors: InvalidArgument naming `what`
// (the key it came from) and the bad entry: not ID@HOST:PORT, an id of 0, a bad port, an id
// given twice, an empty list.
Result<std::vector<NodeEndpoint>> ParseNodeList(const std::string& text, const std::string& what);

// Reads a node.toml. Errors name the file, line and key (base/config.h).
Result<ServerOptions> LoadServerOptions(const std::string& path);
// The embedded default: one local node (id 1) on 127.0.0.1:`port`, replication factor 1, data
// under `state_dir`.
ServerOptions EmbeddedServerOptions(const std::string& state_dir, uint16_t port);

// What a node holds in memory and how its staged values fared (Server::Stats).
struct ServerStats {
  // Chunk values the chain node holds (ChainNode::ValueBytesInMemory).
  uint64_t value_bytes_in_memory = 0;
  // Copies staged for writes sent to remote chain heads, running now.
  uint64_t staged_values = 0;
  // Forwards this node sent again in full: the receiver no longer held the staged copy they
  // named (NotFound).
  uint64_t staged_forwards_resent = 0;
  // Shared-memory reads served on the I/O thread's ring.
  uint64_t reads_on_io_thread = 0;
  // Shared-memory reads served by one pread per chunk.
  uint64_t reads_direct = 0;
  // This node's chunk engine since it opened (EngineCounters): bytes read and written (replicas
  // included) and failed reads, writes and fdatasyncs.
  uint64_t read_bytes = 0;
  uint64_t written_bytes = 0;
  uint64_t read_errors = 0;
  uint64_t write_errors = 0;
  uint64_t sync_errors = 0;
  // This node's disk: committed chunks, their bytes, and the bytes of its data files.
  uint64_t chunks = 0;
  uint64_t data_bytes = 0;
  uint64_t file_bytes = 0;
  // The metadata node's view of the chains (zero elsewhere): chains, and those with fewer
  // serving members than home nodes (a replica down or still syncing) or none at all.
  uint64_t chains = 0;
  uint64_t chains_degraded = 0;
  uint64_t chains_stopped = 0;
  bool metadata_node = false;  // this node is the metadata node (and has taken the role over)
  uint32_t meta_node = 0;      // the node this one sends file operations to (0: none yet)
  uint64_t takeovers = 0;      // times this node took the metadata role over since it started
};

// A running node. Thread-safe.
class Server {
 public:
  // Loads the cluster secret (options.secret_file), opens the engine, binds the port (0 picks
  // one) and starts serving. Errors: those of ClusterSecret::Load (a missing file, one that group
  // or others may access); FailedPrecondition for a listen_host that is not loopback without a
  // secret; the engine's and the bind's.
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  virtual ~Server() = default;
  // The bound port.
  virtual uint16_t port() const = 0;
  // Stops accepting requests, waits for running ones until `deadline`, then closes everything.
  virtual Status Shutdown(Deadline deadline) = 0;
  // A snapshot of the counters above (for tests and stats).
  virtual ServerStats Stats() = 0;
  // The membership the store's chains follow (ringtraind: the node ids of the ring's view
  // `epoch`, its generation, eldest first; a call with a smaller epoch than an earlier one is
  // ignored). Ids that are not store nodes (not in `nodes`) are allowed and count for nothing. On
  // the metadata node a node missing from `members` leaves its chains at once, as if it had missed
  // every heartbeat, and heartbeats do not bring it back until it is in `members` again. Until
  // the first call heartbeats alone decide.
  // With follow_views the metadata node is the first store node of `eldest_first`, so a caller
  // that puts members in the order they joined keeps the role where it is while that node stays
  // (elastic::View::EldestFirst). When that changes
  // the new one takes the role over in the background: it asks every other node in `members`
  // to give up the role (the old one first finishes the file operations it runs) and to send
  // the chain manager state and chain versions it knows, continues from the newest of them with
  // chain versions above any an earlier manager handed out (epoch << 32), and reloads the
  // namespace from the chains. File operations that reach it meanwhile wait for it.
  virtual void SetMembers(const std::vector<uint32_t>& eldest_first, uint64_t epoch) = 0;
};

// The default port of the embedded server.
inline constexpr uint16_t kDefaultPort = 7600;

}  // namespace rt::iofs
