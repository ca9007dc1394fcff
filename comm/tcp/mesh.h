// The CPU backend's data plane: one link per peer (a non-blocking TCP socket, or a pair of
// shared-memory rings for a peer on the same host), a control socket per peer for liveness
// (goodbye / abort notices; EOF without goodbye = the peer died), and Exchange(), which drives a
// set of concurrent sends and receives to completion with streamed reduction, a silence
// deadline, and Abort(). Internal to comm/tcp.
//
// Mesh is defined in three files along those lines: comm/tcp/mesh.cc (links, Exchange, Abort),
// comm/tcp/mesh_control.cc (control connections), comm/tcp/mesh_arena.cc (the arenas' views
// and the waits of the arena collectives).
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"
#include "comm/communicator.h"
#include "comm/tcp/shm_segment.h"
#include "comm/tcp/wire.h"

namespace rt::comm::tcp {

// "rank 3": how errors name a rank.
std::string RankName(int rank);

// Most ranks a CPU communicator may have (NewCpuCommunicator refuses more): fixed-size
// per-op arrays of the arena paths hold one entry per rank.
inline constexpr int kMaxCpuRanks = 64;

// One rank's arena in its segment (written by its owner only, but for `claim`;
// docs/formats/comm_wire.md, "Arena"): step s uses slot and staging half s % 2.
struct ArenaView {
  ArenaSlot* slot[2] = {};
  std::atomic<uint64_t>* reduced = nullptr;  // last step whose own slice is reduced
  std::byte* half[2] = {};                   // staging halves
  // Single-copy steps: the last step after which the owner reads no peer's buffer, and the step
  // the owner left with an error (0: none) while peers might still read its buffers.
  std::atomic<uint64_t>* released = nullptr;
  std::atomic<uint64_t>* abandoned = nullptr;
  // Single-copy steps: (step << 24) | blocks the owner reduced so far (in the order it claimed
  // them).
  std::atomic<uint64_t>* progress = nullptr;
  // Two-rank single-copy steps, rank 0's arena only: (step mod 2^24) << 40 | front << 20 |
  // back, the blocks not yet claimed being [front, back); rank 0 claims from the front and
  // rank 1 from the back (compare-and-swap).
  std::atomic<uint64_t>* claim = nullptr;
  int pid = 0;  // the owner's process
};

// One send or receive of a header + payload with one peer.
struct Xfer {
  int peer = -1;
  bool send = false;
  DataHeader header;          // sent, or expected from the peer
  std::byte* data = nullptr;  // payload (const for sends)
  size_t bytes = 0;
  int conn = 0;  // TCP: which of the peer's data connections carries it
  // Receives only: called with [from, to) payload byte ranges as they arrive, in order,
  // each a whole number of elements of `header.dtype` (the last piece may be the tail).
  std::function<void(size_t from, size_t to)> on_data;
  // Progress (owned by Exchange).
  std::array<std::byte, kDataHeaderSize> hbuf{};
  size_t hdone = 0;
  size_t done = 0;
  size_t notified = 0;
  bool header_checked = false;
};

// Everything a rank knows about one peer.
struct Peer {
  int ctrl_fd = -1;
  int data_fd = -1;           // -1 when the link is shared memory (= data_fds[0] otherwise)
  std::vector<int> data_fds;  // TCP: every data connection (large transfers are striped)
  bool shm = false;
  bool same_host = false;
  std::unique_ptr<ShmSegment> segment;  // the peer's segment (we write our ring in it)
  // Control state (touched only by the thread running ops).
  std::string ctrl_in;
  bool goodbye = false;      // the peer left gracefully
  bool ctrl_closed = false;  // its control socket reached EOF
  uint32_t p2p_send_seq = 0;
  uint32_t p2p_recv_seq = 0;
};

// Per-op context for Exchange.
struct OpCtx {
  OpKind kind;
  std::string what;         // set for p2p groups; collectives describe themselves (What())
  bool collective = false;  // header below is the op's template (cross-path mismatch checks)
  DataHeader header;
  int rank = -1;  // this rank (for What())
  // "all_reduce #5 on rank 0", built only when an error needs it.
  std::string What() const {
    if (!collective) return what;
    return std::string(OpKindName(header.kind)) + " #" + std::to_string(header.seq) + " on rank " +
           std::to_string(rank);
  }
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t single_copy_reduced_bytes = 0;  // CommStats::single_copy_reduced_bytes of the op
  // Describes a collective of rank `me` by its header.
  void SetCollective(const DataHeader& h, int me) {
    kind = h.kind;
    collective = true;
    header = h;
    rank = me;
  }
};

// The links of one rank to every peer of its communicator. One thread runs ops on it at a time;
// Abort() and aborted() may be called from any thread.
class Mesh {
 public:
  Mesh(int rank, int size, std::chrono::milliseconds op_timeout);
  ~Mesh();

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::vector<Peer>& peers() { return peers_; }
  ShmSegment* own_segment() { return own_segment_.get(); }
  // Set once, at bootstrap; Abort() may run on another thread meanwhile and rings the new
  // segment's doorbell only once it is published.
  void set_own_segment(std::unique_ptr<ShmSegment> s) {
    own_segment_ = std::move(s);
    abort_segment_.store(own_segment_.get(), std::memory_order_release);
  }
  size_t ring_bytes() const { return ring_bytes_; }
  void set_ring_bytes(size_t b) { ring_bytes_ = b; }
  void set_arena_bytes(size_t b) { arena_bytes_ = b; }
  // TCP transfers of at least `stripe_bytes` are cut into one part per data connection.
  void set_stripe_bytes(size_t b) { stripe_bytes_ = b; }
  // How long a waiter on shared memory yields the CPU before sleeping on its doorbell.
  void set_yield_window(std::chrono::microseconds w) { yield_window_ = w; }
  // True when the group has more ranks than this host has CPUs.
  bool oversubscribed() const { return oversubscribed_; }
  // One wait-loop pause: sched_yield when the group has more ranks than this host has CPUs
  // (the rank we wait for may need ours), a CPU pause otherwise (keeping our time slice keeps
  // both ends of an exchange running).
  void Pause() {
    if (oversubscribed_)
      sched_yield();
    else
      CpuRelax();
  }

