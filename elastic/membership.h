// Membership of the ring: the daemons agree on views (who is in the cluster, numbered by a
// generation) and on a small replicated state (the job and its progress, an opaque versioned
// blob). This is the face of elastic/membership/: the protocol (an I/O-free state machine,
// elastic/membership/machine.h) driven over base/net RPC. Design: docs/membership.md; wire:
// docs/formats/membership_wire.md; persisted state: docs/formats/membership_state.md.
//
// Guarantees (checked by the simulator in tests/elastic): two members never install different
// views with one generation; a view is installed only with the acceptance of a majority of the
// previous view, so a minority partition never installs one; a majority that stays connected
// installs a view of exactly its live members within a few seconds; a restarted node rejoins;
// ProposeState is a linearizable compare-and-set decided by the same majority rule, so the state
// survives the loss of any minority.
//
// Example:
//     ASSIGN_OR_RETURN(auto membership, StartMembershipService({
//         .node_id = 3, .listen = "127.0.0.1:7003", .seeds = {"127.0.0.1:7001"},
//         .state_dir = "/var/lib/ringtrain/membership"}));
//     // inside a coroutine:
//     CO_ASSIGN_OR_RETURN(View view, co_await membership->AwaitView(
//         [](const View& v) { return v.members.size() >= 3; }, Deadline::AfterMs(30'000)));
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "base/deadline.h"
#include "base/status.h"

namespace rt::net {
class ClusterSecret;
class RpcServer;
}  // namespace rt::net

