// Waiting by polling, so that a wait can be watched: the communicators' waits for
// messages and collectives, and the CUDA backend's waits for its queue.
#ifndef MT_RUNTIME_CORE_POLL_H
#define MT_RUNTIME_CORE_POLL_H

#include <sched.h>
#include <time.h>

#include <chrono>
#include <cstdint>

namespace mt {

/// Calls `done()` until it returns true. Every 256 polls that were not done, calls
/// `waiting(seconds so far)` and lets the other processes of the machine run: a yield
/// during the first second, then a 0.1 ms sleep.
template <typename Done, typename Waiting> void pollUntil(Done &&done, Waiting &&waiting) {
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t polls = 0; !done(); ++polls) {
    if (polls % 256 != 255)
      continue;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    waiting(waited);
    if (waited > 1.0) {
      timespec pause{0, 100000};
      nanosleep(&pause, nullptr);
    } else {
      sched_yield();
    }
  }
}

} // namespace mt

#endif
