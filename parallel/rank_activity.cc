#include "parallel/rank_activity.h"

#include <iterator>

#include "comm/communicator.h"
#include "parallel/layout.h"

namespace rt::parallel {

std::vector<GroupBytes> GroupTraffic(const ProcessGroups& g) {
  const comm::Communicator* groups[] = {g.world,
                                        g.tp.get(),
                                        g.dp_shard.get(),
                                        g.dp_replicate.get(),
                                        g.pp_forward.get(),
                                        g.pp_backward.get(),
                                        g.embedding.get()};
  static_assert(std::size(groups) == kProcessGroupNames.size());
  std::vector<GroupBytes> out;
  for (size_t i = 0; i < kProcessGroupNames.size(); ++i) {
    if (groups[i] == nullptr) continue;
    const comm::OpBytes total = groups[i]->stats().Total();
    out.push_back({std::string(kProcessGroupNames[i]), total.bytes_sent, total.bytes_received});
  }
  return out;
}

}  // namespace rt::parallel
