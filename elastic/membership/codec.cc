#include "elastic/membership/codec.h"

#include "base/bytes.h"
#include "base/crc32c.h"

namespace rt::elastic::membership {
namespace {

constexpr uint32_t kMessageMagic = 0x424D5452;  // "RTMB" little-endian
constexpr uint32_t kStateMagic = 0x534D5452;    // "RTMS" little-endian
// Version 2 added Member::admitted; a state file of version 1 still loads (admitted 0).
constexpr uint16_t kFormatVersion = 2;
constexpr uint16_t kFirstAdmittedVersion = 2;
constexpr uint8_t kHasValue = 1;
constexpr uint8_t kLastKind = static_cast<uint8_t>(Message::Kind::kJoin);

void PutBallot(ByteWriter& w, const Ballot& b) {
  w.Put<uint64_t>(b.round);
  w.Put<uint64_t>(b.node);
}

Result<Ballot> GetBallot(ByteReader& r) {
  Ballot b;
  ASSIGN_OR_RETURN(b.round, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(b.node, r.Get<uint64_t>());
  return b;
}

void PutEntry(ByteWriter& w, const Entry& e) {
  w.Put<uint64_t>(e.slot);
  w.Put<uint64_t>(e.view.generation);
  w.Put<uint32_t>(static_cast<uint32_t>(e.view.members.size()));
  for (const Member& m : e.view.members) {
    w.Put<uint64_t>(m.id);
    w.PutString(m.address);
    w.Put<uint64_t>(m.incarnation);
    w.Put<uint64_t>(m.admitted);
  }
  w.Put<uint64_t>(e.state.version);
  w.PutString(e.state.blob);
  w.Put<uint32_t>(static_cast<uint32_t>(e.recent.size()));
  for (const StateChange& c : e.recent) {
    w.Put<uint64_t>(c.version);
    w.Put<uint64_t>(c.request.origin);
    w.Put<uint64_t>(c.request.id);
  }
}

// `version`: the format version of the bytes.
Result<Entry> GetEntry(ByteReader& r, const std::string& what, uint16_t version) {
  Entry e;
  ASSIGN_OR_RETURN(e.slot, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(e.view.generation, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(uint32_t count, r.Get<uint32_t>());
  if (count > kMaxMembers)
    return Corruption(what + ": " + std::to_string(count) + " members exceed " +
                      std::to_string(kMaxMembers));
  for (uint32_t i = 0; i < count; ++i) {
    Member m;
    ASSIGN_OR_RETURN(m.id, r.Get<uint64_t>());
    ASSIGN_OR_RETURN(m.address, r.GetString(kMaxAddress));
    ASSIGN_OR_RETURN(m.incarnation, r.Get<uint64_t>());
    if (version >= kFirstAdmittedVersion) {
      ASSIGN_OR_RETURN(m.admitted, r.Get<uint64_t>());
    }
    if (m.admitted > e.view.generation)
      return Corruption(what + ": member " + std::to_string(m.id) + " admitted by generation " +
                        std::to_string(m.admitted) + " of a view of generation " +
                        std::to_string(e.view.generation));
    if (m.id == 0 || (!e.view.members.empty() && e.view.members.back().id >= m.id))
      return Corruption(what + ": member ids not increasing at member " + std::to_string(i));
    e.view.members.push_back(std::move(m));
  }
  ASSIGN_OR_RETURN(e.state.version, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(e.state.blob, r.GetString(kMaxStateBlob));
  ASSIGN_OR_RETURN(uint32_t recent, r.Get<uint32_t>());
  if (recent > kRecentStateChanges)
    return Corruption(what + ": " + std::to_string(recent) + " recent state changes exceed " +
                      std::to_string(kRecentStateChanges));
  for (uint32_t i = 0; i < recent; ++i) {
    StateChange c;
    ASSIGN_OR_RETURN(c.version, r.Get<uint64_t>());
    ASSIGN_OR_RETURN(c.request.origin, r.Get<uint64_t>());
    ASSIGN_OR_RETURN(c.request.id, r.Get<uint64_t>());
    e.recent.push_back(c);
  }
  return e;
}

// Reads the magic and the version, which must be in [oldest, kFormatVersion]; returns the version.
Result<uint16_t> CheckHeader(ByteReader& r, uint32_t magic, uint16_t oldest,
                             const std::string& what) {
  ASSIGN_OR_RETURN(uint32_t got, r.Get<uint32_t>());
  if (got != magic) return Corruption(what + ": bad magic");
  ASSIGN_OR_RETURN(uint16_t version, r.Get<uint16_t>());
  if (version < oldest || version > kFormatVersion)
    return Corruption(what + ": unsupported version " + std::to_string(version));
  return version;
}

}  // namespace

std::vector<std::byte> EncodeMessage(const Message& m) {
  ByteWriter w;
  w.Put<uint32_t>(kMessageMagic);
  w.Put<uint16_t>(kFormatVersion);
  w.Put<uint8_t>(static_cast<uint8_t>(m.kind));
  w.Put<uint8_t>(m.value ? kHasValue : 0);
  w.Put<uint64_t>(m.from);
  w.Put<uint64_t>(m.to);
  w.PutString(m.from_address);
  w.Put<uint64_t>(m.from_incarnation);
  w.Put<uint64_t>(m.slot);
  PutBallot(w, m.ballot);
  PutBallot(w, m.accepted_ballot);
  w.Put<uint64_t>(m.subject);
  if (m.value) PutEntry(w, *m.value);
  return w.Take();
}

Result<Message> DecodeMessage(std::span<const std::byte> bytes) {
  const std::string what = "membership message";
  ByteReader r(bytes, what);
  // Members of a cluster run one version: a message of another is refused.
  ASSIGN_OR_RETURN(uint16_t version, CheckHeader(r, kMessageMagic, kFormatVersion, what));
  Message m;
  ASSIGN_OR_RETURN(uint8_t kind, r.Get<uint8_t>());
  if (kind == 0 || kind > kLastKind)
    return Corruption(what + ": unknown kind " + std::to_string(kind));
  m.kind = static_cast<Message::Kind>(kind);
  ASSIGN_OR_RETURN(uint8_t flags, r.Get<uint8_t>());
  if (flags & ~kHasValue) return Corruption(what + ": unknown flags " + std::to_string(flags));
  ASSIGN_OR_RETURN(m.from, r.Get<uint64_t>());
  if (m.from == 0) return Corruption(what + ": sender id 0");
  ASSIGN_OR_RETURN(m.to, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(m.from_address, r.GetString(kMaxAddress));
  ASSIGN_OR_RETURN(m.from_incarnation, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(m.slot, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(m.ballot, GetBallot(r));
  ASSIGN_OR_RETURN(m.accepted_ballot, GetBallot(r));
  ASSIGN_OR_RETURN(m.subject, r.Get<uint64_t>());
  if (flags & kHasValue) {
    ASSIGN_OR_RETURN(Entry e, GetEntry(r, what, version));
    m.value = std::move(e);
  }
  if (r.remaining() != 0)
    return Corruption(what + ": " + std::to_string(r.remaining()) + " trailing bytes");
  return m;
}

std::vector<std::byte> EncodeDurableState(const DurableState& state) {
  ByteWriter body;
  body.Put<uint64_t>(state.incarnation);
  PutEntry(body, state.decided);
  PutBallot(body, state.promised);
  PutBallot(body, state.accepted_ballot);
  body.Put<uint8_t>(state.accepted ? 1 : 0);
  if (state.accepted) PutEntry(body, *state.accepted);
  ByteWriter w;
  w.Put<uint32_t>(kStateMagic);
  w.Put<uint16_t>(kFormatVersion);
  w.Put<uint16_t>(0);  // reserved
  w.Put<uint32_t>(static_cast<uint32_t>(body.size()));
  w.Put<uint32_t>(Crc32c(body.bytes()));
  w.PutBytes(body.bytes().data(), body.size());
  return w.Take();
}

Result<DurableState> DecodeDurableState(std::span<const std::byte> bytes) {
  const std::string what = "membership state";
  ByteReader r(bytes, what);
  // A state file of version 1 (written before an upgrade) still loads.
  ASSIGN_OR_RETURN(uint16_t version, CheckHeader(r, kStateMagic, 1, what));
  ASSIGN_OR_RETURN(uint16_t reserved, r.Get<uint16_t>());
  if (reserved != 0) return Corruption(what + ": reserved field is " + std::to_string(reserved));
  ASSIGN_OR_RETURN(uint32_t length, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint32_t crc, r.Get<uint32_t>());
  if (length != r.remaining())
    return Corruption(what + ": body length " + std::to_string(length) + " but " +
                      std::to_string(r.remaining()) + " bytes follow");
  ASSIGN_OR_RETURN(auto body_bytes, r.GetBytes(length));
  if (Crc32c(body_bytes) != crc) return Corruption(what + ": CRC32C mismatch");
  ByteReader body(body_bytes, what);
  DurableState state;
  ASSIGN_OR_RETURN(state.incarnation, body.Get<uint64_t>());
  ASSIGN_OR_RETURN(state.decided, GetEntry(body, what, version));
  ASSIGN_OR_RETURN(state.promised, GetBallot(body));
  ASSIGN_OR_RETURN(state.accepted_ballot, GetBallot(body));
  ASSIGN_OR_RETURN(uint8_t has_accepted, body.Get<uint8_t>());
  if (has_accepted > 1) return Corruption(what + ": bad accepted flag");
  if (has_accepted) {
    ASSIGN_OR_RETURN(Entry e, GetEntry(body, what, version));
    state.accepted = std::move(e);
  }
  if (body.remaining() != 0) return Corruption(what + ": trailing bytes in the body");
  return state;
}

}  // namespace rt::elastic::membership
