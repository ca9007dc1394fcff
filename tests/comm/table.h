// The collective table shared by the in-process (threads) tests and the multi-process worker:
// every op, every dtype, the given counts, checked against a naive reference computed locally.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace rt::comm::testing {

struct TableOptions {
  std::vector<DType> dtypes;
  std::vector<size_t> counts;
  // Extra (count, dtype) cases run only for all-reduce, reduce-scatter and all-gather (1M+3).
  std::vector<std::pair<size_t, DType>> large;
  Deadline deadline = Deadline::AfterMs(120'000);
};

// Runs the table on `comm` (every rank of the group must call it with the same options).
// Returns OK or an error naming the op, dtype, count and first bad element.
Status RunCollectiveTable(Communicator& comm, const TableOptions& options);

std::vector<DType> AllDTypes();

}  // namespace rt::comm::testing