namespace rt::elastic {

// A daemon's id: unique in the cluster, never 0; the ring is ordered by it.
using NodeId = uint64_t;

// One member of a view.
struct Member {
  NodeId id = 0;
  // "host:port" where its membership RPC is served (MembershipServiceOptions::advertise).
  std::string address;
  // Random, chosen when the node's state folder was created: a node that lost its state comes
  // back with a new incarnation and is admitted anew (it never votes with a memory it lost).
  uint64_t incarnation = 0;
  // The generation of the view that admitted this incarnation: it stays while the member stays
  // (a node that leaves and comes back, or comes back with a new incarnation, is admitted anew).
  // 0: not known (a view written before members carried it).
  uint64_t admitted = 0;
  friend bool operator==(const Member&, const Member&) = default;
};

// A view: the members of the cluster, sorted by id (the ring: each watches the next, the last
// watches the first). The generation grows by one with every change of the member set; one
// generation names one member set on every node. Generation 0 means "no view yet".
struct View {
  uint64_t generation = 0;
  std::vector<Member> members;  // sorted by id, unique
  // True if `node` is a member.
  bool Contains(NodeId node) const;
  // The member ids in ring order.
  std::vector<NodeId> Ids() const;
  // The member ids, the one admitted longest ago first (by `admitted`, then by id). Every node
  // computes the same order from the same view, and a member's place only moves up while it
  // stays: the embedded chunk store gives its metadata role to the first store node of it, so a
  // rejoining node does not take the role back.
  std::vector<NodeId> EldestFirst() const;
  friend bool operator==(const View&, const View&) = default;
};

// The replicated state: an opaque blob and its version (0 = never set; each accepted
// ProposeState makes it version + 1). The membership service does not look inside the blob.
struct ReplicatedState {
  uint64_t version = 0;
  std::string blob;
  friend bool operator==(const ReplicatedState&, const ReplicatedState&) = default;
};

// What the service tells its owner (MembershipServiceOptions::on_notification).
struct MembershipNotification {
  enum class Kind {
    kViewInstalled,  // a new view was installed here (view holds it; self may be outside it)
    kStateChanged,   // a new replicated state version was decided (state holds it)
    kSuspected,      // this node suspects `node` (its successor) of having failed
    kRemoved,        // this node is not a member of the newest view it knows (it asks to rejoin)
  };
  Kind kind;
  View view;              // the current view at the time of the notification
  ReplicatedState state;  // the current replicated state at the time of the notification
  NodeId node = 0;        // kSuspected: the suspect
  // kSuspected: how long after the last sign of life the suspicion was raised.
  std::chrono::milliseconds detected_after{0};
  // kViewInstalled: this node's own proposal installed the view (it led the change).
  bool led = false;
};

// Timing of failure detection and agreement (defaults meet issue 13's budgets: a killed peer is
// suspected within ~300 ms through its broken connection, a hung one within ~2 s).
struct MembershipTiming {
  // The state machine's tick; every other period is a multiple of it.
  std::chrono::milliseconds tick{50};
  // A member pings its successor every this many ticks.
  uint32_t heartbeat_ticks = 2;
  // A successor that answered no ping for this many ticks is suspected (a hang).
  uint32_t suspect_ticks = 20;
  // A member asked to confirm a suspicion answers "confirmed" when the suspect has not answered
  // its ping within this many ticks (a broken connection confirms at once).
  uint32_t confirm_ticks = 8;
  // A proposal that got no majority is retried after this many ticks (plus a random 0..this).
  uint32_t retry_ticks = 4;
  // A node outside the view asks the members (or seeds) to admit it every this many ticks.
  uint32_t join_ticks = 10;
  // How long sending one message may take before the peer is reported unreachable.
  std::chrono::milliseconds send_timeout{1'000};
  // How long connecting to a peer is retried before it is reported unreachable (a killed
  // peer refuses at once; this bounds how soon that is noticed).
  std::chrono::milliseconds connect_timeout{100};
};

// Settings of StartMembershipService.
struct MembershipServiceOptions {
  // This daemon's id (required, not 0; unique in the cluster).
  NodeId node_id = 0;
  // "host:port" to listen on for membership RPC, e.g. "127.0.0.1:7001" (port 0 picks one).
  // Ignored when `server` is given.
  std::string listen = "127.0.0.1:0";
  // "host:port" of some peers to join through. A node with no persisted state bootstraps a new
  // cluster (a one-member view, generation 1) only when `seeds` is empty or its first entry is
  // this node's own advertised address; every other node joins through the seeds.
  std::vector<std::string> seeds;
  // Folder for the persisted protocol state (created if missing; required). A restart with the
  // same folder rejoins safely; never copy it between nodes.
  std::string state_dir;
  // The cluster secret (base/net/auth.h): every membership connection proves it. Null: none
  // (then only loopback addresses are allowed).
  std::shared_ptr<const net::ClusterSecret> secret = nullptr;
  // An existing RPC server to share one port with (the daemon's control API). The service
  // registers its handlers on it (frame types 0x0D00..0x0D0F, docs/formats/membership_wire.md),
  // so it must not have been started yet: the caller starts it after StartMembershipService
  // returns, and keeps it running until Shutdown(). Null: the service runs its own on `listen`.
  std::shared_ptr<net::RpcServer> server = nullptr;
  // "host:port" the other members reach this node at. Empty: `listen` with the bound port.
  std::string advertise;
  // Called on the service's own thread for every notification, in order. Must not block (post
  // work elsewhere) and must not call the service's blocking functions.
  std::function<void(const MembershipNotification&)> on_notification;
  // Failure detection and agreement timing.
  MembershipTiming timing;
};

// A running membership service. Every function is thread-safe; the awaitables may be awaited
// from any executor (they run on the service's own thread and resume the caller on its own).
class MembershipService {
 public:
  virtual ~MembershipService() = default;

  // This node's id and the address it advertises.
  virtual NodeId self() const = 0;
  virtual std::string address() const = 0;

  // The newest view this node has installed (generation 0 before its first one).
  virtual View CurrentView() const = 0;
  // Waits until the installed view satisfies `predicate` (called on the service's thread for the
  // current view and every new one) and returns it. Errors: DeadlineExceeded naming the last
  // view seen; Aborted after Shutdown().
  virtual boost::asio::awaitable<Result<View>> AwaitView(std::function<bool(const View&)> predicate,
                                                         Deadline deadline) = 0;

