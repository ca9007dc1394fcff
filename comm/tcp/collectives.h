// The collective algorithms of the CPU backend, on top of Mesh::Exchange (rings, recursive
// doubling, binomial trees, scatter + all-gather) and, when every rank is on this host, the
// shared arenas (comm/tcp/arena.h). They run on whichever thread claimed the op; every rank
// calls the same algorithm with the same header. Internal to comm/tcp.
#pragma once

#include <cstddef>
#include <vector>

#include "base/status.h"
#include "comm/communicator.h"
#include "comm/tcp/mesh.h"
#include "comm/tcp/wire.h"

namespace rt::comm::tcp {

class CpuComm;
struct Op;

// What an algorithm runs with: the mesh, the op's context (byte counts, error names) and the
// op's header template (seq, kind, dtype, count, reduce op, root), which every transfer carries.
struct Ctx {
  Mesh& mesh;
  OpCtx& op;
  DataHeader h;
  int rank() const { return mesh.rank(); }
  int size() const { return mesh.size(); }
  size_t esize() const { return DTypeSize(h.dtype); }
  // A send of `elems` elements at `p` to `peer`, under the op's header.
  Xfer Send(int peer, const void* p, size_t elems) const {
    Xfer x;
    x.peer = peer;
    x.send = true;
    x.header = h;
    x.header.bytes = elems * esize();
    x.data = static_cast<std::byte*>(const_cast<void*>(p));
    x.bytes = x.header.bytes;
    return x;
  }
  // A receive of `elems` elements into `p` from `peer`, expecting the op's header.
  Xfer Recv(int peer, void* p, size_t elems) const {
    Xfer x = Send(peer, p, elems);
    x.send = false;
    return x;
  }
  // Runs the transfers to completion (Mesh::Exchange and its errors).
  Status Run(std::vector<Xfer>& xs) { return mesh.Exchange(op, xs); }
};

// All-reduce and barrier straight from the Op's fields (no std::function on the latency path):
// the op's Op::fast. Finishes an all-reduce that CpuComm::TryPost posted; otherwise numbers the
// op (CpuComm::NextSeq) and runs it through the arenas when every rank is on this host, else
// recursive doubling (at most small_bytes, or fewer elements than ranks) or a ring
// reduce-scatter + all-gather. A barrier is a one-byte max all-reduce. Errors: Mesh::Exchange's
// and ArenaAllReduce's.
Status RunFastAllReduce(CpuComm& c, Op& op, OpCtx& octx);

// The other collectives, as CpuCommunicator's methods describe them (comm/communicator.h), with
// the arguments it has checked; cx.h holds the op's header (dtype, reduce op, root). Errors:
// Mesh::Exchange's.

// recv (rc elements) = rank r's block of the reduction of every rank's send (n·rc elements):
// a ring reduce-scatter.
Status ReduceScatterAlgo(Ctx& cx, const void* send, void* recv, size_t rc);
// recv (n·sc elements) = every rank's send, in rank order: a ring all-gather.
Status AllGatherAlgo(Ctx& cx, const void* send, void* recv, size_t sc);
// As AllGatherAlgo with rank r's block at elements [begin[r], begin[r + 1]) (n + 1 offsets).
Status AllGatherVAlgo(Ctx& cx, const void* send, void* recv, const std::vector<size_t>& begin);
// recv = the root's send: a binomial tree up to small_bytes (or fewer elements than ranks),
// otherwise a scatter from the root and a ring all-gather (van de Geijn).
Status BroadcastAlgo(Ctx& cx, const void* send, void* recv, size_t count, int root,
                     size_t small_bytes);
// The root's recv = the reduction of every rank's send: a binomial tree up to small_bytes (or
// fewer elements than ranks), otherwise a ring reduce-scatter and the blocks sent to the root.
Status ReduceAlgo(Ctx& cx, const void* send, void* recv, size_t count, int root,
                  size_t small_bytes);
// The root's recv (n·sc elements) = every rank's send, in rank order.
Status GatherAlgo(Ctx& cx, const void* send, void* recv, size_t sc, int root);
// recv (rc elements) = block r of the root's send.
Status ScatterAlgo(Ctx& cx, const void* send, void* recv, size_t rc, int root);
// Block q of recv = block r of rank q's send (cpr elements per rank); send != recv.
Status AllToAllAlgo(Ctx& cx, const void* send, void* recv, size_t cpr);

}  // namespace rt::comm::tcp
