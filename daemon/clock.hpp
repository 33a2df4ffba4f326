#pragma once
// The two clocks every time in the protocol carries: CLOCK_MONOTONIC (what deadlines run on, and
// what a harness on the same host compares with) and CLOCK_REALTIME (ping -D stamps, other hosts).

#include <chrono>
#include <cstdint>

#include "protocol/values.hpp"

namespace jitterd {

using Nanoseconds = std::chrono::nanoseconds;
// std::chrono::steady_clock is CLOCK_MONOTONIC on Linux (libstdc++), so Asio's steady_timer
// deadlines and clock_gettime(CLOCK_MONOTONIC) readings are the same numbers.
using MonotonicClock = std::chrono::steady_clock;
using MonotonicTime = MonotonicClock::time_point;

using protocol::Stamp;

// Both clocks at one instant: the tightest of a few monotonic-realtime-monotonic reads.
Stamp now_stamp();

// A monotonic time point as a stamp; its realtime is estimated from the current offset between the
// clocks (exact unless the wall clock is stepped in between).
Stamp stamp_of(MonotonicTime t);

inline MonotonicTime monotonic_time(Nanoseconds since_boot) {
  return MonotonicTime(since_boot);
}

}  // namespace jitterd
