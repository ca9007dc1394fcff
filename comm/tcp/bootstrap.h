// Bootstrap of a CPU communicator through the rendezvous Store and Boost.Asio: the ranks agree
// on a nonce, publish their addresses, connect (a control connection per pair, data connections
// for pairs that do not share memory), map each other's shared-memory segments and pass a ready
// barrier (docs/formats/comm_wire.md, "Bootstrap"). Internal to comm/tcp.
#pragma once

#include <string>

#include "base/status.h"
#include "comm/communicator.h"
#include "comm/tcp/mesh.h"

namespace rt::comm::tcp {

// Connects `mesh` (made for options.rank of options.size) to every peer under the store keys of
// `scope`, and configures its shared-memory links from `options`; a one-rank group has nothing
// to do. Blocks until every peer is connected and ready, options.bootstrap_timeout at most;
// notices Mesh::Abort() within ~100 ms. Errors: CommAborted after Abort(); PeerFailed naming
// the ranks not heard from by the deadline, or a peer that died or failed; InvalidArgument for
// a bad listen address; IoError when listening fails; ProtocolError for a malformed connection;
// the store's errors with the key.
Status BootstrapMesh(const CommOptions& options, const std::string& scope, Mesh& mesh);

}  // namespace rt::comm::tcp