  // The newest replicated state this node knows.
  virtual ReplicatedState CurrentState() const = 0;
  // Waits until the known state satisfies `predicate`, as AwaitView.
  virtual boost::asio::awaitable<Result<ReplicatedState>> AwaitState(
      std::function<bool(const ReplicatedState&)> predicate, Deadline deadline) = 0;
  // Compare-and-set: replaces the state with `blob` if its version is still `expected_version`,
  // decided by a majority of the current view. Returns the new version (expected_version + 1).
  // Errors: FailedPrecondition naming the current version when it is not `expected_version`;
  // Unavailable when this node is not a member; DeadlineExceeded when no majority decided in
  // time (the outcome is then unknown: read the state to learn it); Aborted after Shutdown().
  virtual boost::asio::awaitable<Result<uint64_t>> ProposeState(uint64_t expected_version,
                                                                std::string blob,
                                                                Deadline deadline) = 0;

  // Leaves the cluster gracefully: proposes a view without this node and returns once it is
  // installed (the others stop watching it at once; no suspicion delay). The node then stops
  // asking to rejoin. A node that is (or, as the others leave, becomes) the only member has
  // nothing to leave: OK at once, staying the member of its one-node view. Errors:
  // DeadlineExceeded when no majority accepted in time.
  virtual boost::asio::awaitable<Status> Leave(Deadline deadline) = 0;

  // Stops without leaving (the others detect it): refuses new calls, fails waiting ones with
  // Aborted, stops its timers, connections and its server (not a shared one). Its thread ends
  // when the service is destroyed. Idempotent; must not be called from the service's thread
  // (e.g. from on_notification). The persisted state stays; a restart rejoins. Errors:
  // DeadlineExceeded when it did not stop in time.
  virtual Status Shutdown(Deadline deadline) = 0;
};

// Where StartEtcdMembershipService keeps the membership (docs/formats/membership_etcd.md).
struct EtcdMembershipOptions {
  // "http://host:port" of an etcd v3 client URL (its JSON gateway). Required.
  std::string endpoint;
  // Every key of this cluster starts with this prefix (no trailing '/'); clusters sharing one
  // etcd use different prefixes.
  std::string prefix = "/ringtrain/default";
  // TTL of this node's lease: a node that does not renew it for this long (killed, hung, cut off
  // from etcd) leaves the view. etcd raises TTLs below its minimum (2 s by default).
  std::chrono::seconds lease_ttl{2};
};

// Starts a membership service kept in etcd instead of the ring's own protocol, for fleets that
// run etcd: the same interface and notifications; liveness is a lease per node (a member whose
// lease expires leaves the next view), a view change and a state change are each one
// compare-and-swap transaction, so etcd's quorum decides them (a node cut off from etcd for
// longer than its lease knows no view, generation 0, and runs nothing, until it reaches etcd
// again). Of `options` it uses node_id, advertise (or listen: the address peers reach this
// node at; required), timing.tick (it polls etcd every 2 ticks), timing.send_timeout (the
// deadline of each etcd call) and on_notification; seeds, state_dir, secret and server are not
// used. Returns at once; use AwaitView. Errors: InvalidArgument for bad options or a malformed
// endpoint.
Result<std::unique_ptr<MembershipService>> StartEtcdMembershipService(
    MembershipServiceOptions options, EtcdMembershipOptions etcd);

// Starts the service: loads (or creates) the persisted state under options.state_dir, starts
// the RPC server (unless one is shared), and begins joining or bootstrapping. Returns at once;
// use AwaitView to wait for a view. Errors: InvalidArgument for bad options (node_id 0, no
// state_dir, a malformed address), Corruption naming the file when the persisted state does not
// verify, IoError naming what failed, the RPC server's errors when it cannot listen.
Result<std::unique_ptr<MembershipService>> StartMembershipService(MembershipServiceOptions options);

}  // namespace rt::elastic
