#include "clock.hpp"

#include <ctime>

namespace jitterd {
namespace {

Nanoseconds read(clockid_t clock) {
  timespec ts{};
  // clock_gettime cannot fail for these two clocks with a valid pointer.
  clock_gettime(clock, &ts);
  return std::chrono::seconds(ts.tv_sec) + Nanoseconds(ts.tv_nsec);
}

// Reads that lie this close together are taken at once.
constexpr Nanoseconds kTightEnough = std::chrono::microseconds(20);
constexpr int kTries = 4;

}  // namespace

Stamp now_stamp() {
  // Two reads back to back can lie apart by a preemption: on a loaded host, and in a UML guest,
  // where each read is a syscall its host traps, by milliseconds (a fleet's deadline converted from
  // the wall clock with such a pair was 2 ms early in the bed). So realtime is read between two
  // monotonic reads and paired with their midpoint; of a few tries, the tightest is kept.
  Stamp best;
  Nanoseconds best_gap = Nanoseconds::max();
  for (int k = 0; k < kTries && best_gap > kTightEnough; ++k) {
    const Nanoseconds before = read(CLOCK_MONOTONIC);
    const Nanoseconds realtime = read(CLOCK_REALTIME);
    const Nanoseconds after = read(CLOCK_MONOTONIC);
    if (after - before < best_gap) {
      best_gap = after - before;
      best = Stamp{before + (after - before) / 2, realtime};
    }
  }
  return best;
}

Stamp stamp_of(MonotonicTime t) {
  const Stamp now = now_stamp();
  const Nanoseconds mono = t.time_since_epoch();
  return Stamp{mono, now.realtime + (mono - now.monotonic)};
}

}  // namespace jitterd
