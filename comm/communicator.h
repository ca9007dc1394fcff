// Communicators: process groups and collectives behind one interface (STYLE.md rule 7).
//
// Backends (callers get objects from the factories below and never see the implementation):
//   - CPU (comm/tcp/): ranks exchange host buffers over TCP (Boost.Asio bootstrap, non-blocking
//     sockets in the data path) and, for ranks on the same host, over shared-memory rings
//     (chosen automatically). When every rank is on one host, all-reduce and barrier run
//     directly through per-rank shared arenas (comm/tcp/arena.h: one-step all-read for small
//     messages, single-copy reduce-scatter/all-gather by reading for large ones). Otherwise ring
//     reduce-scatter/all-gather with streamed (pipelined)
//     reduction for large messages, recursive doubling for small all-reduces, a binomial tree
//     for small broadcast/reduce, pairwise exchange for all-to-all. bf16/fp16 reduce in fp32.
//   - NCCL (comm/nccl/, built when RINGTRAIN_CUDA is ON): device buffers, one CUDA stream per
//     communicator, completion through CUDA events. A communicator of one rank calls no NCCL op:
//     an op is at most a device copy on the calling thread's current CUDA stream
//     (kernels/cuda/stream.h) and its Work is done at once, so later work on that stream, not
//     the host, sees the result (host reads go through a copy on that stream, as always).
//
// Semantics shared by every backend:
//   - Every op is non-blocking and returns a Work handle; buffers must stay valid and
//     untouched until the work completes. Ops of one communicator run in issue order; every rank
//     must issue the collectives of a communicator in the same order with matching arguments
//     (counts, dtype, op, root). A mismatch is detected and reported as ProtocolError naming
//     both ranks, never a hang or an overrun. Consecutive Send/Recv ops form one group that
//     progresses together (like ncclGroupStart/End), so "send then receive" between two ranks
//     does not deadlock; sends and receives between two ranks match in issue order and must
//     agree on tag, count and dtype.
//   - In-place: pass the same pointer as send and recv (AllReduce, Broadcast, Reduce); for
//     AllGather/Gather the send buffer may be the rank's own block of recv.
//   - Failure: a peer's death (EOF, reset), a protocol violation, or no progress from a peer for
//     `op_timeout` fails the running op and every pending and later op of the communicator with
//     PeerFailed/ProtocolError naming the rank(s). Abort() (any thread) fails them with
//     CommAborted and wakes every waiter within 100 ms; it also aborts every communicator Split
//     from this one (and theirs), so aborting the world fails a rank's every group at once. The
//     CommAborted errors name the communicator ("world/tp"). A failed communicator stays failed:
//     destroy it and build a new one for the next generation (no process restart needed).
//   - Bootstrap runs in the background after the factory returns (like non-blocking
//     ncclCommInitRankConfig); ops issued before it finishes are queued. WaitReady() waits for
//     it; a bootstrap failure (deadline, unreachable store or peer, Abort()) is reported by
//     WaitReady() and by every op.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/deadline.h"
#include "base/status.h"
#include "comm/store.h"
#include "kernels/dtype.h"

namespace rt::comm {

// Reduction operators. kAvg is the sum divided by the group size (integer division for
// integer types).
enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1, kMax = 2, kMin = 3 };
std::string_view ReduceOpName(ReduceOp op);

// The kinds of ops, for byte accounting and wire headers. Values appear on the wire.
enum class OpKind : uint8_t {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kReduce = 4,
  kGather = 5,
  kScatter = 6,
  kAllToAll = 7,
  kSend = 8,
  kRecv = 9,
  kBarrier = 10,
  kSplit = 11,
};
inline constexpr size_t kOpKindCount = 12;
// "all_reduce", "reduce_scatter", ...
std::string_view OpKindName(OpKind kind);

// Payload bytes moved by one kind of op (headers and bootstrap traffic excluded).
struct OpBytes {
  uint64_t ops = 0;             // ops of this kind completed (successfully or not)
  uint64_t bytes_sent = 0;      // payload bytes this rank sent to peers
  uint64_t bytes_received = 0;  // payload bytes this rank received from peers
};

// Per-op-kind byte counts of one communicator since it was created.
struct CommStats {
  std::array<OpBytes, kOpKindCount> per_op{};
  // CPU backend: output bytes of single-copy all-reduces that this rank reduced itself (it
  // copied the rest from peers' outputs); shows how two ranks split the work.
  uint64_t single_copy_reduced_bytes = 0;
  const OpBytes& operator[](OpKind k) const { return per_op[static_cast<size_t>(k)]; }
  OpBytes Total() const;
};

