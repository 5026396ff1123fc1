// How many threads the CPU backend's kernels use on each rank: what the launcher allotted
// the rank, so that ranks sharing a host do not oversubscribe its cores.
#ifndef MT_RUNTIME_BACKENDS_CPU_CPUTHREADS_H
#define MT_RUNTIME_BACKENDS_CPU_CPUTHREADS_H

#include "core/Status.h"

#include <sched.h>

#include <string>
#include <vector>

namespace mt {

class Comm;

struct CpuThreads {
  int count = 1;
  std::string reason; // "OMP_NUM_THREADS=4", "2 CPUs shared by 4 ranks on this host", ...
  bool uniform = true; // every rank took `count`
  double mean = 1;     // over the ranks
  /// "1 thread per rank (2 CPUs shared by 4 ranks on this host)", or, where the ranks
  /// differ, this rank's count and the mean.
  std::string summary() const;
};

/// A rank's share of the CPUs the ranks of its host may run on (`host`: each one's
/// affinity mask, `mine` among them): each of its CPUs counts 1/k where k ranks may run
/// on it; at least 1.
CpuThreads shareOfCpus(const std::vector<cpu_set_t> &host, const cpu_set_t &mine,
                       long onlineCpus);

/// OMP_NUM_THREADS where the user set it (a valid count); else srun's --cpus-per-task
/// (SLURM_CPUS_PER_TASK), at most this rank's share of its CPUs; else that share, among
/// the ranks on its host (gathered through `comm`). Applies the count to the kernels;
/// every rank of the world calls it.
Status useCpuThreads(Comm &comm, CpuThreads &chosen);

} // namespace mt

#endif
