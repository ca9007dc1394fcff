// The value types of elastic/membership.h.
#include <algorithm>

#include "elastic/membership.h"

namespace rt::elastic {

bool View::Contains(NodeId node) const {
  return std::any_of(members.begin(), members.end(),
                     [node](const Member& m) { return m.id == node; });
}

std::vector<NodeId> View::Ids() const {
  std::vector<NodeId> ids;
  ids.reserve(members.size());
  for (const Member& m : members) ids.push_back(m.id);
  return ids;
}

}  // namespace rt::elastic
