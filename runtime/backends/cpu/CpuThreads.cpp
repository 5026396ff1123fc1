#include "backends/cpu/CpuThreads.h"

#include "comm/Comm.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace mt {

CpuThreads shareOfCpus(const std::vector<cpu_set_t> &host, size_t me, long onlineCpus) {
  const cpu_set_t &mine = host[me];
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

/// A positive count from the environment, or 0.
int positiveFromEnv(const char *name) {
  const char *value = std::getenv(name);
  if (!value || !*value)
    return 0;
  char *end = nullptr;
  long n = std::strtol(value, &end, 10);
  return *end == '\0' && n > 0 && n <= 1 << 20 ? static_cast<int>(n) : 0;
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
  size_t me = gathered.size();
  for (size_t r = 0; r < gathered.size(); ++r) {
    if (gathered[r].size() != sizeof(cpu_set_t))
      return Status::failure("a rank on this host sent a CPU set of another size");
    std::memcpy(&host[r], gathered[r].data(), sizeof(cpu_set_t));
    // Ranks with the same CPUs have the same share: the first of them stands for each.
    if (me == gathered.size() && CPU_EQUAL(&host[r], &mine))
      me = r;
  }
  if (me == gathered.size())
    return Status::failure("this rank's CPU set is missing from its host's");

  const char *omp = std::getenv("OMP_NUM_THREADS");
  if (omp && *omp) {
    // The OpenMP runtime has read it already.
    chosen.count = omp_get_max_threads();
    chosen.reason = std::string("OMP_NUM_THREADS=") + omp;
    return Status::success();
  }
  if (int perTask = positiveFromEnv("SLURM_CPUS_PER_TASK")) {
    chosen.count = perTask;
    chosen.reason = "SLURM_CPUS_PER_TASK=" + std::to_string(perTask);
  } else {
    chosen = shareOfCpus(host, me, online);
  }
  omp_set_num_threads(chosen.count);
  return Status::success();
}

} // namespace mt
