// Builds without CUDA: the NCCL factory reports that the backend is not compiled in.
#include "comm/communicator.h"

namespace rt::comm {

Result<std::unique_ptr<Communicator>> NewNcclCommunicator(CommOptions, int) {
  return Unimplemented("this build has no NCCL backend (configure with -DRINGTRAIN_CUDA=ON)");
}

bool NcclAvailable() { return false; }

}  // namespace rt::comm
