// A planned stop as a worker learns it from its daemon (docs/daemon.md "Planned changes lose
// nothing"): the step after which every rank stops, and what it must leave behind.
#pragma once

#include <cstdint>

namespace rt::parallel {

struct PlannedStop {
  // The step after which to stop; INT64_MAX: no stop known here.
  int64_t step = INT64_MAX;
  // The memory snapshot of that step is enough (every member stays, so the snapshots stay: a
  // node joining): no checkpoint is saved unless the snapshot fails.
  bool snapshot = false;
};

}  // namespace rt::parallel
