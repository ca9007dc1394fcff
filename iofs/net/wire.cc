#include "iofs/net/wire.h"

#include "iofs/chain/codec.h"

// GCC 12 reports false array-bounds/stringop-overflow errors inside std::vector::resize as
// inlined into ByteWriter::Put at -O3 (GCC bug 105329 family).
#pragma GCC diagnostic ignored "-Warray-bounds"
#ifndef __clang__  // a GCC-only warning group
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

namespace rt::iofs::wire {

std::vector<std::byte> EncodeInfo(const ClusterInfo& info) {
  ByteWriter w;
  w.Put<uint32_t>(info.self);
  w.Put<uint32_t>(info.meta_node);
  w.Put<uint32_t>(info.replication);
  w.Put<uint32_t>(info.chains);
  w.Put<uint32_t>(info.chunk_size);
  w.Put<uint32_t>(static_cast<uint32_t>(info.nodes.size()));
  for (const NodeAddress& n : info.nodes) {
    w.Put<uint32_t>(n.id);
    w.PutString(n.host);
    w.Put<uint16_t>(n.port);
  }
  return w.Take();
}

Result<ClusterInfo> DecodeInfo(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "cluster info");
  ClusterInfo info;
  ASSIGN_OR_RETURN(info.self, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(info.meta_node, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(info.replication, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(info.chains, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(info.chunk_size, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint32_t n, r.Get<uint32_t>());
  if (n > 1024) return Corruption("cluster info: " + std::to_string(n) + " nodes exceed 1024");
  for (uint32_t i = 0; i < n; ++i) {
    NodeAddress a;
    ASSIGN_OR_RETURN(a.id, r.Get<uint32_t>());
    ASSIGN_OR_RETURN(a.host, r.GetString(255));
    ASSIGN_OR_RETURN(a.port, r.Get<uint16_t>());
    info.nodes.push_back(std::move(a));
  }
  return info;
}

// Bounds of a handover answer: a manager state of 4096 chains is about 160 KiB.
constexpr uint32_t kMaxHandoverState = 1u << 20;
constexpr uint32_t kMaxHandoverConfigs = 4096;
constexpr uint32_t kMaxHandoverAnswered = 1024;  // nodes (as in the cluster info)
constexpr int64_t kMaxAnsweredAheadMs = 3'600'000;

std::vector<std::byte> EncodePing(const Ping& ping) {
  ByteWriter w;
  w.Put<uint32_t>(ping.sender);
  w.PutBytes(ping.manager_state.data(), ping.manager_state.size());
  return w.Take();
}

Result<Ping> DecodePing(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "ping");
  Ping ping;
  ASSIGN_OR_RETURN(ping.sender, r.Get<uint32_t>());
  if (r.remaining() > kMaxHandoverState)
    return Corruption("ping: a manager state of " + std::to_string(r.remaining()) +
                      " bytes exceeds " + std::to_string(kMaxHandoverState));
  ASSIGN_OR_RETURN(auto state, r.GetBytes(r.remaining()));
  ping.manager_state.assign(state.begin(), state.end());
  return ping;
}

std::vector<std::byte> EncodeHandoverRequest(const HandoverRequest& request) {
  ByteWriter w;
  w.Put<uint64_t>(request.epoch);
  w.Put<uint32_t>(request.to);
  return w.Take();
}

Result<HandoverRequest> DecodeHandoverRequest(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "metadata handover request");
  HandoverRequest request;
  ASSIGN_OR_RETURN(request.epoch, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(request.to, r.Get<uint32_t>());
  if (r.remaining() != 0) return Corruption("metadata handover request: trailing bytes");
  return request;
}

std::vector<std::byte> EncodeHandover(const Handover& handover) {
  ByteWriter w;
  w.Put<uint32_t>(static_cast<uint32_t>(handover.manager_state.size()));
  w.PutBytes(handover.manager_state.data(), handover.manager_state.size());
  w.Put<uint32_t>(static_cast<uint32_t>(handover.configs.size()));
  for (const chain::ChainConfig& c : handover.configs) {
    const std::vector<std::byte> config = chain::EncodeConfig(c);
    w.Put<uint32_t>(static_cast<uint32_t>(config.size()));
    w.PutBytes(config.data(), config.size());
  }
  w.Put<uint32_t>(static_cast<uint32_t>(handover.answered.size()));
  for (const AnsweredAgo& a : handover.answered) {
    w.Put<uint32_t>(a.node);
    w.Put<int64_t>(a.ms_ago);
  }
  return w.Take();
}

Result<Handover> DecodeHandover(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "metadata handover");
  Handover handover;
  ASSIGN_OR_RETURN(uint32_t state_size, r.Get<uint32_t>());
  if (state_size > kMaxHandoverState)
    return Corruption("metadata handover: a manager state of " + std::to_string(state_size) +
                      " bytes exceeds " + std::to_string(kMaxHandoverState));
  ASSIGN_OR_RETURN(auto state, r.GetBytes(state_size));
  handover.manager_state.assign(state.begin(), state.end());
  ASSIGN_OR_RETURN(uint32_t n, r.Get<uint32_t>());
  if (n > kMaxHandoverConfigs)
    return Corruption("metadata handover: " + std::to_string(n) + " chain versions exceed " +
                      std::to_string(kMaxHandoverConfigs));
  for (uint32_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(uint32_t size, r.Get<uint32_t>());
    ASSIGN_OR_RETURN(auto config, r.GetBytes(size));
    ASSIGN_OR_RETURN(chain::ChainConfig c, chain::DecodeConfig(config));
    handover.configs.push_back(std::move(c));
  }
  ASSIGN_OR_RETURN(uint32_t m, r.Get<uint32_t>());
  if (m > kMaxHandoverAnswered)
    return Corruption("metadata handover: " + std::to_string(m) + " answered nodes exceed " +
                      std::to_string(kMaxHandoverAnswered));
  for (uint32_t i = 0; i < m; ++i) {
    AnsweredAgo a;
    ASSIGN_OR_RETURN(a.node, r.Get<uint32_t>());
    ASSIGN_OR_RETURN(a.ms_ago, r.Get<int64_t>());
    if (a.ms_ago < -kMaxAnsweredAheadMs)
      return Corruption("metadata handover: the age of node " + std::to_string(a.node) +
                        "'s answer, " + std::to_string(a.ms_ago) + " ms, lies more than " +
                        std::to_string(kMaxAnsweredAheadMs) + " ms in the future");
    handover.answered.push_back(a);
  }
  if (r.remaining() != 0) return Corruption("metadata handover: trailing bytes");
  return handover;
}

void PutStat(ByteWriter& w, const FileStat& s) {
  w.PutString(s.path);
  w.Put<uint64_t>(s.ino);
  w.Put<uint8_t>(static_cast<uint8_t>((s.is_dir ? 1 : 0) | (s.sealed ? 2 : 0)));
  w.Put<uint64_t>(s.size);
  w.Put<uint32_t>(s.chunk_size);
  w.Put<int64_t>(s.mtime_ns);
}

Result<FileStat> GetStat(ByteReader& r) {
  FileStat s;
  ASSIGN_OR_RETURN(s.path, r.GetString(kMaxPath));
  ASSIGN_OR_RETURN(s.ino, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(uint8_t flags, r.Get<uint8_t>());
  s.is_dir = flags & 1;
  s.sealed = flags & 2;
  ASSIGN_OR_RETURN(s.size, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(s.chunk_size, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(s.mtime_ns, r.Get<int64_t>());
  return s;
}

std::vector<std::byte> EncodeFsck(const FsckReport& report) {
  ByteWriter w;
  w.Put<uint64_t>(report.files);
  w.Put<uint64_t>(report.dirs);
  w.Put<uint64_t>(report.chunks);
  w.Put<uint64_t>(report.orphan_chunks);
  const size_t n = std::min<size_t>(report.problems.size(), 10000);
  w.Put<uint32_t>(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) w.PutString(report.problems[i].substr(0, 4096));
  return w.Take();
}

Result<FsckReport> DecodeFsck(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "fsck report");
  FsckReport report;
  ASSIGN_OR_RETURN(report.files, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(report.dirs, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(report.chunks, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(report.orphan_chunks, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(uint32_t n, r.Get<uint32_t>());
  if (n > 10000) return Corruption("fsck report: too many problems");
  for (uint32_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(std::string p, r.GetString(4096));
    report.problems.push_back(std::move(p));
  }
  return report;
}

Result<std::string> GetPath(ByteReader& r) {
  ASSIGN_OR_RETURN(std::string path, r.GetString(kMaxPath));
  RETURN_IF_ERROR(ValidatePath(path));
  return path;
}

}  // namespace rt::iofs::wire
