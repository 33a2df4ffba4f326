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

}  // namespace

Stamp now_stamp() {
  return Stamp{read(CLOCK_MONOTONIC), read(CLOCK_REALTIME)};
}

Stamp stamp_of(MonotonicTime t) {
  const Stamp now = now_stamp();
  const Nanoseconds mono = t.time_since_epoch();
  return Stamp{mono, now.realtime + (mono - now.monotonic)};
}

}  // namespace jitterd
