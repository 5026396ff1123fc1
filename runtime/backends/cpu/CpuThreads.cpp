#include "backends/cpu/CpuThreads.h"

#include "comm/Comm.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mt {

CpuThreads shareOfCpus(const std::vector<cpu_set_t> &host, const cpu_set_t &mine,
                       long onlineCpus) {
  double share = 0;
  int cpus = 0;
  size_t sharers = 1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mine))
      continue;
    size_t k = 0;
    for (const cpu_set_t &other : host)
      k += CPU_ISSET(cpu, &other) ? 1 : 0;
    share += 1.0 / static_cast<double>(k);
    sharers = std::max(sharers, k);
    ++cpus;
  }
  CpuThreads t;
  t.count = std::max(1, static_cast<int>(share + 1e-9));
  const std::string some = std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs");
  if (sharers > 1)
    t.reason = some + " shared by " + std::to_string(sharers) + " ranks on this host";
  else if (cpus < onlineCpus)
    t.reason = "the " + some + " bound to this rank";
  else
    t.reason = "this host's " + some;
  return t;
}

namespace {

/// A positive count: the whole of `value`, or the first of a list ("4,2", as OpenMP
/// reads OMP_NUM_THREADS) where `list`; otherwise 0.
int positiveCount(const char *value, bool list) {
  if (!value || !*value)
    return 0;
  char *end = nullptr;
  long n = std::strtol(value, &end, 10);
  const bool whole = *end == '\0' || (list && *end == ',');
  return end != value && whole && n > 0 && n <= 1 << 20 ? static_cast<int>(n) : 0;
}

} // namespace

Status useCpuThreads(Comm &comm, CpuThreads &chosen) {
  // Every rank takes part in the gather, whichever rule decides its own count.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0)
    for (long cpu = 0; cpu < std::min<long>(online, CPU_SETSIZE); ++cpu)
      CPU_SET(cpu, &mine);
  std::vector<std::string> gathered;
  MT_TRY(comm.gatherOnHost(std::string(reinterpret_cast<const char *>(&mine), sizeof mine),
                           gathered));
  std::vector<cpu_set_t> host(gathered.size());
  for (size_t r = 0; r < gathered.size(); ++r) {
    if (gathered[r].size() != sizeof(cpu_set_t))
      return Status::failure("a rank on this host sent a CPU set of another size");
    std::memcpy(&host[r], gathered[r].data(), sizeof(cpu_set_t));
  }

  const CpuThreads share = shareOfCpus(host, mine, online);
  const char *omp = std::getenv("OMP_NUM_THREADS");
  if (int count = positiveCount(omp, /*list=*/true)) {
    chosen = {count, std::string("OMP_NUM_THREADS=") + omp};
  } else if (int perTask = positiveCount(std::getenv("SLURM_CPUS_PER_TASK"), false)) {
    // An allocation's count can outlive it: a step that srun gives fewer CPUs than its
    // job's --cpus-per-task (Slurm 22.05's srun does not read it), or mpirun inside it.
    chosen = perTask <= share.count
                 ? CpuThreads{perTask, "SLURM_CPUS_PER_TASK=" + std::to_string(perTask)}
                 : CpuThreads{share.count, share.reason + ", fewer than SLURM_CPUS_PER_TASK=" +
                                               std::to_string(perTask)};
  } else {
    chosen = share;
  }
  omp_set_num_threads(chosen.count);

  // Whether every rank took as many: Σc and Σc² over the world.
  double sum = chosen.count, squares = double(chosen.count) * chosen.count;
  MT_TRY(comm.allReduceSumWorld(sum));
  MT_TRY(comm.allReduceSumWorld(squares));
  const double ranks = comm.position().worldSize();
  chosen.uniform = ranks * squares == sum * sum;
  chosen.mean = sum / ranks;
  return Status::success();
}

std::string CpuThreads::summary() const {
  std::string text = cat(count, count == 1 ? " thread" : " threads");
  if (uniform)
    return cat(text, " per rank (", reason, ")");
  char average[32];
  std::snprintf(average, sizeof average, "%.1f", mean);
  return cat(text, " on rank 0 (", reason, "), ", average, " per rank on average");
}

} // namespace mt
