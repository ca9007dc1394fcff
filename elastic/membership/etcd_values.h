// The values the etcd membership keeps under its keys (docs/formats/membership_etcd.md): a
// member, the view and the replicated state, as JSON objects. The decoders check every field:
// these are bytes that any client of the etcd cluster could have written.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "elastic/membership.h"

namespace rt::elastic::membership {

// {"id": ID, "address": "host:port", "incarnation": N}.
std::string EncodeMemberValue(const Member& member);
// Errors: Corruption naming `key` when `text` is not such an object with id ≥ 1.
Result<Member> DecodeMemberValue(std::string_view text, std::string_view key);

// {"generation": G, "members": [member, ...]}, members sorted by id.
std::string EncodeViewValue(const View& view);
// Errors: Corruption naming `key` when `text` is not such an object, its generation is 0, it
// has no member, a member is malformed, or two members share an id. The members come back sorted by
// id.
Result<View> DecodeViewValue(std::string_view text, std::string_view key);

// {"version": V, "blob": "BASE64"}.
std::string EncodeStateValue(const ReplicatedState& state);
// Errors: Corruption naming `key` when `text` is not such an object or the blob is not base64.
Result<ReplicatedState> DecodeStateValue(std::string_view text, std::string_view key);

}  // namespace rt::elastic::membership
