#include "shaper/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
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
// The seed of the half draws calibration_sampling adds to a halved series.
constexpr std::uint64_t kShareSeed = 3;

// Thresholds (docs/validation.md), all of them here. Each figure passes within the larger of a
// tolerance (a difference not worth failing on) and the interval its sampling noise allows at the
// comparison's level (kVerdictAlpha over the judged figures). Profile vs capture is arithmetic
// against arithmetic: tight tolerances. A shaped link adds the kernel's timer and softirq noise:
// looser.
struct Thresholds {
  double ks_floor;             // KS limit never below this (the critical value may be larger)
  double quantile_error;       // p99 and p99.9, relative
  Nanoseconds quantile_slack;  // or within this much, whichever is larger
  double loss_error;           // relative
  double loss_floor;           // absolute difference always allowed
  double burst_error;          // relative mean burst length
};
constexpr Thresholds kProfileThresholds{0.02, 0.02, 0ns, 0.10, 0.001, 0.10};
constexpr Thresholds kShapedThresholds{0.05, 0.05, 1ms, 0, 0.005, 0};

// Lag-1 autocorrelations this close always pass (issue 20 §1): a replayed profile keeps the
// capture's correlation to about this, and a link's timer noise lowers it by a few hundredths.
constexpr double kLag1Tolerance = 0.1;
// A probe stalls when it is lost or its delay lies above this quantile of the first series' delays:
// the top tenth is where a user notices a link hang.
constexpr double kStallQuantile = 0.9;

// Below these counts a statistic is too noisy to judge, and is reported without a verdict.
constexpr std::size_t kMinSamplesForP999 = 1000;
constexpr std::uint64_t kMinBurstsToJudge = 10;
constexpr std::uint64_t kMinStallsToJudge = 10;

double ms(FractionalNanoseconds d) {
  return d.count() / 1e6;
}

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
  const Nanoseconds t0 =
      capture.samples.empty() ? 0ns : capture.samples.front().send_time.value_or(0ns);
  for (const auto& s : capture.samples) {
    out.sent.push_back(s.send_time.value_or(capture.interval * static_cast<std::int64_t>(s.seq)) -
                       t0);
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
    for (std::size_t i = 0; i < like.delay.size() * copies; ++i)
      offsets.push_back(interval * static_cast<std::int64_t>(i));
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
  std::size_t first = 0;  // the run's first probe, as an index into `out`
  Nanoseconds origin{0};  // the run's start on the simulator's clock
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
  // read at kLinkAnchor. Not at the minima: a few thousand probes rarely draw the profile's
  // smallest delay, so min(shaped) - min(profile) overstates the link by the gap between the two
  // (0.1 ms on multimodal.txt with 4000 probes) and shifts the whole shaped series by it.
  std::optional<Nanoseconds> rtt_anchor, profile_anchor;
  if (!(noise && noise->base)) {
    if (!rtts.empty())
      rtt_anchor = quantile_inverse_ecdf(SortedSamples(std::move(rtts)), kLinkAnchor);
    const auto delays = (noise ? noise->profile : profile).delivered();
    if (!delays.empty()) {
      profile_anchor = quantile_inverse_ecdf(SortedSamples(delays), kLinkAnchor);
    }
  }
  const Nanoseconds profile_low = profile_anchor.value_or(0ns);
  const Nanoseconds link =
      noise && noise->base ? *noise->base
      : rtt_anchor         ? std::max(*rtt_anchor - (halved ? 2 * profile_low : profile_low), 0ns)
                           : 0ns;
  const Nanoseconds t0 =
      shaped.samples.empty() ? 0ns : shaped.samples.front().send_time.value_or(0ns);
  for (const auto& s : shaped.samples) {
    out.sent.push_back(s.send_time.value_or(shaped.interval * static_cast<std::int64_t>(s.seq)) -
                       t0);
    if (s.rtt) {
      const Nanoseconds d = std::max(*s.rtt - link, 0ns);
      out.delay.push_back(halved ? d / 2 : d);
    } else {
      out.delay.push_back(std::nullopt);
    }
  }
  return out;
}

namespace {

// The probes of `series` that stall: lost, or delayed beyond `threshold`.
std::vector<bool> stalled(const DelaySeries& series, Nanoseconds threshold) {
  std::vector<bool> out;
  out.reserve(series.delay.size());
  for (const auto& d : series.delay) out.push_back(!d || *d > threshold);
  return out;
}

SeriesStats stats_of(const DelaySeries& series, const SortedSamples& sorted,
                     const LossStatistics& loss) {
  SeriesStats out;
  out.samples = series.delay.size();
  out.loss_rate = loss.loss_rate.value_or(0);
  out.mean_loss_burst = loss.mean_burst;
  if (sorted.empty()) return out;
  if (auto q = tail_quantiles(sorted, QuantileType::kInverseEcdf)) {
    out.p50_ms = ms(q->p50);
    out.p90_ms = ms(q->p90);
    out.p99_ms = ms(q->p99);
    out.p999_ms = ms(q->p999);
    out.max_ms = ms(q->max);
  }
  const auto delivered = series.delivered();  // in send order
  if (auto m = mean(delivered)) out.mean_ms = ms(*m);
  if (auto s = sample_stddev(delivered)) out.stddev_ms = ms(*s);
  out.lag1_autocorr = autocorrelation(delivered, 1);
  return out;
}

}  // namespace

