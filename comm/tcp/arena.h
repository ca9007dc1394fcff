// Direct collectives through the shared-memory arenas, used when every rank of the
// communicator is on this host (Mesh::all_shm). Internal to comm/tcp.
//
// All-reduce, per step (one staging half of every rank's arena; docs/formats/comm_wire.md):
//   small (bytes ≤ small_bytes and fitting a half): every rank stages its input, then reduces
//     all n inputs itself in rank order: one synchronisation, identical bits on every rank.
//   large (chunks of one half): every rank stages its chunk, reduces its 1/n slice reading the
//     slice from every rank's staging (fp32 accumulation for bf16/fp16), publishes it, then
//     copies every rank's reduced slice out: two synchronisations, each byte copied in once and
//     out once instead of the ring's 2(n−1) hops. The two halves alternate, so the next step
//     waits for peers to finish reading a half only two steps later.
#pragma once

#include <cstddef>

#include "base/status.h"
#include "comm/tcp/mesh.h"

namespace rt::comm::tcp {

// recv = reduction of every rank's send (h: kind, dtype, reduce op, seq, count of the op).
// send == recv is in place. Byte accounting follows the ring formula for large messages
// (2(n−1)/n of the buffer each way) and (n−1)·bytes each way for small ones. Errors as
// Mesh::WaitUntil, plus ProtocolError naming both ranks when headers disagree.
Status ArenaAllReduce(Mesh& mesh, OpCtx& ctx, const DataHeader& h, const void* send, void* recv,
                      size_t small_bytes);

// The small path in two halves, for a caller that posts its input before it waits (the
// latency path of CpuComm): ArenaSmallPath tells whether ArenaAllReduce takes the small path
// for an op (h as above); ArenaPostSmall stages `send` for the next arena step and publishes it
// without waiting or ringing (returns the step; the caller calls Mesh::RingPeers next);
// ArenaFinishSmall waits for every rank's input of that step, checks the headers and reduces
// into `recv` (reading our own input from `send`, which the caller keeps untouched until the op
// completes, as for every op). ArenaAllReduce's small path is Post, RingPeers, Finish. Between
// Post and Finish, the caller must run no other arena step.
bool ArenaSmallPath(Mesh& mesh, const DataHeader& h, size_t small_bytes);
uint64_t ArenaPostSmall(Mesh& mesh, const DataHeader& h, const void* send);
Status ArenaFinishSmall(Mesh& mesh, OpCtx& ctx, const DataHeader& h, uint64_t step,
                        const void* send, void* recv);
// Whether every peer has posted its input of arena step `step`, polled briefly
// (Mesh::PollUntil: never blocks).
bool ArenaSmallPosted(Mesh& mesh, uint64_t step);
// ArenaFinishSmall after its wait, once every peer's input of `step` is known to be there
// (ArenaSmallPosted returned true): checks the headers and reduces into `recv`, never waits.
// Errors: ProtocolError naming both ranks when headers disagree.
Status ArenaReduceSmall(Mesh& mesh, OpCtx& ctx, const DataHeader& h, uint64_t step,
                        const void* send, void* recv);

}  // namespace rt::comm::tcp
