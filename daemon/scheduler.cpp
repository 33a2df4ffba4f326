#include "scheduler.hpp"

#include <algorithm>
#include <cstdlib>

namespace jitterd {

ScheduleClock::ScheduleClock(std::vector<ScheduledStep> steps, bool loop, MonotonicTime origin)
    : steps_(std::move(steps)), loop_(loop), origin_(origin) {
  if (steps_.empty()) std::abort();  // the profile loader guarantees a non-empty schedule
  offsets_.reserve(steps_.size());
  for (const auto& s : steps_) {
    if (s.duration <= Nanoseconds(0)) std::abort();
    offsets_.push_back(period_);
    period_ += s.duration;
  }
}

SchedulePosition ScheduleClock::position(std::size_t step, std::uint64_t iteration) const {
  const MonotonicTime start =
      origin_ + period_ * static_cast<std::int64_t>(iteration) + offsets_[step];
  return SchedulePosition{step, iteration, start, start + steps_[step].duration};
}

std::optional<SchedulePosition> ScheduleClock::at(MonotonicTime t) const {
  if (t < origin_) return std::nullopt;
  const Nanoseconds since = t - origin_;
  const std::uint64_t iteration = static_cast<std::uint64_t>(since / period_);
  if (!loop_ && iteration > 0) return std::nullopt;
  const Nanoseconds within = since % period_;
  // The last offset not after `within`.
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), within);
  const std::size_t step = static_cast<std::size_t>(it - offsets_.begin()) - 1;
  return position(step, iteration);
}

std::optional<SchedulePosition> ScheduleClock::next(const SchedulePosition& p) const {
  if (p.step + 1 < steps_.size()) return position(p.step + 1, p.iteration);
  if (!loop_) return std::nullopt;
  return position(0, p.iteration + 1);
}

void ScheduleClock::pause(MonotonicTime now) {
  if (!paused_at_) paused_at_ = now;
}

void ScheduleClock::resume(MonotonicTime now) {
  if (!paused_at_) return;
  origin_ += now - *paused_at_;
  paused_at_.reset();
}

void ScheduleClock::restart_at(std::size_t step, std::uint64_t iteration, MonotonicTime now) {
  origin_ = now - offsets_[step] - period_ * static_cast<std::int64_t>(iteration);
  paused_at_.reset();
}

}  // namespace jitterd
