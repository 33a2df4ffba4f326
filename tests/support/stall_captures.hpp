#pragma once
// Synthetic ping captures of the kind issue 20 is about: a tight body (about 1 ms wide above a
// 127 ms floor) and stalls of several seconds, seeded so that every run of a test or of the
// fidelity report sees the same probes. Used by the compiler's unit tests and by
// tests/bench/fidelity_report.
//
// How a probe's RTT is made (one probe every `interval`, RTTs kept to 1 us, as ping prints below 1
// s):
//  - body: the mode in force (a Markov chain over `modes`, so that the path stays on one route for
//  a
//    while) plus a lognormal excess whose log follows an AR(1) with coefficient `body_correlation`:
//    consecutive probes see similar queues, as on a real path (lag-1 autocorrelation ~0.6);
//  - stalls: `stalls` intervals of `min_stall`..`max_stall` (the first exactly `max_stall`), placed
//  at
//    random without overlap; a probe sent at t inside a stall [s, s + S) waits until the stall
//    ends, so its RTT gets s + S - t added: the sawtooth a real stall leaves in a ping capture;
//  - loss: a Gilbert chain (p: good -> lost, r: lost -> good), bursts of 1/r probes on average.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "shaper/trace.hpp"

namespace shaper::synthetic {

struct BodyMode {
  std::chrono::nanoseconds offset{0};        // above the floor
  std::chrono::nanoseconds median{300'000};  // of the lognormal excess on top of the offset
  double sigma = 0.5;                        // of log(excess): 0.5 puts p99 at ~3.2 x the median
};

struct StallCaptureShape {
  std::size_t probes = 20'000;
  std::chrono::nanoseconds interval{100'000'000};
  std::chrono::nanoseconds floor{127'000'000};
  std::vector<BodyMode> modes{BodyMode{}};
  double mode_dwell = 40;  // mean probes before the route changes (modes only)
  double body_correlation = 0.6;
  std::size_t stalls = 8;
  std::chrono::nanoseconds min_stall{2'000'000'000}, max_stall{13'400'000'000};
  double loss_p = 0.002, loss_r = 0.4;
};

// A tight body and stalls to 13.4 s at ~3 % of the probes (8 stalls of 2-13.4 s in 2000 s).
inline StallCaptureShape tight_body_with_stalls() {
  return StallCaptureShape{};
}

// Two routes (127.3 ms and 129.8 ms at the median, each ~1 ms wide) and stalls to 14.5 s.
inline StallCaptureShape bimodal_with_stalls() {
  StallCaptureShape shape;
  shape.modes = {
      BodyMode{std::chrono::nanoseconds(0), std::chrono::nanoseconds(300'000), 0.5},
      BodyMode{std::chrono::nanoseconds(2'500'000), std::chrono::nanoseconds(300'000), 0.5}};
  shape.max_stall = std::chrono::nanoseconds(14'500'000'000);
  return shape;
}

// The capture, as the ping parser would return it (wall-clock send times from 2026-12-01).
inline Trace make_stall_capture(const StallCaptureShape& shape, std::uint64_t seed) {
  using std::chrono::nanoseconds;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const nanoseconds t0{1'764'547'200'000'000'000};
  const auto total = shape.interval * static_cast<std::int64_t>(shape.probes);

  // Stalls: drawn one by one, each redrawn until it overlaps none before it (with a probe interval
  // between them, so that a stall is always seen to end).
  std::vector<std::pair<nanoseconds, nanoseconds>> stalls;  // start, length
  for (std::size_t k = 0; k < shape.stalls; ++k) {
    const double u = k == 0 ? 1.0 : uniform(rng);
    const nanoseconds length{static_cast<std::int64_t>(
        static_cast<double>(shape.min_stall.count()) +
        u * static_cast<double>((shape.max_stall - shape.min_stall).count()))};
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const nanoseconds start{
          static_cast<std::int64_t>(uniform(rng) * static_cast<double>((total - length).count()))};
      const bool clear = std::none_of(stalls.begin(), stalls.end(), [&](const auto& s) {
        return start < s.first + s.second + shape.interval &&
               s.first < start + length + shape.interval;
      });
      if (clear) {
        stalls.emplace_back(start, length);
        break;
      }
    }
  }

  Trace trace;
  trace.format = TraceFormat::kPing;
  trace.source_name = "synthetic";
  trace.interval = shape.interval;
  trace.interval_source = IntervalSource::kTimestamps;
  trace.sessions = 1;
  trace.session_starts = {0};
  std::size_t mode = 0;
  double z = normal(rng);
  bool lost = false;
  for (std::size_t i = 0; i < shape.probes; ++i) {
    const nanoseconds sent = shape.interval * static_cast<std::int64_t>(i);
    if (shape.modes.size() > 1 && uniform(rng) < 1.0 / shape.mode_dwell) {
      mode =
          (mode + 1 +
           static_cast<std::size_t>(uniform(rng) * static_cast<double>(shape.modes.size() - 1))) %
          shape.modes.size();
    }
    z = shape.body_correlation * z +
        std::sqrt(1 - shape.body_correlation * shape.body_correlation) * normal(rng);
    const BodyMode& m = shape.modes[mode];
    double rtt = static_cast<double>((shape.floor + m.offset).count()) +
                 static_cast<double>(m.median.count()) * std::exp(m.sigma * z);
    for (const auto& [start, length] : stalls) {
      if (sent >= start && sent < start + length)
        rtt += static_cast<double>((start + length - sent).count());
    }
    lost = lost ? uniform(rng) >= shape.loss_r : uniform(rng) < shape.loss_p;
    RttSample s;
    s.seq = i;
    s.send_time = t0 + sent;
    if (!lost) s.rtt = nanoseconds(static_cast<std::int64_t>(std::llround(rtt / 1000.0)) * 1000);
    trace.samples.push_back(s);
  }
  return trace;
}

// Where the stalls of a capture made by make_stall_capture are (from the first probe's send time):
// the runs of probes whose RTT is at least `above` over the floor.
inline std::vector<std::pair<std::chrono::nanoseconds, std::chrono::nanoseconds>> stall_spans(
    const Trace& trace, std::chrono::nanoseconds floor, std::chrono::nanoseconds above) {
  std::vector<std::pair<std::chrono::nanoseconds, std::chrono::nanoseconds>>
      out;  // first, last send
  const auto t0 = *trace.samples.front().send_time;
  bool in = false;
  for (const auto& s : trace.samples) {
    const bool high = s.rtt && *s.rtt - floor >= above;
    if (high && !in) out.emplace_back(*s.send_time - t0, *s.send_time - t0);
    if (high) out.back().second = *s.send_time - t0;
    if (s.rtt) in = high;
  }
  return out;
}

}  // namespace shaper::synthetic