SeriesStats series_stats(const DelaySeries& series) {
  return stats_of(series, SortedSamples(series.delivered()), loss_statistics(series.lost()));
}

PreparedSeries::PreparedSeries(DelaySeries s)
    : series(std::move(s)),
      delivered(series.delivered()),
      lost(series.lost()),
      loss(loss_statistics(lost)),
      stats(stats_of(series, delivered, loss)),
      noise(loss_noise(lost)),
      stall_threshold(quantile_inverse_ecdf(delivered, kStallQuantile).value_or(0ns)),
      stalls(loss_statistics(stalled(series, stall_threshold))) {}

namespace {

// The distribution-free interval of the p-quantile of the population `sorted` was drawn from: the
// order statistics at ranks n·p ∓ z·√(n·p·(1−p)·n/n_eff) (normal approximation to the binomial, its
// variance scaled up by n/n_eff for autocorrelated samples), in ms. A bound beyond the sample is
// infinite: the sample cannot rule out values there.
std::pair<double, double> quantile_interval_ms(const SortedSamples& sorted, double p, double z,
                                               double n_eff) {
  const double n = static_cast<double>(sorted.size());
  const double half = z * std::sqrt(n * p * (1 - p) * n / std::max(n_eff, 1.0));
  const double lo_rank = std::floor(n * p - half),
               hi_rank = std::ceil(n * p + half) + 1;  // 1-based
  const auto& v = sorted.values();
  const double lo =
      lo_rank < 1 ? -HUGE_VAL : ms(FractionalNanoseconds(v[static_cast<std::size_t>(lo_rank) - 1]));
  const double hi =
      hi_rank > n ? HUGE_VAL : ms(FractionalNanoseconds(v[static_cast<std::size_t>(hi_rank) - 1]));
  return {lo, hi};
}

[[gnu::format(printf, 1, 2)]] std::string format(const char* fmt, ...) {
  char buf[512];
  std::va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+inf" : "-inf";
  return format("%.4g", v);
}

// The variance a law's figure has per unit (probe, or burst), estimated from the series that holds
// more units of it (under the hypothesis both series share one law, the longer one knows it better;
// a short trace's own estimate from a few dozen bursts would make the interval as noisy as the
// figure, and narrower exactly when the trace happened to lose less), or else from the other.
std::optional<double> law_variance(std::optional<double> a, double units_a, std::optional<double> b,
                                   double units_b) {
  if (units_a >= units_b) return a ? a : b;
  return b ? b : a;
}

// A figure whose difference b - a passes within ±half.
Figure symmetric_figure(const char* name, std::optional<double> a, std::optional<double> b,
                        double half, std::string basis, bool judged) {
  Figure f;
  f.name = name;
  f.a = a;
  f.b = b;
  f.difference = a && b ? *b - *a : 0;
  f.low = -half;
  f.high = half;
  f.basis = std::move(basis);
  f.judged = judged && a && b;
  return f;
}

// What compare's figures are built from, all but what depends on the level: which figures are
// judged (settled first, since each one's level depends on how many there are), the sizes that
// count each series' sampling noise, and the standard errors and tolerances.
struct CompareInputs {
  const PreparedSeries& pa;
  const PreparedSeries& pb;
  const Thresholds& t;
  const ValidationOptions& options;
  LossStatistics stall_b;  // b's stalls at a's threshold
  bool judge_p999 = false, judge_burst = false, judge_lag1 = false, judge_stalls = false;
  int judged = 0;
  double neff_a = 0, neff_b = 0;  // effective sizes under each series' lag-1 autocorrelation
  double ks_a = 0, ks_b = 0;      // the sizes KS counts: the effective ones, and the calibration's
  double ks = 0;
  bool b_noisier = false;  // b has the smaller effective size: p99 and p99.9 read its interval
  double p99_size = 0, p999_size = 0;  // the noisier series' effective size at those quantiles
  double slack_ms = 0;
  double loss_se = 0, loss_tolerance = 0;
  double burst_se = 0, burst_tolerance = 0;
  double lag1_se = 0;
  double stall_ks = 0;
};

// The effective size of a series' quantile at `value_ms`: its `neff` (its values' lag-1
// autocorrelation), or fewer where the probes above that value cluster in send order more than the
// values do: one stall delays consecutive probes together, and the tail then holds fewer
// independent draws than its count.
double quantile_effective_size(const PreparedSeries& s, double neff, double value_ms) {
  std::vector<bool> above;
  above.reserve(s.delivered.size());
  for (const auto& d : s.series.delay) {
    if (d) above.push_back(ms(FractionalNanoseconds(*d)) > value_ms);
  }
  return std::min(neff, effective_sample_size(above.size(), autocorrelation(above, 1)));
}

CompareInputs compare_inputs(const PreparedSeries& pa, const PreparedSeries& pb,
                             const Thresholds& t, const ValidationOptions& options) {
  const SeriesStats &sa = pa.stats, &sb = pb.stats;
  const SortedSamples &da = pa.delivered, &db = pb.delivered;
  const LossStatistics &la = pa.loss, &lb = pb.loss;
  const LossStatistics& stall_a = pa.stalls;
  CompareInputs in{pa, pb, t, options, loss_statistics(stalled(pb.series, pa.stall_threshold))};
  in.judge_p999 = da.size() >= kMinSamplesForP999 && db.size() >= kMinSamplesForP999;
  in.judge_burst = la.bursts >= kMinBurstsToJudge && sa.mean_loss_burst && sb.mean_loss_burst;
  in.judge_lag1 = options.judge_timeline && sa.lag1_autocorr && sb.lag1_autocorr;
  in.judge_stalls = options.judge_timeline && stall_a.bursts >= kMinStallsToJudge &&
                    in.stall_b.bursts >= kMinStallsToJudge;
  in.judged = 3 + in.judge_p999 + in.judge_burst + in.judge_lag1 +
              in.judge_stalls;  // KS, p99, loss rate always

  in.neff_a = effective_sample_size(da.size(), sa.lag1_autocorr);
  in.neff_b = effective_sample_size(db.size(), sb.lag1_autocorr);
  in.ks_a = 1 / (1 / in.neff_a + pa.calibration.ks);
  in.ks_b = 1 / (1 / in.neff_b + pb.calibration.ks);
  in.ks = ks_distance(da, db).value_or(1.0);
  in.b_noisier = in.neff_b <= in.neff_a;
  const PreparedSeries& noisier = in.b_noisier ? pb : pa;
  const double neff_noisier = in.b_noisier ? in.neff_b : in.neff_a;
  in.p99_size = quantile_effective_size(noisier, neff_noisier, noisier.stats.p99_ms);
  in.p999_size = quantile_effective_size(noisier, neff_noisier, noisier.stats.p999_ms);
  // A series measured through the calibrated link that the other one carries the noise of meets
  // that noise's runs as the calibration did: its quantiles count them, where that gives fewer.
  const PreparedSeries& other = in.b_noisier ? pa : pb;
  if (noisier.calibration.p99 == 0 && noisier.calibration.p999 == 0) {
    const double delivered = static_cast<double>(noisier.delivered.size());
    in.p99_size = std::min(in.p99_size, delivered / other.calibration.p99_clustering);
    in.p999_size = std::min(in.p999_size, delivered / other.calibration.p999_clustering);
  }
  in.slack_ms = static_cast<double>(t.quantile_slack.count()) / 1e6;
  const double n_a = static_cast<double>(pa.lost.size()), n_b = static_cast<double>(pb.lost.size());
  const double bernoulli = sa.loss_rate * (1 - sa.loss_rate);
  const double per_probe = law_variance(pa.noise.loss_rate_variance_per_probe, n_a,
                                        pb.noise.loss_rate_variance_per_probe, n_b)
                               .value_or(bernoulli);
  in.loss_se = std::sqrt(per_probe * (1 / n_a + 1 / n_b));
  in.loss_tolerance = std::max(t.loss_floor, t.loss_error * sa.loss_rate);
  const double bursts_a = static_cast<double>(la.bursts), bursts_b = static_cast<double>(lb.bursts);
  const double burst_var =
      law_variance(pa.noise.burst_variance, bursts_a, pb.noise.burst_variance, bursts_b)
          .value_or(0);
  in.burst_se =
      bursts_a > 0 && bursts_b > 0 ? std::sqrt(burst_var * (1 / bursts_a + 1 / bursts_b)) : 0;
  in.burst_tolerance = t.burst_error * sa.mean_loss_burst.value_or(0);
  const double delivered_a = static_cast<double>(da.size()),
               delivered_b = static_cast<double>(db.size());
  auto bartlett = [](std::optional<double> r, double n) {
    return (1 - r.value_or(0) * r.value_or(0)) / n;
  };
  in.lag1_se =
      std::sqrt(bartlett(sa.lag1_autocorr, delivered_a) + bartlett(sb.lag1_autocorr, delivered_b));
  in.stall_ks = ks_distance_of_counts(stall_a.burst_lengths, in.stall_b.burst_lengths).value_or(0);
  return in;
}

double relative(double x, double reference) {
  return reference != 0 ? (x - reference) / reference : x;
}

// The comparison's summary numbers (none of them depends on the level).
void summarise(Comparison& c, const CompareInputs& in) {
  const SeriesStats &sa = in.pa.stats, &sb = in.pb.stats;
  c.ks = in.ks;
  c.w1_ms = ms(wasserstein1(in.pa.delivered, in.pb.delivered).value_or(FractionalNanoseconds(0)));
  c.p99_error = relative(sb.p99_ms, sa.p99_ms);
  c.p999_error = relative(sb.p999_ms, sa.p999_ms);
  const double loss_diff = sb.loss_rate - sa.loss_rate;
  c.loss_rate_error = sa.loss_rate >= 0.001 ? loss_diff / sa.loss_rate : loss_diff;
  if (sa.mean_loss_burst && sb.mean_loss_burst)
    c.burst_error = relative(*sb.mean_loss_burst, *sa.mean_loss_burst);
}

// One build of the figures at a level: its z, its words, and `spending`, the judged figures whose
// limit is their sampling interval rather than a tolerance wider than it.
struct Level {
  double level;
  double z;
  std::string pct;
  int spending = 0;
};

// KS, with each sample counted at its effective size under its own lag-1 autocorrelation, and a
// series built with the link's noise also at the precision of the calibration it drew from.
Figure ks_figure(const CompareInputs& in, Level& lv, double& ks_limit) {
  const Thresholds& t = in.t;
  const double critical = ks_critical_value_effective(in.ks_a, in.ks_b, lv.level).value_or(1.0);
  ks_limit = std::max(t.ks_floor, critical);
  lv.spending += critical > t.ks_floor;
  Figure f;
  f.name = "ks";
  f.difference = in.ks;
  f.low = 0;
  f.high = ks_limit;
  auto calibrated = [&](const char* which, double extra, double neff, double size) {
    return extra > 0 ? format(
                           "; the %s's %.0f counts the link calibration's sampling too "
                           "(%s added to 1 / %.0f)",
                           which, size, number(extra).c_str(), neff)
                     : std::string();
  };
  f.basis = format(
      "the larger of %s and the %s critical value %s for effective sizes %.0f and %.0f "
      "(n (1 - r) / (1 + r), lag-1 r %s and %s%s%s)",
      number(t.ks_floor).c_str(), lv.pct.c_str(), number(critical).c_str(), in.ks_a, in.ks_b,
      number(in.pa.stats.lag1_autocorr.value_or(0)).c_str(),
      number(in.pb.stats.lag1_autocorr.value_or(0)).c_str(),
      calibrated(in.pa.series.label.c_str(), in.pa.calibration.ks, in.neff_a, in.ks_a).c_str(),
      calibrated(in.pb.series.label.c_str(), in.pb.calibration.ks, in.neff_b, in.ks_b).c_str());
  f.judged = true;
  return f;
}

// The root of the sum of the squares, infinite when one is (libstdc++ 12's three-argument
// std::hypot gives NaN there).
double quadrature(double x, double y, double z) {
  return std::hypot(std::hypot(x, y), z);
}

// How far below and above a series' value its population's p-quantile may lie for the calibration's
// sampling alone, `extra` (CalibrationSampling): its order statistics at that quantile for the size
// 1 / extra. Both 0 for a series built from no calibration.
std::pair<double, double> calibration_spread(const SortedSamples& sorted, double p, double z,
                                             double extra, double value_ms) {
  if (extra <= 0) return {0, 0};
  const auto [lo, hi] = quantile_interval_ms(sorted, p, z, 1 / extra);
  return {value_ms - lo, hi - value_ms};
}

// p99 and p99.9: within the tolerance, or the steadier series' value inside the noisier one's
// interval for that quantile. Either suffices; the interval is not widened by the tolerance, which
// would make the figure all but unable to fail by chance and spend none of the level it is given.
// A series built with the link's noise owes its quantile to the calibration's sampling too
// (`cal_a`, `cal_b`: each series' CalibrationSampling at this quantile); that error is independent
// of the probes' own, and widens the interval in quadrature.
Figure quantile_figure(const CompareInputs& in, Level& lv, double p, const char* name,
                       const char* quantile, double a_ms, double b_ms, bool judge, double size,
                       double cal_a, double cal_b) {
  const std::string &label_a = in.pa.series.label, &label_b = in.pb.series.label;
  const SortedSamples &da = in.pa.delivered, &db = in.pb.delivered;
  Figure f;
  f.name = name;
  f.a = a_ms;
  f.b = b_ms;
  f.difference = b_ms - a_ms;
  const double tolerance = std::max(std::fabs(a_ms) * in.t.quantile_error, in.slack_ms);
  const bool b_noisier = in.b_noisier;
  const auto [lo, hi] = quantile_interval_ms(b_noisier ? db : da, p, lv.z, size);
  // The steadier value inside [lo, hi], as a range of b - a; then each calibration's share: b - a
  // reads low when a's quantile came out high or b's low, and high the other way round.
  const auto [a_below, a_above] = calibration_spread(da, p, lv.z, cal_a, a_ms);
  const auto [b_below, b_above] = calibration_spread(db, p, lv.z, cal_b, b_ms);
  const double interval_low = -quadrature(b_noisier ? hi - b_ms : a_ms - lo, a_below, b_above);
  const double interval_high = quadrature(b_noisier ? b_ms - lo : hi - a_ms, a_above, b_below);
  f.low = std::min(-tolerance, interval_low);
  f.high = std::max(tolerance, interval_high);
  lv.spending += judge && (interval_low < -tolerance || interval_high > tolerance);
  auto calibrated = [&](const std::string& label, double extra, double below, double above) {
    return extra > 0 ? format(
                           "; the %s's %s counts the link calibration's sampling too (size "
                           "%.0f: %s below to %s above, in quadrature)",
                           label.c_str(), quantile, 1 / extra, number(below).c_str(),
                           number(above).c_str())
                     : std::string();
  };
  f.basis = format(
      "within %s %% or %s ms, or the %s value inside the %s %s's %s interval (%zu probes, "
      "effective %.0f: %s to %s ms%s%s)",
      number(100 * in.t.quantile_error).c_str(), number(in.slack_ms).c_str(),
      (b_noisier ? label_a : label_b).c_str(), (b_noisier ? label_b : label_a).c_str(), quantile,
      lv.pct.c_str(), (b_noisier ? db : da).size(), size, number(lo).c_str(), number(hi).c_str(),
      calibrated(label_a, cal_a, a_below, a_above).c_str(),
      calibrated(label_b, cal_b, b_below, b_above).c_str());
  f.judged = judge;
  return f;
}

// Loss rate: the ratio estimator's variance over bursts-and-gaps cycles (statistics.hpp,
// loss_noise).
Figure loss_rate_figure(const CompareInputs& in, Level& lv) {
  const Thresholds& t = in.t;
  const double z = lv.z;
  lv.spending += z * in.loss_se > in.loss_tolerance;
  return symmetric_figure(
      "loss_rate", in.pa.stats.loss_rate, in.pb.stats.loss_rate,
      std::max(in.loss_tolerance, z * in.loss_se),
      format("the larger of the tolerance %s (%s absolute%s) and the %s interval %s (z %.3g, "
             "standard error %s "
             "from the bursts and gaps of %zu and %zu probes)",
             number(in.loss_tolerance).c_str(), number(t.loss_floor).c_str(),
             t.loss_error > 0
                 ? format(" or %s %% relative", number(100 * t.loss_error).c_str()).c_str()
                 : "",
             lv.pct.c_str(), number(z * in.loss_se).c_str(), z, number(in.loss_se).c_str(),
             in.pa.lost.size(), in.pb.lost.size()),
      true);
}

// Mean burst: the bursts are the independent units.
Figure mean_burst_figure(const CompareInputs& in, Level& lv) {
  const Thresholds& t = in.t;
  const double z = lv.z;
  lv.spending += in.judge_burst && z * in.burst_se > in.burst_tolerance;
  return symmetric_figure(
      "mean_loss_burst", in.pa.stats.mean_loss_burst, in.pb.stats.mean_loss_burst,
      std::max(in.burst_tolerance, z * in.burst_se),
      format("%sthe %s interval %s (standard error %s over %llu and %llu bursts)%s",
             t.burst_error > 0
                 ? format("the larger of the tolerance %s (%s %% relative) and ",
                          number(in.burst_tolerance).c_str(), number(100 * t.burst_error).c_str())
                       .c_str()
                 : "",
             lv.pct.c_str(), number(z * in.burst_se).c_str(), number(in.burst_se).c_str(),
             static_cast<unsigned long long>(in.pa.loss.bursts),
             static_cast<unsigned long long>(in.pb.loss.bursts),
             in.judge_burst ? ""
                            : format("; judged from %llu bursts in the %s",
                                     static_cast<unsigned long long>(kMinBurstsToJudge),
                                     in.pa.series.label.c_str())
                                  .c_str()),
      in.judge_burst);
}

const char* timeline_note(const ValidationOptions& options) {
  return options.judge_timeline ? ""
                                : "; reported only: the profile does not claim to replay in time";
}

// The timeline: lag-1 autocorrelation (Bartlett's variance for an AR(1), (1 - r^2) / n) and
// stalls.
Figure lag1_figure(const CompareInputs& in, Level& lv) {
  const double z = lv.z;
  lv.spending += in.judge_lag1 && z * in.lag1_se > kLag1Tolerance;
  return symmetric_figure(
      "lag1_autocorr", in.pa.stats.lag1_autocorr, in.pb.stats.lag1_autocorr,
      std::max(kLag1Tolerance, z * in.lag1_se),
      format("the larger of %s and the %s interval %s (standard error %s)%s",
             number(kLag1Tolerance).c_str(), lv.pct.c_str(), number(z * in.lag1_se).c_str(),
             number(in.lag1_se).c_str(), timeline_note(in.options)),
      in.judge_lag1);
}

Figure stall_figure(const CompareInputs& in, Level& lv) {
  const LossStatistics &stall_a = in.pa.stalls, &stall_b = in.stall_b;
  Figure f;
  f.name = "stall_ks";
  if (stall_a.mean_burst) f.a = *stall_a.mean_burst;
  if (stall_b.mean_burst) f.b = *stall_b.mean_burst;
  f.difference = in.stall_ks;
  const double stall_critical =
      ks_critical_value(stall_a.bursts, stall_b.bursts, lv.level).value_or(1.0);
  lv.spending += in.judge_stalls;
  f.low = 0;
  f.high = stall_critical;
  f.basis = format(
      "KS distance between the stall lengths (runs of probes lost or above %s ms, the %s's "
      "p90; "
      "%llu and %llu stalls, mean length in probes as the values) against its %s critical "
      "value%s",
      number(ms(FractionalNanoseconds(in.pa.stall_threshold))).c_str(), in.pa.series.label.c_str(),
      static_cast<unsigned long long>(stall_a.bursts),
      static_cast<unsigned long long>(stall_b.bursts), lv.pct.c_str(),
      in.options.judge_timeline ? (in.judge_stalls ? "" : "; too few stalls to judge")
                                : timeline_note(in.options));
  f.judged = in.judge_stalls;
  return f;
}

// The figures at `level` each, into `c`; returns how many of the judged ones spend their share of
// the level (Level::spending).
int build_figures(Comparison& c, const CompareInputs& in, double level) {
  const SeriesStats &sa = in.pa.stats, &sb = in.pb.stats;
  c.figures.clear();
  c.level = level;
  Level lv{level, normal_quantile(1 - level / 2).value_or(HUGE_VAL),
           format("%.3g %%", 100 * (1 - level))};
  c.figures.push_back(ks_figure(in, lv, c.ks_limit));
  c.figures.push_back(quantile_figure(in, lv, 0.99, "p99_ms", "p99", sa.p99_ms, sb.p99_ms, true,
                                      in.p99_size, in.pa.calibration.p99, in.pb.calibration.p99));
  c.figures.push_back(quantile_figure(in, lv, 0.999, "p999_ms", "p99.9", sa.p999_ms, sb.p999_ms,
                                      in.judge_p999, in.p999_size, in.pa.calibration.p999,
                                      in.pb.calibration.p999));
  c.figures.push_back(loss_rate_figure(in, lv));
  c.figures.push_back(mean_burst_figure(in, lv));
  c.figures.push_back(lag1_figure(in, lv));
  c.figures.push_back(stall_figure(in, lv));
  return lv.spending;
}

Comparison compare(const PreparedSeries& pa, const PreparedSeries& pb, const Thresholds& t,
                   const ValidationOptions& options) {
  Comparison c;
  c.a = pa.series.label;
  c.b = pb.series.label;
  if (pa.delivered.empty() || pb.delivered.empty()) {
    c.failures.push_back("no delivered probes to compare");
    return c;
  }
  const CompareInputs in = compare_inputs(pa, pb, t, options);
  summarise(c, in);

  // The level is split (Bonferroni) among the figures sampling noise can fail. A figure held to a
  // tolerance wider than its sampling interval fails by chance far less often than its share, so it
  // is not counted and the others get more: start with every judged figure, and count again at the
  // larger share until the count holds (it only falls, as a larger share narrows the intervals).
  int share = in.judged;
  for (;;) {
    const int spending = std::max(build_figures(c, in, options.alpha / share), 1);
    if (spending >= share) break;
    share = spending;
  }

  for (auto& f : c.figures) {
    f.pass = !f.judged || (f.difference >= f.low && f.difference <= f.high);
    if (!f.pass) c.failures.push_back(describe(f));
  }
  return c;
}

}  // namespace

