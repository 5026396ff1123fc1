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
  CpuThreads t = shareOfCpus(host, 2, 2);
  EXPECT_EQ(t.count, 1);
  EXPECT_EQ(t.reason, "2 CPUs shared by 4 ranks on this host");
  // Two unbound ranks on sixteen: eight each.
  host.assign(2, cpus({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(shareOfCpus(host, 0, 16).count, 8);
}

TEST(CpuThreads, BoundRanksUseTheirOwnCpus) {
  std::vector<cpu_set_t> host = {cpus({0, 1, 2, 3}), cpus({4, 5, 6, 7})};
  CpuThreads t = shareOfCpus(host, 1, 8);
  EXPECT_EQ(t.count, 4);
  EXPECT_EQ(t.reason, "the 4 CPUs bound to this rank");
  // Alone on the whole host.
  t = shareOfCpus({cpus({0, 1, 2})}, 0, 3);
  EXPECT_EQ(t.count, 3);
  EXPECT_EQ(t.reason, "this host's 3 CPUs");
}

TEST(CpuThreads, OverlappingBindingsCountEachCpuOnce) {
  // Socket binding: ranks 0 and 1 share CPUs 0-3, rank 2 has 4-7 alone.
  std::vector<cpu_set_t> host = {cpus({0, 1, 2, 3}), cpus({0, 1, 2, 3}), cpus({4, 5, 6, 7})};
  EXPECT_EQ(shareOfCpus(host, 0, 8).count, 2);
  EXPECT_EQ(shareOfCpus(host, 2, 8).count, 4);
  // Rank 0 on CPUs 0-2, rank 1 on 2-3: 2.5 and 1.5 rounded down.
  host = {cpus({0, 1, 2}), cpus({2, 3})};
  EXPECT_EQ(shareOfCpus(host, 0, 4).count, 2);
  EXPECT_EQ(shareOfCpus(host, 1, 4).count, 1);
  EXPECT_EQ(shareOfCpus(host, 1, 4).reason, "2 CPUs shared by 2 ranks on this host");
}

TEST(CpuThreads, SrunCpusPerTaskIsApplied) {
  // OMP_NUM_THREADS decides before SLURM_CPUS_PER_TASK: out of the way here.
  const char *omp = std::getenv("OMP_NUM_THREADS");
  const std::string saved = omp ? omp : "";
  unsetenv("OMP_NUM_THREADS");
  std::unique_ptr<Comm> comm = makeLocalComm();
  setenv("SLURM_CPUS_PER_TASK", "3", 1);
  CpuThreads t;
  Status s = useCpuThreads(*comm, t);
  unsetenv("SLURM_CPUS_PER_TASK");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(t.count, 3);
  EXPECT_EQ(t.reason, "SLURM_CPUS_PER_TASK=3");
  EXPECT_EQ(omp_get_max_threads(), 3);
  // A value that is not a count is ignored.
  setenv("SLURM_CPUS_PER_TASK", "3x", 1);
  s = useCpuThreads(*comm, t);
  unsetenv("SLURM_CPUS_PER_TASK");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_NE(t.reason, "SLURM_CPUS_PER_TASK=3");
  EXPECT_EQ(omp_get_max_threads(), t.count);
  if (omp)
    setenv("OMP_NUM_THREADS", saved.c_str(), 1);
}

} // namespace
} // namespace mt
