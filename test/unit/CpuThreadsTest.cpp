// The CPU backend's threads per rank: each rank's share of its host's CPUs, and the
// settings that override it.
#include "backends/cpu/CpuThreads.h"
#include "comm/Comm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <initializer_list>
#include <string>

namespace mt {
namespace {

cpu_set_t cpus(std::initializer_list<int> list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : list)
    CPU_SET(cpu, &set);
  return set;
}

TEST(CpuThreads, RanksSharingCpusSplitThem) {
  // Four unbound ranks on two CPUs (srun --overcommit): one thread each, not two.
  std::vector<cpu_set_t> host(4, cpus({0, 1}));
  CpuThreads t = shareOfCpus(host, host[2], 2);
  EXPECT_EQ(t.count, 1);
  EXPECT_EQ(t.reason, "2 CPUs shared by 4 ranks on this host");
  // Two unbound ranks on sixteen: eight each.
  host.assign(2, cpus({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(shareOfCpus(host, host[0], 16).count, 8);
}

TEST(CpuThreads, BoundRanksUseTheirOwnCpus) {
  std::vector<cpu_set_t> host = {cpus({0, 1, 2, 3}), cpus({4, 5, 6, 7})};
  CpuThreads t = shareOfCpus(host, host[1], 8);
  EXPECT_EQ(t.count, 4);
  EXPECT_EQ(t.reason, "the 4 CPUs bound to this rank");
  // Alone on the whole host.
  t = shareOfCpus({cpus({0, 1, 2})}, cpus({0, 1, 2}), 3);
  EXPECT_EQ(t.count, 3);
  EXPECT_EQ(t.reason, "this host's 3 CPUs");
}

TEST(CpuThreads, OverlappingBindingsCountEachCpuOnce) {
  // Socket binding: ranks 0 and 1 share CPUs 0-3, rank 2 has 4-7 alone.
  std::vector<cpu_set_t> host = {cpus({0, 1, 2, 3}), cpus({0, 1, 2, 3}), cpus({4, 5, 6, 7})};
  EXPECT_EQ(shareOfCpus(host, host[0], 8).count, 2);
  EXPECT_EQ(shareOfCpus(host, host[2], 8).count, 4);
  // Rank 0 on CPUs 0-2, rank 1 on 2-3: 2.5 and 1.5 rounded down.
  host = {cpus({0, 1, 2}), cpus({2, 3})};
  EXPECT_EQ(shareOfCpus(host, host[0], 4).count, 2);
  EXPECT_EQ(shareOfCpus(host, host[1], 4).count, 1);
  EXPECT_EQ(shareOfCpus(host, host[1], 4).reason, "2 CPUs shared by 2 ranks on this host");
}

/// Runs useCpuThreads with OMP_NUM_THREADS and SLURM_CPUS_PER_TASK as given (null:
/// unset), then puts the environment back.
CpuThreads chooseWith(const char *omp, const char *perTask) {
  const char *names[] = {"OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"};
  const char *values[] = {omp, perTask};
  std::string saved[2];
  bool had[2];
  for (int i = 0; i < 2; ++i) {
    const char *now = std::getenv(names[i]);
    had[i] = now != nullptr;
    saved[i] = now ? now : "";
    if (values[i])
      setenv(names[i], values[i], 1);
    else
      unsetenv(names[i]);
  }
  std::unique_ptr<Comm> comm = makeLocalComm();
  CpuThreads t;
  Status s = useCpuThreads(*comm, t);
  for (int i = 0; i < 2; ++i)
    if (had[i])
      setenv(names[i], saved[i].c_str(), 1);
    else
      unsetenv(names[i]);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(omp_get_max_threads(), t.count) << "the count was not applied";
  return t;
}

TEST(CpuThreads, OmpNumThreadsDecidesFirst) {
  CpuThreads t = chooseWith("1", "3");
  EXPECT_EQ(t.count, 1);
  EXPECT_EQ(t.reason, "OMP_NUM_THREADS=1");
  // OpenMP's nested list: the first level's count.
  t = chooseWith("2,1", nullptr);
  EXPECT_EQ(t.count, 2);
  EXPECT_EQ(t.summary(), "2 threads per rank (OMP_NUM_THREADS=2,1)");
  // A value OpenMP ignores is ignored here too, not reported as the reason.
  for (const char *bad : {"abc", "0", "-2", "4x"}) {
    t = chooseWith(bad, nullptr);
    EXPECT_EQ(t.reason.find("OMP_NUM_THREADS"), std::string::npos) << bad;
  }
}

TEST(CpuThreads, SrunCpusPerTaskAtMostTheShare) {
  CpuThreads own = chooseWith(nullptr, nullptr);
  CpuThreads t = chooseWith(nullptr, "1");
  EXPECT_EQ(t.count, 1);
  EXPECT_EQ(t.summary(), "1 thread per rank (SLURM_CPUS_PER_TASK=1)");
  // More than this process may run on (a job's count in a step srun gave fewer CPUs):
  // its share of the CPUs instead, saying so.
  t = chooseWith(nullptr, "4096");
  EXPECT_EQ(t.count, own.count);
  EXPECT_EQ(t.reason, own.reason + ", fewer than SLURM_CPUS_PER_TASK=4096");
  // Not a count: ignored.
  t = chooseWith(nullptr, "3x");
  EXPECT_EQ(t.reason.find("SLURM"), std::string::npos);
}

TEST(CpuThreads, RanksThatDifferAreSaidToDiffer) {
  CpuThreads t{2, "the 2 CPUs bound to this rank", false, 1.5};
  EXPECT_EQ(t.summary(), "2 threads on rank 0 (the 2 CPUs bound to this rank), 1.5 per rank "
                         "on average");
}

} // namespace
} // namespace mt
