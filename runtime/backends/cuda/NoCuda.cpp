// A build without the CUDA toolkit: the CUDA backend and NCCL are absent, and say so.
#include "backends/Backend.h"
#include "comm/Comm.h"

namespace mt {

int cudaDevices() { return 0; }

Status makeCudaBackend(int, std::unique_ptr<Backend> &) {
  return Status::failure("this build has no CUDA backend (the CUDA toolkit was not found)");
}

Status makeNcclComm(std::unique_ptr<Comm> &, bool) {
  return Status::failure("this build has no NCCL communicator");
}

} // namespace mt
