#pragma once
// A phase schedule on absolute deadlines. Step k of iteration i starts at
//   origin + i * period + offset[k]
// so the deadlines never drift, however late any one transition was applied. Pausing moves the
// origin by the time spent paused; skipping moves it so that the chosen step starts now. Pure (no
// timers, no kernel): the session manager arms timers from it, and the unit tests drive it with
// made-up times.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "clock.hpp"

namespace jitterd {

struct ScheduledStep {
  std::string phase;
  Nanoseconds duration{0};
};

struct SchedulePosition {
  std::size_t step = 0;
  std::uint64_t iteration = 0;
  MonotonicTime start;  // this step's deadline
  MonotonicTime end;    // the next step's deadline
  friend bool operator==(const SchedulePosition&, const SchedulePosition&) = default;
};

class ScheduleClock {
 public:
  // `steps` is non-empty with positive durations (the profile loader checks).
  ScheduleClock(std::vector<ScheduledStep> steps, bool loop, MonotonicTime origin);

  // The position of step `step` in iteration `iteration`.
  SchedulePosition position(std::size_t step, std::uint64_t iteration) const;
  // The step in force at `t`; nullopt once a schedule without loop has run out (or before origin).
  std::optional<SchedulePosition> at(MonotonicTime t) const;
  // The step after `p`; nullopt at the end of a schedule without loop.
  std::optional<SchedulePosition> next(const SchedulePosition& p) const;

  void pause(MonotonicTime now);
  // Continues with the paused step's remaining time.
  void resume(MonotonicTime now);
  // `step` starts at `now` with its full duration, in the current iteration.
  void restart_at(std::size_t step, std::uint64_t iteration, MonotonicTime now);

  bool paused() const { return paused_at_.has_value(); }
  std::optional<MonotonicTime> paused_at() const { return paused_at_; }
  const std::vector<ScheduledStep>& steps() const { return steps_; }
  bool loop() const { return loop_; }
  Nanoseconds period() const { return period_; }
  MonotonicTime origin() const { return origin_; }

 private:
  std::vector<ScheduledStep> steps_;
  std::vector<Nanoseconds> offsets_;  // offset of each step from the start of an iteration
  Nanoseconds period_{0};
  bool loop_;
  MonotonicTime origin_;
  std::optional<MonotonicTime> paused_at_;
};

}  // namespace jitterd
