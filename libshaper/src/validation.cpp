#include "shaper/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "shaper/netem_simulator.hpp"
#include "shaper/statistics.hpp"

namespace shaper {

namespace {

using namespace std::chrono_literals;

// The seeds of the link-noise draws added to the capture (validate_series) and to the profile
// (with_link_noise): the two expectations must not share their draws.
constexpr std::uint64_t kCaptureNoiseSeed = 1;
constexpr std::uint64_t kProfileNoiseSeed = 2;

// Thresholds (docs/validation.md). Profile vs capture is arithmetic against arithmetic: tight. A shaped
// link adds the kernel's timer and softirq noise: looser.
struct Thresholds {
  double ks_floor;        // KS limit never below this (the 95 % critical value may be larger)
  double quantile_error;  // p99 and p99.9, relative
  Nanoseconds quantile_slack;  // or within this much, whichever is larger
  double loss_error;      // relative
  double loss_floor;      // absolute difference always allowed
  double burst_error;     // relative mean burst length
  // The second series is a sample of a few thousand probes at most (a trace through the shaped link):
  // p99 and p99.9 also pass when the first series' value lies in the 95 % interval of that sample's
  // quantile (order statistics), widened by the tolerance, as KS passes below its critical value.
  bool quantile_interval;
};
constexpr Thresholds kProfileThresholds{0.02, 0.02, 0ns, 0.10, 0.001, 0.10, false};
constexpr Thresholds kShapedThresholds{0.05, 0.05, 1ms, 0.20, 0.005, 0.20, true};

// Below these counts a statistic is too noisy to judge, and is reported without a verdict.
constexpr std::size_t kMinSamplesForP999 = 1000;
constexpr std::uint64_t kMinBurstsToJudge = 10;

double ms(FractionalNanoseconds d) { return d.count() / 1e6; }

}  // namespace

std::vector<Nanoseconds> DelaySeries::delivered() const {
  std::vector<Nanoseconds> out;
  out.reserve(delay.size());
  for (const auto& d : delay) {
    if (d) out.push_back(*d);
  }
  return out;
}

std::vector<bool> DelaySeries::lost() const {
  std::vector<bool> out;
  out.reserve(delay.size());
  for (const auto& d : delay) out.push_back(!d.has_value());
  return out;
}

DelaySeries capture_series(const Trace& capture, const Profile& profile) {
  DelaySeries out;
  out.label = "capture";
  const Nanoseconds baseline = profile.provenance ? profile.provenance->baseline : 0ns;
  const bool halved = profile.provenance && profile.provenance->halved;
  const Nanoseconds t0 = capture.samples.empty() ? 0ns : capture.samples.front().send_time.value_or(0ns);
  for (const auto& s : capture.samples) {
    out.sent.push_back(s.send_time.value_or(capture.interval * static_cast<std::int64_t>(s.seq)) - t0);
    if (s.rtt) {
      Nanoseconds d = std::max(*s.rtt - baseline, 0ns);
      out.delay.push_back(halved ? d / 2 : d);
    } else {
      out.delay.push_back(std::nullopt);
    }
  }
  return out;
}

std::size_t simulation_copies(std::size_t probes, std::size_t at_least) {
  if (probes == 0) return 1;
  return std::max<std::size_t>(1, (at_least + probes - 1) / probes);
}

namespace {

// What one simulator run holds at most: its packets and outcomes (~100 bytes a probe) and its
// phases (each a copy of a NetemSpec, distribution table included: up to 32 KiB). 64 Ki probes and
// 1024 phases keep a run within ~40 MiB whatever the profile; runs follow one another, so the
// simulation's memory is that of one run plus the series it fills (~56 bytes a probe).
constexpr std::size_t kRunPackets = std::size_t{1} << 16;
constexpr std::size_t kRunPhases = 1024;

// The profile's timeline as the probes meet it: which phase is in force from `from` (on the
// profile's own clock) for `length`, one call of `piece(phase index, duration)` per step met, in
// order. A looped schedule starts over after its last step, one that is not holds its last step
// (netem keeps its last configuration), and a profile without one holds its first phase.
template <typename Piece>
void for_each_piece(const Profile& profile, Nanoseconds from, Nanoseconds length, Piece&& piece) {
  auto index_of = [&](const std::string& name) {
    return static_cast<std::size_t>(profile.find_phase(name) - profile.phases.data());
  };
  if (!profile.schedule || profile.schedule->steps.empty()) {
    piece(std::size_t{0}, length);
    return;
  }
  const auto& steps = profile.schedule->steps;
  Nanoseconds period{0};
  for (const auto& step : steps) period += std::max(step.duration, 0ns);
  if (period <= 0ns) {
    piece(index_of(steps.front().phase), length);
    return;
  }
  if (profile.schedule->loop) from %= period;
  // The step in force at `from`, and how much of it is left.
  std::size_t i = 0;
  Nanoseconds left{0};
  for (Nanoseconds start{0}; i < steps.size(); ++i) {
    start += std::max(steps[i].duration, 0ns);
    if (start > from) {
      left = start - from;
      break;
    }
  }
  while (length > 0ns) {
    if (i == steps.size()) {  // past the end of a schedule that does not loop
      piece(index_of(steps.back().phase), length);
      return;
    }
    const Nanoseconds d = std::min(left, length);
    if (d > 0ns) piece(index_of(steps[i].phase), d);
    length -= d;
    ++i;
    if (i == steps.size() && profile.schedule->loop) i = 0;
    if (i < steps.size()) left = steps[i].duration;
  }
}

// Seeds of the runs after the first (splitmix64's finaliser): the first run keeps `seed`, so a
// simulation that fits one run draws exactly what it drew before runs were bounded.
std::uint64_t run_seed(std::uint64_t seed, std::uint64_t run) {
  if (run == 0) return seed;
  std::uint64_t z = seed + run * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

DelaySeries simulate_profile(const Profile& profile, const DelaySeries& like, Nanoseconds interval,
                             std::uint64_t seed, std::size_t copies) {
  DelaySeries out;
  out.label = "profile";
  if (profile.phases.empty() || like.delay.empty()) return out;
  copies = std::max<std::size_t>(copies, 1);
  if (interval.count() <= 0) interval = 10ms;
  // Ping-sized packets: 56 bytes of data, 28 of ICMP and IP headers, 14 of Ethernet.
  constexpr std::uint32_t kProbeBytes = 98;

  // One copy's send times, from its start. Sent when the capture's probes were: a schedule then
  // meets the probes the capture had in each regime. ping does not send evenly (iputils spaces
  // probes by 3-15 ms when asked for 2 ms and waits longer while replies are outstanding), so at a
  // fixed interval the regimes' shares of the probes would be their shares of the time instead.
  // Inferred send times may step back; they are held at the previous one. Without send times, one
  // probe every `interval`, all copies as one.
  std::vector<Nanoseconds> offsets;
  if (like.sent.size() == like.delay.size()) {
    offsets.reserve(like.sent.size());
    for (const auto sent : like.sent) {
      offsets.push_back(std::max(offsets.empty() ? 0ns : offsets.back(), sent - like.sent.front()));
    }
  } else {
    offsets.reserve(like.delay.size() * copies);
    for (std::size_t i = 0; i < like.delay.size() * copies; ++i) offsets.push_back(interval * static_cast<std::int64_t>(i));
    copies = 1;
  }
  // Each copy starts an interval after the previous one's last probe or, with a looped schedule,
  // where the schedule next starts again, so that every copy meets the schedule as the first one
  // did. On that clock (the series' `sent`) a short capture against a long loop spends most of its
  // time between copies, where no probe is; the simulator is not run there. It runs on a clock
  // without those gaps: each copy takes its own span plus an interval, and meets the phases the
  // profile has in force over that span. (The gaps only drained netem's queue and moved it through
  // phases no probe saw; each copy still starts from the schedule's first step.)
  Nanoseconds period{0};
  if (profile.schedule && profile.schedule->loop) {
    for (const auto& step : profile.schedule->steps) period += std::max(step.duration, 0ns);
  }
  const Nanoseconds span = offsets.back() + interval;

  // Runs of the simulator, each of at most kRunPackets probes and kRunPhases phases, one after the
  // other: memory follows the probes compared, not the copies times the schedule's length.
  std::vector<SimPhase> schedule;
  std::vector<SimPacket> packets;
  std::size_t first = 0;       // the run's first probe, as an index into `out`
  Nanoseconds origin{0};       // the run's start on the simulator's clock
  std::uint64_t runs = 0;
  auto flush = [&] {
    if (packets.empty()) return;
    SimOptions options;
    options.seed = run_seed(seed, runs++);
    const SimResult sim = simulate(schedule, packets, options);
    for (const auto& o : sim.outcomes) {
      if (o.duplicate) continue;
      out.phase[first + o.packet] = schedule[o.phase].name;
      if (o.delivered()) out.delay[first + o.packet] = o.departure - o.sent;
    }
    first += packets.size();
    packets.clear();
    schedule.clear();
  };

  const std::size_t count = offsets.size() * copies;
  out.sent.reserve(count);
  out.delay.assign(count, std::nullopt);
  out.phase.assign(count, "");
  Nanoseconds copy_start{0}, at{0};  // on the series' clock
  Nanoseconds sim_copy_start{0};     // on the simulator's clock
  std::size_t phases = 0;
  for (std::size_t copy = 0; copy < copies && (copy == 0 || phases < kMaxSimulatedPhases); ++copy) {
    std::size_t next = 0;  // the copy's next probe
    Nanoseconds piece_start{0};
    for_each_piece(profile, copy_start, span, [&](std::size_t phase, Nanoseconds duration) {
      if (schedule.size() >= kRunPhases) {
        flush();
        origin = sim_copy_start + piece_start;
      }
      const Phase& p = profile.phases[phase];
      schedule.push_back({duration, p.spec, p.name});
      ++phases;
      const Nanoseconds piece_end = piece_start + duration;
      for (; next < offsets.size() && offsets[next] < piece_end; ++next) {
        const Nanoseconds sim_at = sim_copy_start + offsets[next];
        if (packets.size() >= kRunPackets) {
          // A new run from this probe on, in the same phase for what is left of it.
          flush();
          origin = sim_at;
          schedule.push_back({piece_end - offsets[next], p.spec, p.name});
        }
        packets.push_back({sim_at - origin, kProbeBytes});
        at = std::max(at, copy_start + offsets[next]);
        out.sent.push_back(at);
      }
      piece_start = piece_end;
    });
    sim_copy_start += span;
    copy_start = at + interval;
    if (period > 0ns) copy_start = (copy_start + period - 1ns) / period * period;
  }
  flush();
  out.delay.resize(out.sent.size());
  out.phase.resize(out.sent.size());
  return out;
}

DelaySeries shaped_series(const Trace& shaped, const DelaySeries& profile, bool halved,
                          const LinkNoise* noise) {
  DelaySeries out;
  out.label = "shaped";
  std::vector<Nanoseconds> rtts;
  for (const auto& s : shaped.samples) {
    if (s.rtt) rtts.push_back(*s.rtt);
  }
  // The link's own round trip: what is left of the shaped RTTs' low end after the profile's, both
  // read at kLinkAnchor. Not at the minima: a few thousand probes rarely draw the profile's smallest
  // delay, so min(shaped) - min(profile) overstates the link by the gap between the two (0.1 ms on
  // multimodal.txt with 4000 probes) and shifts the whole shaped series by it.
  std::optional<Nanoseconds> rtt_anchor, profile_anchor;
  if (!rtts.empty()) rtt_anchor = quantile_inverse_ecdf(SortedSamples(std::move(rtts)), kLinkAnchor);
  const auto delays = (noise ? noise->profile : profile).delivered();
  if (!delays.empty()) {
    profile_anchor = quantile_inverse_ecdf(SortedSamples(delays), kLinkAnchor);
  }
  const Nanoseconds profile_low = profile_anchor.value_or(0ns);
  const Nanoseconds link =
      rtt_anchor ? std::max(*rtt_anchor - (halved ? 2 * profile_low : profile_low), 0ns) : 0ns;
  const Nanoseconds t0 = shaped.samples.empty() ? 0ns : shaped.samples.front().send_time.value_or(0ns);
  for (const auto& s : shaped.samples) {
    out.sent.push_back(s.send_time.value_or(shaped.interval * static_cast<std::int64_t>(s.seq)) - t0);
    if (s.rtt) {
      const Nanoseconds d = std::max(*s.rtt - link, 0ns);
      out.delay.push_back(halved ? d / 2 : d);
    } else {
      out.delay.push_back(std::nullopt);
    }
  }
  return out;
}

SeriesStats series_stats(const DelaySeries& series) {
  SeriesStats out;
  out.samples = series.delay.size();
  const auto delivered = series.delivered();
  const LossStatistics loss = loss_statistics(series.lost());
  out.loss_rate = loss.loss_rate.value_or(0);
  out.mean_loss_burst = loss.mean_burst;
  if (delivered.empty()) return out;
  const SortedSamples sorted(delivered);
  if (auto q = tail_quantiles(sorted, QuantileType::kInverseEcdf)) {
    out.p50_ms = ms(q->p50);
    out.p90_ms = ms(q->p90);
    out.p99_ms = ms(q->p99);
    out.p999_ms = ms(q->p999);
    out.max_ms = ms(q->max);
  }
  if (auto m = mean(delivered)) out.mean_ms = ms(*m);
  if (auto s = sample_stddev(delivered)) out.stddev_ms = ms(*s);
  out.lag1_autocorr = autocorrelation(delivered, 1);
  return out;
}

namespace {

// The distribution-free 95 % interval of the p-quantile of the population `sorted` was drawn from:
// the order statistics at ranks n·p ∓ 1.96·√(n·p·(1−p)) (normal approximation to the binomial), in ms.
// A bound beyond the sample is infinite: the sample cannot rule out values there.
std::pair<double, double> quantile_interval_ms(const SortedSamples& sorted, double p) {
  const double n = static_cast<double>(sorted.size());
  const double half = 1.96 * std::sqrt(n * p * (1 - p));
  const double lo_rank = std::floor(n * p - half), hi_rank = std::ceil(n * p + half) + 1;  // 1-based
  const auto& v = sorted.values();
  const double lo = lo_rank < 1 ? -HUGE_VAL : ms(FractionalNanoseconds(v[static_cast<std::size_t>(lo_rank) - 1]));
  const double hi = hi_rank > n ? HUGE_VAL : ms(FractionalNanoseconds(v[static_cast<std::size_t>(hi_rank) - 1]));
  return {lo, hi};
}

Comparison compare(const DelaySeries& a, const DelaySeries& b, const Thresholds& t, const SeriesStats& sa,
                   const SeriesStats& sb) {
  Comparison c;
  c.a = a.label;
  c.b = b.label;
  const SortedSamples da(a.delivered()), db(b.delivered());
  if (da.empty() || db.empty()) {
    c.failures.push_back("no delivered probes to compare");
    return c;
  }
  c.ks = ks_distance(da, db).value_or(1.0);
  c.ks_limit = std::max(t.ks_floor, ks_critical_value(da.size(), db.size(), 0.05).value_or(1.0));
  c.w1_ms = ms(wasserstein1(da, db).value_or(FractionalNanoseconds(0)));
  auto relative = [](double x, double reference) { return reference != 0 ? (x - reference) / reference : x; };
  c.p99_error = relative(sb.p99_ms, sa.p99_ms);
  c.p999_error = relative(sb.p999_ms, sa.p999_ms);
  const double slack_ms = static_cast<double>(t.quantile_slack.count()) / 1e6;
  char buf[256];
  if (c.ks > c.ks_limit) {
    std::snprintf(buf, sizeof buf, "KS %.4f above %.4f", c.ks, c.ks_limit);
    c.failures.push_back(buf);
  }
  // Off by more than the tolerance and, for a shaped trace, outside what its own sampling allows.
  auto quantile_fails = [&](double p, double error, double a_ms, double b_ms, const char* name) {
    if (std::fabs(error) <= t.quantile_error || std::fabs(b_ms - a_ms) <= slack_ms) return;
    if (t.quantile_interval) {
      const auto [lo, hi] = quantile_interval_ms(db, p);
      const double lo_ok = lo - std::max(lo * t.quantile_error, slack_ms);
      const double hi_ok = hi + std::max(hi * t.quantile_error, slack_ms);
      if (a_ms >= lo_ok && a_ms <= hi_ok) return;
      char upper[32] = "unbounded";
      if (!std::isinf(hi)) std::snprintf(upper, sizeof upper, "%.3f", hi);
      std::snprintf(buf, sizeof buf,
                    "%s off by %.2f%% (limit %.0f%%), and %.3f ms lies outside the 95 %% interval of the %s %s "
                    "(%zu probes: %.3f to %s ms)",
                    name, 100 * error, 100 * t.quantile_error, a_ms, c.b.c_str(), name, db.size(), lo, upper);
    } else {
      std::snprintf(buf, sizeof buf, "%s off by %.2f%% (limit %.0f%%)", name, 100 * error, 100 * t.quantile_error);
    }
    c.failures.push_back(buf);
  };
  quantile_fails(0.99, c.p99_error, sa.p99_ms, sb.p99_ms, "p99");
  if (da.size() >= kMinSamplesForP999 && db.size() >= kMinSamplesForP999) {
    quantile_fails(0.999, c.p999_error, sa.p999_ms, sb.p999_ms, "p99.9");
  }
  const double loss_diff = sb.loss_rate - sa.loss_rate;
  c.loss_rate_error = sa.loss_rate >= 0.001 ? loss_diff / sa.loss_rate : loss_diff;
  if (std::fabs(loss_diff) > std::max(t.loss_floor, t.loss_error * sa.loss_rate)) {
    std::snprintf(buf, sizeof buf, "loss rate %.4f vs %.4f", sb.loss_rate, sa.loss_rate);
    c.failures.push_back(buf);
  }
  const LossStatistics la = loss_statistics(a.lost());
  if (sa.mean_loss_burst && sb.mean_loss_burst) {
    c.burst_error = relative(*sb.mean_loss_burst, *sa.mean_loss_burst);
    if (la.bursts >= kMinBurstsToJudge && std::fabs(*c.burst_error) > t.burst_error) {
      std::snprintf(buf, sizeof buf, "mean loss burst %.2f vs %.2f", *sb.mean_loss_burst, *sa.mean_loss_burst);
      c.failures.push_back(buf);
    }
  }
  return c;
}

}  // namespace

std::optional<std::vector<Nanoseconds>> link_noise(const Trace& calibration, std::string* problem) {
  std::vector<Nanoseconds> rtts;
  for (const auto& s : calibration.samples) {
    if (s.rtt) rtts.push_back(*s.rtt);
  }
  // Fewer replies than this cannot describe a noise distribution's upper percentiles.
  constexpr std::size_t kMinCalibrationReplies = 100;
  if (rtts.size() < kMinCalibrationReplies) {
    if (problem) {
      *problem = "the link calibration has " + std::to_string(rtts.size()) + " replies; at least " +
                 std::to_string(kMinCalibrationReplies) + " are needed (ping -c 1000 through netem delay 10ms)";
    }
    return std::nullopt;
  }
  const Nanoseconds floor = *std::min_element(rtts.begin(), rtts.end());
  for (auto& r : rtts) r -= floor;
  return rtts;
}

DelaySeries add_link_noise(const DelaySeries& series, const std::vector<Nanoseconds>& noise, bool halved,
                           std::uint64_t seed) {
  DelaySeries out = series;
  if (noise.empty()) return out;
  Pcg32 rng(seed, 0x11e0);
  auto draw = [&] { return noise[rng() % noise.size()]; };
  for (auto& d : out.delay) {
    if (!d) continue;
    *d += halved ? (draw() + draw()) / 2 : draw();
  }
  return out;
}

LinkNoise with_link_noise(std::vector<Nanoseconds> samples, const DelaySeries& profile, bool halved) {
  DelaySeries noisy = add_link_noise(profile, samples, halved, kProfileNoiseSeed);
  return LinkNoise{std::move(samples), halved, std::move(noisy)};
}

namespace {

std::string noise_note(const std::vector<Nanoseconds>& noise, const char* what) {
  std::vector<Nanoseconds> sorted = noise;
  std::sort(sorted.begin(), sorted.end());
  char note[240];
  std::snprintf(note, sizeof note,
                "the link's own noise (%zu calibration probes: median %.3f ms, p99 %.3f ms) is added to %s before "
                "being compared with the shaped link",
                sorted.size(), ms(sorted[sorted.size() / 2]), ms(sorted[sorted.size() * 99 / 100]), what);
  return note;
}

}  // namespace

ValidationReport validate_series(const DelaySeries& capture, const DelaySeries& profile, const DelaySeries* shaped,
                                 const LinkNoise* noise) {
  ValidationReport r;
  r.capture = series_stats(capture);
  r.profile = series_stats(profile);
  r.comparisons.push_back(compare(capture, profile, kProfileThresholds, r.capture, r.profile));
  if (shaped) {
    r.shaped = series_stats(*shaped);
    if (noise && !noise->samples.empty()) {
      const DelaySeries capture_n = add_link_noise(capture, noise->samples, noise->halved, kCaptureNoiseSeed);
      const DelaySeries& profile_n = noise->profile;
      r.comparisons.push_back(compare(capture_n, *shaped, kShapedThresholds, series_stats(capture_n), *r.shaped));
      r.comparisons.push_back(compare(profile_n, *shaped, kShapedThresholds, series_stats(profile_n), *r.shaped));
      r.notes.push_back(noise_note(noise->samples, "the capture and the profile"));
    } else {
      r.comparisons.push_back(compare(capture, *shaped, kShapedThresholds, r.capture, *r.shaped));
      r.comparisons.push_back(compare(profile, *shaped, kShapedThresholds, r.profile, *r.shaped));
    }
  }
  r.pass = std::all_of(r.comparisons.begin(), r.comparisons.end(), [](const Comparison& c) { return c.pass(); });
  if (r.capture.samples < kMinSamplesForP999) {
    r.notes.push_back("fewer than 1000 capture samples: p99.9 is reported but not judged");
  }
  return r;
}

ValidationReport validate_shaped_only(const DelaySeries& shaped, const DelaySeries& profile,
                                      const LinkNoise* noise) {
  ValidationReport r;
  r.capture = series_stats(shaped);
  r.profile = series_stats(profile);
  if (noise && !noise->samples.empty()) {
    const DelaySeries& profile_n = noise->profile;
    r.comparisons.push_back(compare(profile_n, shaped, kShapedThresholds, series_stats(profile_n), r.capture));
    r.notes.push_back(noise_note(noise->samples, "the profile"));
  } else {
    r.comparisons.push_back(compare(profile, shaped, kShapedThresholds, r.profile, r.capture));
  }
  r.pass = r.comparisons.front().pass();
  if (r.capture.samples < kMinSamplesForP999) {
    r.notes.push_back("fewer than 1000 shaped samples: p99.9 is reported but not judged");
  }
  return r;
}

std::string validation_json(const ValidationReport& report) {
  using json = nlohmann::json;
  auto stats = [](const SeriesStats& s) {
    json j = {{"samples", s.samples},  {"p50_ms", s.p50_ms},   {"p90_ms", s.p90_ms},
              {"p99_ms", s.p99_ms},    {"p999_ms", s.p999_ms}, {"max_ms", s.max_ms},
              {"mean_ms", s.mean_ms},  {"stddev_ms", s.stddev_ms}, {"loss_rate", s.loss_rate}};
    j["mean_loss_burst"] = s.mean_loss_burst ? json(*s.mean_loss_burst) : json(nullptr);
    j["lag1_autocorr"] = s.lag1_autocorr ? json(*s.lag1_autocorr) : json(nullptr);
    return j;
  };
  json j;
  j["capture"] = stats(report.capture);
  j["profile"] = stats(report.profile);
  if (report.shaped) j["shaped"] = stats(*report.shaped);
  json comparisons = json::object();
  for (const auto& c : report.comparisons) {
    json e = {{"ks", c.ks}, {"ks_limit", c.ks_limit}, {"w1_ms", c.w1_ms}, {"p99_error", c.p99_error},
              {"p999_error", c.p999_error}, {"loss_rate_error", c.loss_rate_error},
              {"pass", c.pass()}, {"failures", c.failures}};
    e["burst_error"] = c.burst_error ? json(*c.burst_error) : json(nullptr);
    comparisons[c.a + "_vs_" + c.b] = e;
  }
  j["comparisons"] = comparisons;
  j["verdict"] = report.pass ? "pass" : "fail";
  j["notes"] = report.notes;
  return j.dump(2);
}

}  // namespace shaper
