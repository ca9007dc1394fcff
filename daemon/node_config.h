// node.toml: the settings of one `ringtraind` (docs/daemon.md, "Processes and addresses").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/net/tls_files.h"
#include "base/status.h"

namespace rt::daemon {

// One daemon's config. Every field's default is given; `id` and `state_dir` are required.
struct NodeConfig {
  // [node]
  int64_t id = 0;                         // this node's id, unique in the cluster, ≥ 1 (required)
  std::string listen = "127.0.0.1:7700";  // control + membership RPC "host:port"
  std::string advertise;                  // "host:port" peers reach this node at; "" = listen
  std::string state_dir;                  // membership state, worker logs (required)
  int slots = 1;                          // worker processes this node may run (GPUs, CPU ranks)
  std::string rendezvous_host = "127.0.0.1";  // address of this node's rendezvous store
  // [cluster]
  // "host:port,host:port": peers to join through; "" (or this node's own address first) starts
  // a new cluster.
  std::string seeds;
  // "http://host:port" of an etcd client URL: membership is kept in etcd instead of the ring's
  // own protocol (docs/membership.md "Membership in etcd"); seeds are then not used.
  std::string etcd;
  // Prefix of this cluster's keys in etcd.
  std::string etcd_prefix = "/ringtrain/default";
  // TTL of each node's etcd lease: a node silent this long leaves the view.
  int etcd_lease_s = 2;
  // [auth]
  std::string secret_file;  // the cluster secret (ringctl init-secret); "" = none (loopback only)
  // [tls] cert_file, key_file, ca_file: this node's TLS identity (ringctl init-tls; PEM). Set:
  // every RPC link of the node (control API, membership, memory tier, job store, embedded chunk
  // store) runs over mutual TLS, and its workers get the paths. Needs secret_file. "" = no TLS.
  net::TlsFiles tls;
  // [http]
  // "host:port" of the HTTP listener for /metrics and the status page (docs/operations.md); "" =
  // none. Port 0 picks a free port (`ringctl status --json` shows it as the node's `http`).
  std::string http_listen;
  // [store]: the embedded chunk store (daemon/embedded_store.h). "host:port" this node's chunk
  // server binds; "" = none.
  std::string store_listen;
  // Every store node as "ID@HOST:PORT,..." (daemon ids; this node among them at its listen
  // port); "" = this node alone. The eldest store node of the current view (View::EldestFirst) is
  // the metadata node.
  std::string store_nodes;
  int store_replication = 0;    // replicas per chain, 1-3; 0 = min(3, store nodes)
  int store_chains = 8;         // replication chains (chunks are striped over them)
  int store_capacity_gib = 64;  // most GiB of this node's data files
  // [worker]
  int stop_grace_ms = 2000;  // SIGTERM → SIGKILL grace when a generation's workers are stopped
  std::string worker_env;    // extra "NAME=value,NAME=value" for workers (e.g. OMP_NUM_THREADS=1)
  // Niceness added to the workers' (0-19): > 0 lets the daemon's heartbeats, chunk server and
  // memory tier preempt the workers' computation on a busy CPU (and its chunk resyncs too).
  int worker_nice = 0;
  // A worker that sends no heartbeat for this long (its process is stopped or frozen: SIGSTOP, a
  // debugger) is killed, and the job recovers as from its death. 0 = never.
  int worker_hang_ms = 2000;
  // How long the daemon holds a worker's watch call (the long poll by which a worker learns
  // that its generation ended) before it answers "keep waiting" and the worker calls again.
  int worker_watch_hold_ms = 300'000;

  // The seeds as a list (split at commas, blanks dropped).
  std::vector<std::string> SeedList() const;
  // `advertise`, or `listen` when it is empty.
  std::string AdvertisedAddress() const;
};

// Binds every field to `schema` with its section and doc.
void BindNodeKeys(NodeConfig* config, ConfigSchema* schema);

// Parses node.toml text; `source` names it in errors. Errors: InvalidArgument naming the source,
// line and key (unknown key, wrong type, out of range, a missing required key), a malformed
// "host:port" in listen/advertise/seeds/http.listen, or a [store] section that
// StoreServerOptions refuses.
Result<NodeConfig> ParseNodeConfig(std::string_view text, const std::string& source);

// Reads and parses a node.toml file. Errors: NotFound naming the path, and ParseNodeConfig's.
Result<NodeConfig> LoadNodeConfig(const std::string& path);

// Splits "a, b,c" at commas, trimming blanks and dropping empty items.
std::vector<std::string> SplitCommaList(std::string_view text);

// Splits "host:port". Errors: InvalidArgument naming `what` and the text.
Result<std::pair<std::string, uint16_t>> SplitHostPort(std::string_view text,
                                                       std::string_view what);

}  // namespace rt::daemon
