// The value types of elastic/membership.h.
#include <algorithm>
#include <tuple>

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

std::vector<NodeId> View::EldestFirst() const {
  std::vector<const Member*> order;
  for (const Member& m : members) order.push_back(&m);
  std::sort(order.begin(), order.end(), [](const Member* a, const Member* b) {
    return std::tie(a->admitted, a->id) < std::tie(b->admitted, b->id);
  });
  std::vector<NodeId> ids;
  for (const Member* m : order) ids.push_back(m->id);
  return ids;
}

}  // namespace rt::elastic
