// The CPU backend's wire formats (docs/formats/comm_wire.md): the 32-byte header in front of
// every payload on a data link, and the bootstrap/control frames (base/frame.h frames).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"
#include "comm/communicator.h"

namespace rt::comm::tcp {

inline constexpr uint32_t kDataMagic = 0x44435452;  // "RTCD"
inline constexpr uint8_t kDataVersion = 1;
inline constexpr size_t kDataHeaderSize = 32;

// What a sender says about the payload that follows; the receiver checks it against what it
// expects for the same op, so ranks that disagree (count, dtype, op, root, order) fail cleanly.
struct DataHeader {
  OpKind kind = OpKind::kAllReduce;
  DType dtype = DType::kU8;
  uint8_t reduce_op = 0;  // ReduceOp, 0 when the op does not reduce
  uint32_t seq = 0;       // collective number on this communicator (p2p: per-pair send number)
  uint32_t root_or_tag = 0;
  uint64_t count = 0;  // the op's element count as issued (total for AllGatherV)
  uint64_t bytes = 0;  // payload bytes that follow this header
  bool operator==(const DataHeader&) const = default;
};

std::array<std::byte, kDataHeaderSize> EncodeDataHeader(const DataHeader& h);
// Checks magic, version and field ranges (kind, dtype, reduce op); bytes ≤ max_bytes.
// Errors: Corruption (magic/version/ranges), ProtocolError (bytes over the limit).
Result<DataHeader> DecodeDataHeader(std::span<const std::byte> bytes, uint64_t max_bytes);
// "all_reduce #5 count 100 f32 sum root/tag 0 (400 bytes)"
std::string DescribeHeader(const DataHeader& h);

// Frame types on bootstrap and control connections.
enum FrameType : uint16_t {
  kHello = 1,        // first frame on every peer connection: nonce u64, rank u32, purpose u8
  kReady = 2,        // bootstrap finished on the sender (empty)
  kGoodbye = 3,      // the sender destroys the communicator gracefully (empty)
  kAbortNotice = 4,  // the sender's communicator failed: u32 length + reason
};
// Purpose byte of a hello: control, or data connection k as kData + k.
enum Purpose : uint8_t { kControl = 0, kData = 1 };
inline constexpr int kMaxDataConnections = 8;

struct Hello {
  uint64_t nonce = 0;
  uint32_t rank = 0;
  uint8_t purpose = kControl;
};
std::vector<std::byte> EncodeHello(const Hello& h);
Result<Hello> DecodeHello(std::span<const std::byte> payload);

}  // namespace rt::comm::tcp
