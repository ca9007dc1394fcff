#include "elastic/membership/etcd_values.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "elastic/membership/etcd_client.h"

namespace rt::elastic::membership {
namespace {

using Json = nlohmann::json;

// `admitted` is written only where it is known (a view's members; not a node's own key).
Json MemberJson(const Member& m) {
  Json j = {{"id", m.id}, {"address", m.address}, {"incarnation", m.incarnation}};
  if (m.admitted != 0) j["admitted"] = m.admitted;
  return j;
}

Result<Member> MemberFromJson(const Json& j, std::string_view key) {
  if (!j.is_object() || !j.contains("id") || !j["id"].is_number_unsigned() ||
      !j.contains("address") || !j["address"].is_string() || !j.contains("incarnation") ||
      !j["incarnation"].is_number_unsigned() || j["id"].get<uint64_t>() == 0 ||
      (j.contains("admitted") && !j["admitted"].is_number_unsigned()))
    return Corruption("etcd key " + std::string(key) +
                      ": not a member {id ≥ 1, address, incarnation[, admitted]}");
  return Member{j["id"].get<uint64_t>(), j["address"].get<std::string>(),
                j["incarnation"].get<uint64_t>(), j.value("admitted", uint64_t{0})};
}

Json Parse(std::string_view text) {
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace

std::string EncodeMemberValue(const Member& member) { return MemberJson(member).dump(); }

Result<Member> DecodeMemberValue(std::string_view text, std::string_view key) {
  return MemberFromJson(Parse(text), key);
}

std::string EncodeViewValue(const View& view) {
  Json members = Json::array();
  for (const Member& m : view.members) members.push_back(MemberJson(m));
  return Json{{"generation", view.generation}, {"members", std::move(members)}}.dump();
}

Result<View> DecodeViewValue(std::string_view text, std::string_view key) {
  const Json j = Parse(text);
  if (!j.is_object() || !j.contains("generation") || !j["generation"].is_number_unsigned() ||
      !j.contains("members") || !j["members"].is_array())
    return Corruption("etcd key " + std::string(key) + ": not a view {generation, members}");
  View view;
  view.generation = j["generation"].get<uint64_t>();
  if (view.generation == 0 || j["members"].empty())
    return Corruption("etcd key " + std::string(key) +
                      ": a view has a generation ≥ 1 and at least one member");
  for (const Json& m : j["members"]) {
    ASSIGN_OR_RETURN(Member member, MemberFromJson(m, key));
    if (member.admitted > view.generation)
      return Corruption("etcd key " + std::string(key) + ": node " + std::to_string(member.id) +
                        " admitted by generation " + std::to_string(member.admitted) +
                        " of a view of generation " + std::to_string(view.generation));
    view.members.push_back(std::move(member));
  }
  std::sort(view.members.begin(), view.members.end(),
            [](const Member& a, const Member& b) { return a.id < b.id; });
  for (size_t i = 1; i < view.members.size(); ++i)
    if (view.members[i].id == view.members[i - 1].id)
      return Corruption("etcd key " + std::string(key) + ": node " +
                        std::to_string(view.members[i].id) + " is in the view twice");
  return view;
}

std::string EncodeStateValue(const ReplicatedState& state) {
  return Json{{"version", state.version}, {"blob", etcd::Base64Encode(state.blob)}}.dump();
}

Result<ReplicatedState> DecodeStateValue(std::string_view text, std::string_view key) {
  const Json j = Parse(text);
  if (!j.is_object() || !j.contains("version") || !j["version"].is_number_unsigned() ||
      !j.contains("blob") || !j["blob"].is_string())
    return Corruption("etcd key " + std::string(key) + ": not a replicated state {version, blob}");
  std::optional<std::string> blob = etcd::Base64Decode(j["blob"].get<std::string>());
  if (!blob) return Corruption("etcd key " + std::string(key) + ": blob is not base64");
  return ReplicatedState{j["version"].get<uint64_t>(), std::move(*blob)};
}

}  // namespace rt::elastic::membership
