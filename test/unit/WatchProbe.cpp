// Comm::watch under MPI, the watchdog over a wait outside the communicator's own calls
// (the host waiting for a GPU's queue, where NCCL's collectives hang), met by a roll call
// in each of its three ways. Run under `mpirun -n 2`: rank 0 waits for a queue that
// never drains, calling watch() as the CUDA backend does, and rank 1, by MODE:
//   waits  waits in an all-reduce: rank 0's watchdog (3 s) calls the roll, rank 1 answers
//   stops  stops (SIGSTOP) first: rank 0's roll names it as the rank that did not answer
//   calls  waits in an all-reduce under the shorter timeout: its watchdog calls the roll,
//          and rank 0 answers from its stalled queue
#include "comm/Comm.h"
#include "core/Poll.h"

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

int main(int argc, char **argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "waits" && mode != "stops" && mode != "calls") {
    std::fprintf(stderr, "usage: watch_probe waits|stops|calls (under mpirun -n 2)\n");
    return 2;
  }
  std::unique_ptr<mt::Comm> comm;
  if (mt::Status s = mt::makeMpiComm(mt::GridShape{2, 1, 1, 1}, comm); !s.ok()) {
    std::fprintf(stderr, "watch_probe: %s\n", s.message().c_str());
    return 2;
  }
  const int rank = comm->position().worldRank();
  const bool caller = (rank == 0) == (mode != "calls");
  comm->setWatchdog(caller ? 3 : 60);
  comm->setActivity("the probe");
  if (rank == 0)
    mt::pollUntil([] { return false; },
                  [&](double waited) { comm->watch("a queue that never drains", waited); });
  if (mode == "stops")
    std::raise(SIGSTOP);
  double value = 1;
  if (mt::Status s = comm->allReduceSum(mt::Group::Tensor, value); !s.ok())
    std::fprintf(stderr, "watch_probe: %s\n", s.message().c_str());
  return 1; // not reached: the watchdog ends the job
}