std::string describe(const Figure& f) {
  std::string out = f.name + " ";
  if (f.a || f.b) {
    out += (f.a ? number(*f.a) : "-") + " vs " + (f.b ? number(*f.b) : "-") + ": ";
  }
  out += format("%s %s %s to %s (%s)", number(f.difference).c_str(),
                f.difference >= f.low && f.difference <= f.high ? "within" : "outside",
                number(f.low).c_str(), number(f.high).c_str(), f.basis.c_str());
  out += !f.judged ? ": not judged" : f.pass ? ": pass" : ": FAIL";
  return out;
}

Expected<LinkCalibration> link_calibration(const Trace& calibration,
                                           std::optional<Nanoseconds> constant_delay) {
  std::vector<Nanoseconds> rtts;
  for (const auto& s : calibration.samples) {
    if (s.rtt) rtts.push_back(*s.rtt);
  }
  // Fewer replies than this cannot describe a noise distribution's upper percentiles.
  constexpr std::size_t kMinCalibrationReplies = 100;
  if (rtts.size() < kMinCalibrationReplies) {
    return Diagnostics{{"", "the link calibration has " + std::to_string(rtts.size()) +
                                " replies; at least " + std::to_string(kMinCalibrationReplies) +
                                " are needed (ping -D -c 1000 through netem delay 500us)"}};
  }
  const Nanoseconds floor = *std::min_element(rtts.begin(), rtts.end());
  LinkCalibration out;
  if (constant_delay) {
    if (floor < *constant_delay) {
      return Diagnostics{{"", format("its fastest reply took %s ms, less than the constant delay "
                                     "of %s ms it was taken through: give the round trip that "
                                     "netem added (its delay; twice that if it shaped both "
                                     "directions)",
                                     number(ms(FractionalNanoseconds(floor))).c_str(),
                                     number(ms(FractionalNanoseconds(*constant_delay))).c_str())}};
    }
    out.base = floor - *constant_delay;
  }
  out.effective_probes = effective_sample_size(rtts.size(), autocorrelation(rtts, 1));
  // Whether every reply is a multiple of 1 ms, 100 µs or 10 µs: the calibration was printed that
  // coarsely (finer steps are a microsecond clock's own).
  for (const Nanoseconds step : {Nanoseconds(1ms), Nanoseconds(100us), Nanoseconds(10us)}) {
    if (std::all_of(rtts.begin(), rtts.end(), [&](Nanoseconds r) { return r % step == 0ns; })) {
      out.print_step = step;
      break;
    }
  }
  for (auto& r : rtts) r -= floor;
  out.noise = std::move(rtts);
  return out;
}

