// Randomised tests draw a fresh seed per run, or take the one `variable` names, and
// print it first (to stderr, so that a run that crashes can still be replayed).
#ifndef MT_TEST_UNIT_TESTSEED_H
#define MT_TEST_UNIT_TESTSEED_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace mt::test {

inline uint64_t testSeed(const char *variable = "MT_TEST_SEED") {
  const char *fixed = std::getenv(variable);
  const uint64_t seed = fixed ? std::strtoull(fixed, nullptr, 10)
                              : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  std::fprintf(stderr, "seed %llu (%s=%llu replays it)\n", static_cast<unsigned long long>(seed),
               variable, static_cast<unsigned long long>(seed));
  return seed;
}

} // namespace mt::test

#endif
