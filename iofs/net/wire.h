// The ringfsd RPC protocol: frame types and payload codecs (docs/formats/iofs_wire.md). Every
// request is one base/net RPC frame; payloads are little-endian with bounded lengths.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/status.h"
#include "iofs/chain/chain_types.h"
#include "iofs/file_system.h"

namespace rt::iofs::wire {

// Frame types (the RPC method).
enum Type : uint16_t {
  kPing = 0x6901,
  kInfo = 0x6902,
  kMetaHandover = 0x6903,  // new metadata node → node: give up the role, send what you know
  kChainMessage = 0x6910,  // peer → peer: a replica message
  kChainConfig = 0x6911,   // manager → node: a chain version
  kSyncComplete = 0x6912,  // node → manager
  kChunkWrite = 0x6920,    // → chain head
  kChunkRead = 0x6921,     // → any serving replica
  kChunkKeys = 0x6922,
  kEngineCheck = 0x6923,
  kFsCreate = 0x6930,  // file operations: served by the metadata node
  kFsMkdir = 0x6931,
  kFsWrite = 0x6932,
  kFsRead = 0x6933,
  kFsStat = 0x6934,
  kFsList = 0x6935,
  kFsRename = 0x6936,
  kFsRemove = 0x6937,
  kFsSeal = 0x6938,
  kFsFsck = 0x6939,
  kFsWriteShm = 0x693a,     // FsWrite with the data in a shared region (iofs/net/shm.h)
  kFsReadShm = 0x693b,      // FsRead into a shared region
  kFsPutFile = 0x693c,      // a whole sealed file in one atomic namespace change
  kFsRemoveTrees = 0x693d,  // files and folders with everything under them, one namespace change
};

// Flags of a kChunkWrite request: the key is deleted (no data follows), or the value is staged
// at the sender (its node id and staged id follow the CRC32C).
inline constexpr uint8_t kChunkWriteDelete = 1;
inline constexpr uint8_t kChunkWriteStaged = 2;

// Largest payload of any ringfsd frame, and largest read answered by one request.
inline constexpr uint32_t kMaxPayload = 72u << 20;
inline constexpr uint64_t kMaxReadPerRequest = 64u << 20;
inline constexpr size_t kMaxPath = 4096;
// Most paths one kFsRemoveTrees request names.
inline constexpr uint32_t kMaxRemovePaths = 65536;

// One node of the cluster as kInfo describes it.
struct NodeAddress {
  uint32_t id = 0;
  std::string host;
  uint16_t port = 0;
};

// The kInfo answer.
struct ClusterInfo {
  uint32_t self = 0;
  uint32_t meta_node = 0;  // the node serving file operations
  uint32_t replication = 0;
  uint32_t chains = 0;
  uint32_t chunk_size = 0;
  std::vector<NodeAddress> nodes;
};

// Codecs of the payloads above; decoders return Corruption naming what does not fit.
std::vector<std::byte> EncodeInfo(const ClusterInfo& info);
Result<ClusterInfo> DecodeInfo(std::span<const std::byte> bytes);

// The kPing request: the metadata node that sends it and its chain manager state
// (ChainManager::Save; empty: none).
struct Ping {
  uint32_t sender = 0;
  std::vector<std::byte> manager_state;
};
std::vector<std::byte> EncodePing(const Ping& ping);
Result<Ping> DecodePing(std::span<const std::byte> bytes);

// The kMetaHandover request: the membership view's epoch and the node taking the role over.
struct HandoverRequest {
  uint64_t epoch = 0;
  uint32_t to = 0;
};
// How long ago a node last answered a request of metadata node `node` (a ping or a handover).
struct AnsweredAgo {
  uint32_t node = 0;
  int64_t ms_ago = 0;  // < 0: its answer keeps the node acting for that long from now on
};
// The kMetaHandover answer: the newest chain manager state the node knows (ChainManager::Save;
// empty: none), the chain versions its replicas hold, and how long ago it last answered each
// other node that acted as a metadata node (it answers none of them from now on).
struct Handover {
  std::vector<std::byte> manager_state;
  std::vector<chain::ChainConfig> configs;
  std::vector<AnsweredAgo> answered;
};
std::vector<std::byte> EncodeHandoverRequest(const HandoverRequest& request);
Result<HandoverRequest> DecodeHandoverRequest(std::span<const std::byte> bytes);
std::vector<std::byte> EncodeHandover(const Handover& handover);
Result<Handover> DecodeHandover(std::span<const std::byte> bytes);

void PutStat(ByteWriter& w, const FileStat& s);
Result<FileStat> GetStat(ByteReader& r);

std::vector<std::byte> EncodeFsck(const FsckReport& report);
Result<FsckReport> DecodeFsck(std::span<const std::byte> bytes);

// A payload that starts with a path: reads it and checks it (ValidatePath).
Result<std::string> GetPath(ByteReader& r);

// Views a byte span as a string and back.
inline std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace rt::iofs::wire