CalibrationSampling calibration_sampling(const DelaySeries& series,
                                         const std::vector<Nanoseconds>& noise, bool halved,
                                         double effective_probes) {
  if (effective_probes <= 0 || noise.empty()) return {};
  std::vector<Nanoseconds> g = series.delivered();
  if (g.empty()) return {};
  // G: the series itself, or for a halved one with one half draw added (the other draw is the
  // variable below).
  if (halved) {
    Pcg32 rng(kShareSeed, 0x5a1e);
    for (auto& d : g) d += noise[rng() % noise.size()] / 2;
  }
  const SortedSamples sorted_g(std::move(g));
  const auto at = sorted_g.values();
  // G's ECDF at a point between whole nanoseconds: at its floor, since every delay is whole.
  auto cdf = [&](double x_ns) {
    return *ecdf(sorted_g, Nanoseconds(static_cast<std::int64_t>(std::floor(x_ns))));
  };
  // The calibration's distinct values and how often each was drawn.
  std::vector<Nanoseconds> sorted_noise = noise;
  std::sort(sorted_noise.begin(), sorted_noise.end());
  std::vector<std::pair<double, double>> values;  // (value in ns, weight)
  for (const Nanoseconds v : sorted_noise) {
    if (!values.empty() && values.back().first == static_cast<double>(v.count())) {
      values.back().second += 1;
    } else {
      values.emplace_back(static_cast<double>(v.count()), 1.0);
    }
  }
  for (auto& [v, w] : values) w /= static_cast<double>(sorted_noise.size());
  const double k = halved ? 0.5 : 1.0, m = halved ? 4.0 : 1.0;
  // The noised series' CDF at x (the mean over the draws), and the variance of that mean's terms
  // over its own F (1 - F): 0 where F (1 - F) is below `floor`.
  struct AtPoint {
    double cdf, ratio;
  };
  auto at_point = [&](double x, double floor) {
    double mean = 0, square = 0;
    for (const auto& [v, w] : values) {
      const double f = cdf(x - k * v);
      mean += w * f;
      square += w * f * f;
    }
    const double bridge = mean * (1 - mean);
    return AtPoint{mean, bridge < floor || bridge <= 0
                             ? 0.0
                             : m * std::max(square - mean * mean, 0.0) / bridge};
  };
  CalibrationSampling out;
  const double median_noise = static_cast<double>(sorted_noise[sorted_noise.size() / 2].count());
  // KS: over the noised series' percentiles (G's, moved by the typical draw), where its F (1 - F)
  // is at least that of the 1st percentile: further out both are too small to move KS.
  constexpr int kGrid = 200;
  for (int j = 1; j < kGrid; ++j) {
    const double x =
        static_cast<double>(at[at.size() * static_cast<std::size_t>(j) / kGrid].count()) +
        k * median_noise;
    out.ks = std::max(out.ks, at_point(x, 0.01 * 0.99).ratio);
  }
  // The terms of that mean in the calibration's send order, F(x - z_i): their mean's variance by
  // batch means counts every run of probes delayed together (one stall, a busy second), which the
  // lag-1 autocorrelation behind `effective_probes` hardly sees. Over F (1 - F), as `ratio`.
  const double n = static_cast<double>(noise.size());
  auto clustered = [&](double x, double bridge) {
    std::vector<double> terms;
    terms.reserve(noise.size());
    for (const Nanoseconds z : noise) terms.push_back(cdf(x - k * static_cast<double>(z.count())));
    const std::optional<double> variance = batch_means_variance(terms);
    return variance && bridge > 0 ? m * *variance / bridge : 0.0;
  };
  // p99 and p99.9: at the noised series' own quantile, found by bisection on its CDF. The share
  // is the larger of the two counts; a series probed through the same link meets the same runs,
  // and its quantile's variance grows by what they add beyond independent draws (`clustering`).
  struct AtQuantile {
    double share, clustering;
  };
  auto at_quantile = [&](double p) {
    double lo = static_cast<double>(at.front().count()) - 1,
           hi = static_cast<double>(at.back().count()) + k * values.back().first + 1;
    for (int i = 0; i < 64 && hi - lo > 1; ++i) {
      const double mid = (lo + hi) / 2;
      (at_point(mid, 0).cdf < p ? lo : hi) = mid;
    }
    const AtPoint point = at_point(hi, 0);
    const double runs = clustered(hi, point.cdf * (1 - point.cdf));
    return AtQuantile{std::max(point.ratio / effective_probes, runs),
                      1 + std::max(0.0, runs * n - point.ratio)};
  };
  const AtQuantile p99 = at_quantile(0.99), p999 = at_quantile(0.999);
  out.p99 = p99.share;
  out.p99_clustering = p99.clustering;
  out.p999 = p999.share;
  out.p999_clustering = p999.clustering;
  out.ks /= effective_probes;
  return out;
}