  // Links and Exchange (comm/tcp/mesh.cc).

  // Runs every transfer to completion. Errors: PeerFailed naming the peer (EOF, reset, goodbye
  // while data was expected, death seen on its control socket, silence for op_timeout),
  // ProtocolError naming both ranks (header mismatch), CommAborted after Abort().
  Status Exchange(OpCtx& ctx, std::span<Xfer> xfers);

  // Wakes a thread blocked in Exchange; Exchange then returns CommAborted. Thread-safe.
  void Abort();
  bool aborted() const { return aborted_.load(std::memory_order_relaxed); }

  // Closes every socket.
  void CloseAll();

  // Control connections (comm/tcp/mesh_control.cc).

  // Best-effort control messages (non-blocking; never wait on a broken peer).
  void SendGoodbye();
  void SendAbortNotice(const std::string& reason);

  // Writes a control frame to `peer` and waits for a frame of type `want` from every peer,
  // with a deadline (bootstrap's ready barrier).
  Status ControlBarrier(uint16_t type, Deadline deadline);

  // The arenas (comm/tcp/mesh_arena.cc).

  // True when every peer shares memory with us and the segments have arenas: collectives may
  // then run directly through the arenas (comm/tcp/arena.h).
  bool all_shm() const;
  // Bytes of one staging half of every rank's arena.
  size_t arena_half_bytes() const { return arena_bytes_ / 2 / 64 * 64; }
  // The arena of `rank` (ours or a same-host peer's); views are computed once, on first use
  // (after bootstrap, when every segment is mapped).
  const ArenaView& Arena(int rank) {
    if (views_.empty()) BuildArenaViews();
    return views_[rank];
  }
  // Whether this rank can read every peer's memory with process_vm_readv (same user, no ptrace
  // restriction, one PID namespace): probed once, by reading each peer's segment nonce through
  // the peer's process. False without arenas.
  bool single_copy_possible();
  // Turns single-copy steps off for good (a rank could not read its peers).
  void disable_single_copy() { single_copy_bytes_ = 0; }
  // Whether single-copy steps may run when the group is oversubscribed().
  bool single_copy_oversubscribed() const { return single_copy_oversubscribed_; }
  void set_single_copy_oversubscribed(bool on) { single_copy_oversubscribed_ = on; }
  // All-reduces of at least this many bytes may run as single-copy steps (0: never).
  size_t single_copy_bytes() const { return single_copy_bytes_; }
  void set_single_copy_bytes(size_t b) { single_copy_bytes_ = b; }
  // Copies `bytes` at address `src` of rank q's process into dst. Errors: PeerFailed naming q
  // (the process is gone, or the range is no longer mapped).
  Status ReadPeer(const OpCtx& ctx, int q, void* dst, uint64_t src, size_t bytes);
  // Scratch memory of the single-copy steps (grown on demand, kept).
  std::byte* Scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }
  // The arena step counter (steps completed by this rank); the next step is ++arena_step().
  uint64_t& arena_step() { return arena_step_; }
  // Wakes every same-host peer that sleeps on its doorbell (after updating our counters).
  void RingPeers();
  // Waits until counters[q] >= target for every peer q (counters[rank()] is not read): a
  // bounded spin with CPU pauses (PollUntil: no clock read, no system call for the first
  // kSpinIterations turns; one look when oversubscribed), then pauses (or yields, see Pause)
  // until the yield window ends, then sleeps on our doorbell in slices of at most 20 ms.
  // Abort() is checked on every turn; after the first phase the control sockets (dead peers,
  // abort notices, a pending peer that left) and op_timeout at least every millisecond, and
  // ring traffic that shows a mismatched op after every sleep. Errors: CommAborted, PeerFailed
  // naming the rank (death, notice, or op_timeout: the pending ranks and `what` they have not
  // done), ProtocolError.
  Status WaitUntil(OpCtx& ctx, std::atomic<uint64_t>* const* counters, uint64_t target,
                   const char* what);
  // The first phase of WaitUntil alone: polls until counters[q] >= target for every peer q,
  // at most kSpinIterations turns with a CPU pause between them (one look when the group has
  // more ranks than CPUs). True when every peer got there; never blocks, sleeps or fails (an
  // aborted communicator stops the polling and returns false).
  bool PollUntil(std::atomic<uint64_t>* const* counters, uint64_t target);
  // Turns of the first, clock-free spin of WaitUntil.
  static constexpr int kSpinIterations = 64;

