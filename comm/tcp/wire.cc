#include "comm/tcp/wire.h"

#include <cstring>

#include "base/bytes.h"

namespace rt::comm::tcp {
namespace {
template <typename T>
void Put(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T Get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
}  // namespace

std::array<std::byte, kDataHeaderSize> EncodeDataHeader(const DataHeader& h) {
  std::array<std::byte, kDataHeaderSize> out{};
  Put<uint32_t>(out.data(), kDataMagic);
  Put<uint8_t>(out.data() + 4, kDataVersion);
  Put<uint8_t>(out.data() + 5, static_cast<uint8_t>(h.kind));
  Put<uint8_t>(out.data() + 6, static_cast<uint8_t>(h.dtype));
  Put<uint8_t>(out.data() + 7, h.reduce_op);
  Put<uint32_t>(out.data() + 8, h.seq);
  Put<uint32_t>(out.data() + 12, h.root_or_tag);
  Put<uint64_t>(out.data() + 16, h.count);
  Put<uint64_t>(out.data() + 24, h.bytes);
  return out;
}

Result<DataHeader> DecodeDataHeader(std::span<const std::byte> b, uint64_t max_bytes) {
  if (b.size() < kDataHeaderSize) return OutOfRange("comm data header needs 32 bytes");
  if (Get<uint32_t>(b.data()) != kDataMagic) return Corruption("comm data header: bad magic");
  if (Get<uint8_t>(b.data() + 4) != kDataVersion)
    return Corruption("comm data header: unsupported version " +
                      std::to_string(Get<uint8_t>(b.data() + 4)));
  DataHeader h;
  uint8_t kind = Get<uint8_t>(b.data() + 5), dtype = Get<uint8_t>(b.data() + 6);
  h.reduce_op = Get<uint8_t>(b.data() + 7);
  if (kind >= kOpKindCount)
    return Corruption("comm data header: bad op kind " + std::to_string(kind));
  if (dtype > static_cast<uint8_t>(DType::kU8))
    return Corruption("comm data header: bad dtype " + std::to_string(dtype));
  if (h.reduce_op > static_cast<uint8_t>(ReduceOp::kMin))
    return Corruption("comm data header: bad reduce op " + std::to_string(h.reduce_op));
  h.kind = static_cast<OpKind>(kind);
  h.dtype = static_cast<DType>(dtype);
  h.seq = Get<uint32_t>(b.data() + 8);
  h.root_or_tag = Get<uint32_t>(b.data() + 12);
  h.count = Get<uint64_t>(b.data() + 16);
  h.bytes = Get<uint64_t>(b.data() + 24);
  if (h.bytes > max_bytes)
    return Status(StatusCode::kProtocolError, "comm data header announces " +
                                                  std::to_string(h.bytes) + " bytes, expected " +
                                                  std::to_string(max_bytes));
  return h;
}

std::string DescribeHeader(const DataHeader& h) {
  return std::string(OpKindName(h.kind)) + " #" + std::to_string(h.seq) + " count " +
         std::to_string(h.count) + " " + std::string(DTypeName(h.dtype)) + " " +
         std::string(ReduceOpName(static_cast<ReduceOp>(h.reduce_op))) + " root/tag " +
         std::to_string(h.root_or_tag) + " (" + std::to_string(h.bytes) + " bytes)";
}

std::vector<std::byte> EncodeHello(const Hello& h) {
  ByteWriter w;
  w.Put<uint64_t>(h.nonce);
  w.Put<uint32_t>(h.rank);
  w.Put<uint8_t>(h.purpose);
  return w.Take();
}

Result<Hello> DecodeHello(std::span<const std::byte> payload) {
  ByteReader r(payload, "comm hello");
  Hello h;
  ASSIGN_OR_RETURN(h.nonce, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(h.rank, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(h.purpose, r.Get<uint8_t>());
  if (h.purpose >= kData + kMaxDataConnections)
    return Corruption("comm hello: bad purpose " + std::to_string(h.purpose));
  if (r.remaining() != 0) return Corruption("comm hello: trailing bytes");
  return h;
}

}  // namespace rt::comm::tcp