DelaySeries add_link_noise(const DelaySeries& series, const std::vector<Nanoseconds>& noise,
                           bool halved, std::uint64_t seed) {
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

LinkNoise with_link_noise(LinkCalibration calibration, const DelaySeries& profile, bool halved) {
  LinkNoise out;
  out.profile = add_link_noise(profile, calibration.noise, halved, kProfileNoiseSeed);
  out.profile_sampling =
      calibration_sampling(profile, calibration.noise, halved, calibration.effective_probes);
  out.samples = std::move(calibration.noise);
  out.halved = halved;
  out.base = calibration.base;
  out.effective_probes = calibration.effective_probes;
  return out;
}

namespace {

std::string noise_note(const std::vector<Nanoseconds>& noise, const char* what) {
  std::vector<Nanoseconds> sorted = noise;
  std::sort(sorted.begin(), sorted.end());
  char note[240];
  std::snprintf(note, sizeof note,
                "the link's own noise (%zu calibration probes: median %.3f ms, p99 %.3f ms) is "
                "added to %s before "
                "being compared with the shaped link",
                sorted.size(), ms(sorted[sorted.size() / 2]), ms(sorted[sorted.size() * 99 / 100]),
                what);
  return note;
}

}  // namespace

ValidationReport validate_series(const DelaySeries& capture, const DelaySeries& profile,
                                 const DelaySeries* shaped, const LinkNoise* noise,
                                 const ValidationOptions& options) {
  ValidationReport r;
  const PreparedSeries capture_p(capture), profile_p(profile);
  r.capture = capture_p.stats;
  r.profile = profile_p.stats;
  r.comparisons.push_back(compare(capture_p, profile_p, kProfileThresholds, options));
  if (shaped) {
    const PreparedSeries shaped_p(*shaped);
    r.shaped = shaped_p.stats;
    if (noise && !noise->samples.empty()) {
      PreparedSeries capture_n(
          add_link_noise(capture, noise->samples, noise->halved, kCaptureNoiseSeed));
      capture_n.calibration =
          calibration_sampling(capture, noise->samples, noise->halved, noise->effective_probes);
      PreparedSeries profile_n(noise->profile);
      profile_n.calibration = noise->profile_sampling;
      r.comparisons.push_back(compare(capture_n, shaped_p, kShapedThresholds, options));
      r.comparisons.push_back(compare(profile_n, shaped_p, kShapedThresholds, options));
      r.notes.push_back(noise_note(noise->samples, "the capture and the profile"));
    } else {
      r.comparisons.push_back(compare(capture_p, shaped_p, kShapedThresholds, options));
      r.comparisons.push_back(compare(profile_p, shaped_p, kShapedThresholds, options));
    }
  }
  r.pass = std::all_of(r.comparisons.begin(), r.comparisons.end(),
                       [](const Comparison& c) { return c.pass(); });
  if (r.capture.samples < kMinSamplesForP999) {
    r.notes.push_back("fewer than 1000 capture samples: p99.9 is reported but not judged");
  }
  return r;
}

ValidationReport validate_shaped_only(const DelaySeries& shaped, const PreparedSeries& profile,
                                      const ValidationOptions& options) {
  ValidationReport r;
  const PreparedSeries shaped_p(shaped);
  r.capture = shaped_p.stats;
  r.profile = profile.stats;
  r.comparisons.push_back(compare(profile, shaped_p, kShapedThresholds, options));
  r.pass = r.comparisons.front().pass();
  if (r.capture.samples < kMinSamplesForP999) {
    r.notes.push_back("fewer than 1000 shaped samples: p99.9 is reported but not judged");
  }
  return r;
}

ValidationReport validate_shaped_only(const DelaySeries& shaped, const DelaySeries& profile,
                                      const LinkNoise* noise, const ValidationOptions& options) {
  if (!noise || noise->samples.empty())
    return validate_shaped_only(shaped, PreparedSeries(profile), options);
  PreparedSeries profile_n(noise->profile);
  profile_n.calibration = noise->profile_sampling;
  ValidationReport r = validate_shaped_only(shaped, profile_n, options);
  r.profile = series_stats(profile);
  r.notes.insert(r.notes.begin(), noise_note(noise->samples, "the profile"));
  return r;
}

std::string validation_json(const ValidationReport& report) {
  using json = nlohmann::json;
  auto stats = [](const SeriesStats& s) {
    json j = {{"samples", s.samples}, {"p50_ms", s.p50_ms},       {"p90_ms", s.p90_ms},
              {"p99_ms", s.p99_ms},   {"p999_ms", s.p999_ms},     {"max_ms", s.max_ms},
              {"mean_ms", s.mean_ms}, {"stddev_ms", s.stddev_ms}, {"loss_rate", s.loss_rate}};
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
    json e = {{"ks", c.ks},
              {"ks_limit", c.ks_limit},
              {"w1_ms", c.w1_ms},
              {"p99_error", c.p99_error},
              {"p999_error", c.p999_error},
              {"loss_rate_error", c.loss_rate_error},
              {"pass", c.pass()},
              {"failures", c.failures}};
    e["burst_error"] = c.burst_error ? json(*c.burst_error) : json(nullptr);
    e["level"] = c.level;
    // +-inf (an interval the sample cannot bound) is null: JSON has no infinity.
    auto bound = [](double v) { return std::isinf(v) ? json(nullptr) : json(v); };
    json figures = json::object();
    for (const auto& f : c.figures) {
      figures[f.name] = {{"a", f.a ? json(*f.a) : json(nullptr)},
                         {"b", f.b ? json(*f.b) : json(nullptr)},
                         {"difference", f.difference},
                         {"low", bound(f.low)},
                         {"high", bound(f.high)},
                         {"basis", f.basis},
                         {"judged", f.judged},
                         {"pass", f.pass}};
    }
    e["figures"] = figures;
    comparisons[c.a + "_vs_" + c.b] = e;
  }
  j["comparisons"] = comparisons;
  j["verdict"] = report.pass ? "pass" : "fail";
  j["notes"] = report.notes;
  return j.dump(2);
}

}  // namespace shaper