 private:
  // Links and Exchange.
  // Exchange after striping: each transfer on its own connection.
  Status ExchangeParts(OpCtx& ctx, std::span<Xfer> xfers);
  // Moves what `x` can move now without blocking (TCP or ring); *progressed when bytes moved.
  Status Step(Xfer& x, OpCtx& ctx, bool* progressed);
  Status StepTcp(Xfer& x, OpCtx& ctx, bool* progressed);
  Status StepShm(Xfer& x, OpCtx& ctx, bool* progressed);
  // After bytes of `x` moved: checks a completed received header, passes whole elements to
  // x.on_data.
  Status AfterBytes(Xfer& x, OpCtx& ctx);
  // Blocks until something may have changed; checks control sockets, abort and the deadline.
  Status Block(OpCtx& ctx, std::span<Xfer> xfers, MonoTime silent_since);
  // PeerFailed: "rank <peer> <how>".
  Status PeerGone(int peer, const std::string& how);
  void Ring(int to_rank);  // bump a rank's doorbell (wake it if sleeping)

  // Control connections.
  // Reads whatever is on control sockets; returns an error on a dead or aborting peer.
  Status PollControl(int timeout_ms, std::span<Xfer> xfers, bool include_data);
  // Reads `peer`'s control socket dry and handles its frames. Errors: PeerFailed for an abort
  // notice or a close without goodbye, ProtocolError for a bad frame.
  Status HandleControl(int peer);

  // The arenas.
  // A collective of ours meets a peer that runs the same op number the other way (ring vs
  // arena): ProtocolError naming both. Checked before sleeping.
  Status CheckRingMismatch(const OpCtx& ctx);
  Status CheckArenaMismatch(const OpCtx& ctx);
  // Builds views_ from the mapped segments (Arena()).
  void BuildArenaViews();

  int rank_, size_;
  std::chrono::milliseconds op_timeout_;
  std::vector<Peer> peers_;
  std::unique_ptr<ShmSegment> own_segment_;
  size_t ring_bytes_ = 0;
  size_t arena_bytes_ = 0;
  uint64_t arena_step_ = 0;
  std::vector<ArenaView> views_;  // Arena(r), built on first use
  int single_copy_ = -1;          // single_copy_possible() once probed
  size_t single_copy_bytes_ = 0;
  bool single_copy_oversubscribed_ = false;
  std::vector<std::byte> scratch_;
  size_t stripe_bytes_ = 1u << 20;
  mutable int all_shm_ = -1;  // all_shm() once computed
  bool oversubscribed_ = false;
  std::chrono::microseconds yield_window_{200};
  int abort_fd_ = -1;  // eventfd
  std::atomic<bool> aborted_{false};
  // own_segment_ as Abort() sees it from another thread (published by set_own_segment).
  std::atomic<ShmSegment*> abort_segment_{nullptr};
};

}  // namespace rt::comm::tcp
