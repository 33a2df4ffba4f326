#pragma once
// The timeline plot (jitterctl validate --timeline): delay over time, the capture's probes as
// points against the profile's schedule as it runs from the capture's first probe: each window's
// phase as a line (the median of the delays that phase draws) in a band (their 5th to 95th
// percentile), loss shaded. Made for replay profiles (compile --replay), whose windows follow the
// capture; any profile can be drawn (one without a schedule is one window). docs/validation.md
// shows one.

#include <string>
#include <vector>

#include "shaper/profile.hpp"
#include "shaper/validation.hpp"

namespace jitterctl {

// One step of the schedule as it falls on the capture's time line.
struct ScheduleWindow {
  shaper::Nanoseconds start{0}, end{0};
  const shaper::Phase* phase = nullptr;
};

// A schedule with more windows than this over the capture (1 ms steps looped over an hour) is
// drawn for its first kMaxWindows only, and the plot says so: a replay has at most 10 000 steps.
inline constexpr std::size_t kMaxWindows = 100'000;

// The windows from 0 until `until`: the schedule's steps in order, looped if it loops; otherwise
// the last step's phase holds to `until`. A profile without a schedule holds its first phase.
std::vector<ScheduleWindow> schedule_windows(const shaper::Profile& profile,
                                             shaper::Nanoseconds until);

// The delays a phase draws (netem's table arithmetic, or the uniform jitter), as the band drawn.
struct PhaseBand {
  double p5_ms = 0, p50_ms = 0, p95_ms = 0;
  double loss = 0;  // the long-run loss rate (Bernoulli, Gilbert-Elliott; 0 for the 4-state chain)
};
PhaseBand phase_band(const shaper::Phase& phase);

// Above this many probes the capture's points are decimated: each run of ceil(n /
// kMaxTimelinePoints) probes is drawn as its largest delay (so stalls stay) and, if any was lost,
// one loss mark.
inline constexpr std::size_t kMaxTimelinePoints = 50'000;

struct TimelinePlot {
  const shaper::DelaySeries* capture = nullptr;  // the probes drawn as points, by its label
  const shaper::Profile* profile = nullptr;
  std::vector<std::string> inputs;  // what was compared, one line each
  bool log_delay = false;
};

std::string timeline_svg(const TimelinePlot& plot);

}  // namespace jitterctl