// The handle of one issued op. Thread-safe.
class Work {
 public:
  virtual ~Work() = default;
  // Waits until the op completes or `deadline` passes. Returns the op's status, or
  // DeadlineExceeded (retryable; the op keeps running and may be waited on again). On the CPU
  // backend a waiting caller may run queued ops itself (lower latency than a thread handoff).
  virtual Status Wait(Deadline deadline) = 0;
  // True once the op has completed (successfully or not).
  virtual bool Done() const = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// Which transport the CPU backend uses between two ranks.
enum class Transport : uint8_t {
  kAuto = 0,  // shared memory for ranks on the same host, TCP otherwise
  kTcp = 1,   // TCP for every pair (tests the TCP path on one host)
  kShm = 2,   // shared memory for same-host pairs (as kAuto; TCP across hosts)
};

// How to build a communicator. One struct for every backend.
struct CommOptions {
  // The rendezvous store (required). Keys are scoped by `job` and `generation`.
  std::shared_ptr<Store> store;
  // Job name and membership generation; together they scope every store key, so a communicator
  // of generation g+1 never meets generation g. Default "job", 0.
  std::string job = "job";
  int64_t generation = 0;
  // Distinguishes several communicators of one generation (e.g. "tp", "dp"); default "world".
  std::string name = "world";
  // This rank and the group size (required; 0 ≤ rank < size).
  int rank = -1;
  int size = 0;
  // An op that sees no progress from a peer for this long fails the communicator. Default 30 s.
  std::chrono::milliseconds op_timeout{30'000};
  // Bootstrap (store rendezvous and connections) must finish within this. Default 60 s.
  std::chrono::milliseconds bootstrap_timeout{60'000};
  // CPU backend: transport selection (default kAuto).
  Transport transport = Transport::kAuto;
  // CPU backend: address to listen on for peers and to advertise (default loopback; set the
  // host's address for multi-host jobs).
  std::string listen_address = "127.0.0.1";
  // CPU backend: the secret each rank-to-rank connection proves in both directions before its
  // hello (the handshake of base/net/auth.h); a connection that fails it is logged with its
  // address and dropped, and bootstrap goes on waiting for the real peers. Every rank of a
  // communicator must have the same secret or none. Null (default): no authentication.
  std::shared_ptr<const net::ClusterSecret> secret = nullptr;
  // CPU backend: bytes of each shared-memory ring (one per ordered same-host pair). Default 4 MiB.
  size_t shm_ring_bytes = 4u << 20;
  // CPU backend: all-reduces of at most this many bytes use recursive doubling (over TCP) or
  // one-step all-read through the shared arenas; larger ones the ring or the arenas' direct
  // reduce-scatter/all-gather. Default 64 KiB.
  size_t small_message_bytes = 64u << 10;
  // CPU backend: TCP data connections per pair of ranks (1..8). Transfers of at least
  // `tcp_stripe_bytes` are striped over all of them (one part per connection, each with its own
  // header), which helps where one TCP stream cannot fill the link. Default 1.
  int tcp_connections_per_peer = 1;
  size_t tcp_stripe_bytes = 1u << 20;
  // CPU backend: bytes of each rank's shared-memory arena (two staging halves) for direct
  // all-reduce when every rank is on this host; pages are touched only when used. 0 turns the
  // arenas off (all-reduce then runs over the per-pair rings). Default 32 MiB.
  size_t shm_arena_bytes = 32u << 20;
  // CPU backend: all-reduces of at least this many bytes, when every rank is on this host,
  // each may read the others' memory (process_vm_readv: same user, no ptrace restriction) and
  // the ranks do not outnumber the CPUs, read the peers' buffers directly instead of staging
  // them in the arenas: each byte crosses between processes once. 0 turns it off. Default
  // 3 MiB: below it the staging steps win, their buffers still fit the caches (2 ranks on this
  // project's 2-vCPU machine: 2 MiB staged 148 µs vs single copy 234 µs, 4 MiB 690 vs 580 µs).
  size_t shm_single_copy_bytes = 3u << 20;
  // CPU backend: use single copy even when the ranks outnumber the CPUs (tests). Default off.
  bool shm_single_copy_oversubscribed = false;
  // CPU backend: how long a rank waiting on shared memory keeps polling (CPU pauses, or
  // sched_yield when the group has more ranks than this host has CPUs) before sleeping on a
  // futex; Abort() is seen on every poll, a dead peer within a millisecond. Default 200 µs.
  std::chrono::microseconds shm_yield_window{200};
};

// A process group. Thread-safe: ops may be issued from several threads (their order is the order
// of the calls), and Abort() may be called from any thread at any time.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int64_t generation() const = 0;
  // "cpu" or "nccl".
  virtual std::string_view backend() const = 0;

  // Waits for bootstrap to finish. Returns its error if it failed.
  virtual Status WaitReady(Deadline deadline) = 0;

  // recv[i] = op over ranks of send[i], i < count. send == recv is in-place.
  virtual WorkHandle AllReduce(const void* send, void* recv, size_t count, DType dtype,
                               ReduceOp op) = 0;
  // send holds size()·recv_count elements; rank r receives the reduction of block r.
  virtual WorkHandle ReduceScatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                   ReduceOp op) = 0;
  // recv (size()·send_count elements) gets every rank's send block in rank order.
  virtual WorkHandle AllGather(const void* send, void* recv, size_t send_count, DType dtype) = 0;
  // Variable counts: rank r contributes counts[r] elements; recv holds them back to back.
  // Every rank passes the same counts.
  virtual WorkHandle AllGatherV(const void* send, void* recv, std::span<const size_t> counts,
                                DType dtype) = 0;
  // recv on every rank = send of `root` (send is read on the root only).
  virtual WorkHandle Broadcast(const void* send, void* recv, size_t count, DType dtype,
                               int root) = 0;
  // recv on `root` = reduction of every rank's send (recv is ignored elsewhere).
  virtual WorkHandle Reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                            int root) = 0;
  // recv on `root` (size()·send_count elements) = every rank's send in rank order.
  virtual WorkHandle Gather(const void* send, void* recv, size_t send_count, DType dtype,
                            int root) = 0;
  // send on `root` holds size()·recv_count elements; rank r receives block r.
  virtual WorkHandle Scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                             int root) = 0;
  // Block j of send (count_per_rank elements) goes to rank j; block i of recv comes from rank i.
  virtual WorkHandle AllToAll(const void* send, void* recv, size_t count_per_rank, DType dtype) = 0;
  // Point to point. Matching sends and receives agree on tag, count and dtype.
  virtual WorkHandle Send(const void* buffer, size_t count, DType dtype, int peer,
                          uint32_t tag) = 0;
  virtual WorkHandle Recv(void* buffer, size_t count, DType dtype, int peer, uint32_t tag) = 0;
  // Completes on every rank once every rank has entered it.
  virtual WorkHandle Barrier() = 0;

  // Collective: splits the group by `color` (ranks with the same color form a new
  // communicator, ordered by `key`, then by old rank), like ncclCommSplit. A negative color
  // takes no part: returns nullptr. The new communicator bootstraps in the background (see
  // WaitReady). Blocks until the color exchange finishes or `deadline` passes. The new
  // communicator is named "<this name>/<name>" ("<this name>/split<N>" when `name` is empty);
  // it is aborted whenever this one is (Abort(), at once when this one already was).
  virtual Result<std::unique_ptr<Communicator>> Split(int color, int key, Deadline deadline,
                                                      std::string_view name = {}) = 0;

  // Fails every pending and later op with CommAborted naming this communicator and wakes every
  // waiter (within 100 ms); does the same to every communicator Split from this one that is
  // still alive. Thread-safe, idempotent, non-blocking.
  virtual void Abort() = 0;
  // The communicator's name: CommOptions::name, "/"-joined with the names given to Split.
  virtual std::string_view name() const = 0;
  // The communicator's error once it has failed (OK while healthy). Thread-safe.
  virtual Status status() const = 0;
  // Payload bytes per op kind so far. Thread-safe.
  virtual CommStats stats() const = 0;
};

// Creates a CPU communicator (TCP + shared memory). Returns at once (argument errors are
// InvalidArgument); bootstrap runs in the background.
Result<std::unique_ptr<Communicator>> NewCpuCommunicator(CommOptions options);

// Creates an NCCL communicator on CUDA device `device` (the current device when -1). Buffers
// passed to its ops are device pointers. Unimplemented in builds without RINGTRAIN_CUDA.
Result<std::unique_ptr<Communicator>> NewNcclCommunicator(CommOptions options, int device = -1);

// True when this build has the NCCL backend.
bool NcclAvailable();

}  // namespace rt::comm
