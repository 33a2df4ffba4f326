// Calibration of validate's verdict by simulation: a profile judged against shaped traces drawn
// from itself (simulate_profile with other seeds standing in for the shaped link) must pass about
// as often as the verdict's level promises, and one judged against a link that is off must fail.
// The figures measured here are in docs/validation.md ("Calibration").
//
// The profile is the phase the demo fails on: lab-regimes' regime-2 (profiles/lab-regimes.json,
// compiled from tests/fixtures/captures/regimes.txt), held, as `jitterctl validate --phase
// regime-2` judges it: Gilbert–Elliott loss of 6.1 % in bursts of 3.0 (p 0.0218, r 0.336), delay 82
// ms from a table of sigma 20 ms, probed 50 times a second as scripts/demo does.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "shaper/profile.hpp"
#include "shaper/trace.hpp"
#include "shaper/validation.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

// scripts/demo pings every 20 ms.
constexpr Nanoseconds kInterval = 20ms;

Profile lab_regimes(const std::string& phase) {
  ProfileLoad load =
      load_profile_file(std::string(JITTERD_SOURCE_DIR) + "/profiles/lab-regimes.json");
  if (!load) throw std::runtime_error("lab-regimes: " + to_string(load.diagnostics()));
  auto held = load->profile.held(phase);
  if (!held) throw std::runtime_error("lab-regimes has no " + phase);
  return *held;
}

Profile regime2() {
  return lab_regimes("regime-2");
}

DelaySeries probes(std::size_t count) {
  DelaySeries like;
  for (std::size_t i = 0; i < count; ++i) {
    like.sent.push_back(kInterval * static_cast<std::int64_t>(i));
    like.delay.push_back(0ns);
  }
  return like;
}

// The one phase's loss rate scaled by `loss`, its delays (latency and table scale) by `delay`.
Profile off_by(Profile profile, double loss, double delay) {
  NetemSpec& spec = profile.phases.front().spec;
  spec.delay.latency = Nanoseconds(
      static_cast<std::int64_t>(static_cast<double>(spec.delay.latency.count()) * delay));
  spec.delay.jitter = Nanoseconds(
      static_cast<std::int64_t>(static_cast<double>(spec.delay.jitter.count()) * delay));
  auto& ge = std::get<GilbertElliottLoss>(spec.loss);
  // Stationary loss p / (p + r) with loss_bad 1 and loss_good 0; r (the burst length) is kept and p
  // solved for the scaled rate.
  const double rate = ge.p.value() / (ge.p.value() + ge.r.value()) * loss;
  ge.p = *Probability::make(rate * ge.r.value() / (1 - rate));
  return profile;
}

struct Outcome {
  std::size_t trials = 0;
  std::size_t passed = 0;
  std::map<std::string, std::size_t> failed_by;  // figure name -> trials it failed
  // One trial's verdict, and the figures it failed by.
  void add(const ValidationReport& report) {
    ++trials;
    passed += report.pass;
    for (const auto& f : report.comparisons.front().figures) {
      if (!f.pass) ++failed_by[f.name];
    }
  }
  double pass_rate() const { return static_cast<double>(passed) / static_cast<double>(trials); }
  std::string text() const {
    std::string out =
        std::to_string(passed) + " of " + std::to_string(trials) + " passed; failed by figure:";
    for (const auto& [name, count] : failed_by) out += " " + name + " " + std::to_string(count);
    return out;
  }
};

// `trials` shaped traces of `count` probes drawn from `link` (seeds 1000 on), each judged against
// `claimed` simulated once for `reference` probes (seed 1), as validate_shaped_only judges them.
Outcome calibrate(const Profile& claimed, const Profile& link, std::size_t count,
                  std::size_t trials, std::size_t reference) {
  const DelaySeries like = probes(count);
  const PreparedSeries profile(
      simulate_profile(claimed, like, kInterval, 1, simulation_copies(count, reference)));
  Outcome out;
  for (std::size_t t = 0; t < trials; ++t) {
    DelaySeries shaped = simulate_profile(link, like, kInterval, 1000 + t);
    shaped.label = "shaped";
    const ValidationReport report = validate_shaped_only(shaped, profile);
    out.add(report);
  }
  std::printf("%zu probes against %zu: %s\n", count, profile.series.delay.size(),
              out.text().c_str());
  return out;
}

// The pass rate of 1000 faithful trials has a binomial spread of sqrt(0.95 * 0.05 / 1000) = 0.7 %;
// ±3 % (issue 20 §1) is four of those: a verdict whose level is what it claims stays inside.
constexpr double kPassRate = 0.95;
constexpr double kPassTolerance = 0.03;
constexpr std::size_t kTrials = 1000;
// The profile side: simulated once, 100 times the trace's probes (docs/validation.md: jitterctl
// validate simulates a million; at 100 times the trace, the profile's own noise adds 1 % to the
// variance of a difference, and the verdict counts it).
constexpr std::size_t kReferenceFactor = 100;
// "Fails in most trials" (issue 20 §1).
constexpr double kMostTrials = 0.5;

double fail_rate(const Outcome& o) {
  return 1 - o.pass_rate();
}

}  // namespace

TEST(ValidationCalibration, AFaithfulLinkOf1000ProbesPasses95PercentOfTrials) {
  const Profile p = regime2();
  const Outcome o = calibrate(p, p, 1000, kTrials, 1000 * kReferenceFactor);
  EXPECT_NEAR(o.pass_rate(), kPassRate, kPassTolerance) << o.text();
}

// 1000 probes resolve a delay 10 % off (KS at 0.05 against a shift of 0.4 sigma), not a loss rate
// 30 % off (the rate's own 99 % interval is ±0.04 around 0.06): that takes the 10 000-probe run
// below.
TEST(ValidationCalibration, ADelayOff10PercentFailsMostTrialsOf1000Probes) {
  const Profile p = regime2();
  for (const double delay : {0.9, 1.1}) {
    const Outcome o = calibrate(off_by(p, 1, delay), p, 1000, kTrials, 1000 * kReferenceFactor);
    EXPECT_GT(fail_rate(o), kMostTrials) << "delay x" << delay << ": " << o.text();
  }
}

TEST(ValidationCalibration, SlowAFaithfulLinkOf10000ProbesPasses95PercentOfTrials) {
  const Profile p = regime2();
  const Outcome o = calibrate(p, p, 10'000, kTrials, 10'000 * kReferenceFactor);
  EXPECT_NEAR(o.pass_rate(), kPassRate, kPassTolerance) << o.text();
}

TEST(ValidationCalibration, SlowALossOrDelayOffFailsMostTrialsOf10000Probes) {
  const Profile p = regime2();
  for (const auto& [loss, delay] : {std::pair{0.7, 1.0}, {1.3, 1.0}, {1.0, 0.9}, {1.0, 1.1}}) {
    const Outcome o =
        calibrate(off_by(p, loss, delay), p, 10'000, kTrials, 10'000 * kReferenceFactor);
    EXPECT_GT(fail_rate(o), kMostTrials)
        << "loss x" << loss << ", delay x" << delay << ": " << o.text();
  }
}

// ---- Through a link with noise of its own, as ping prints it
// --------------------------------------
//
// What the demo judges: ping's RTTs through a veth whose own noise (timers, softirqs) adds to the
// profile's delay, printed at ping's resolution, and the link's noise measured by a calibration run
// through a constant netem delay. The faithful link here draws its noise from a continuous model of
// the bed's (the calibration fixture's values spread over their 0.1 ms print interval) and prints
// its RTTs the way iputils' ping does.

namespace {

// iputils ping (ping_common.c): the RTT in whole microseconds, printed to 3 significant decimals
// and rounded there: µs below 1 ms, 10 µs below 10 ms, 100 µs below 100 ms, whole ms above.
Nanoseconds as_ping_prints(Nanoseconds rtt) {
  const std::int64_t us = rtt.count() / 1000;
  std::int64_t printed = us;
  if (us >= 100'000 - 50) {
    printed = (us + 500) / 1000 * 1000;
  } else if (us >= 10'000 - 5) {
    printed = (us + 50) / 100 * 100;
  } else if (us >= 1000) {
    printed = (us + 5) / 10 * 10;
  }
  return Nanoseconds(printed * 1000);
}

class LinkModel {
 public:
  explicit LinkModel(std::uint64_t seed) : rng_(seed) {
    const Trace fixture = parse_trace_file(std::string(JITTERD_SOURCE_DIR) +
                                           "/tests/fixtures/captures/link-calibration.txt");
    auto calibration = link_calibration(fixture, std::nullopt);
    if (!calibration) {
      throw std::runtime_error("link-calibration.txt: " + to_string(calibration.diagnostics()));
    }
    printed_ = std::move(calibration->noise);
  }
  // One draw of the link's own noise.
  Nanoseconds noise() {
    const Nanoseconds v = printed_[rng_() % printed_.size()];
    std::uniform_int_distribution<std::int64_t> spread(-50'000, 50'000);
    return std::max(v + Nanoseconds(spread(rng_)), 0ns);
  }
  // ping's output through the link: its base round trip, `delays` and the noise, as printed.
  Trace ping(const std::vector<std::optional<Nanoseconds>>& delays) {
    Trace t;
    t.format = TraceFormat::kPing;
    t.interval = kInterval;
    for (std::size_t i = 0; i < delays.size(); ++i) {
      RttSample s;
      s.seq = i;
      s.send_time = kInterval * static_cast<std::int64_t>(i);
      if (delays[i]) s.rtt = as_ping_prints(kBase + *delays[i] + noise());
      t.samples.push_back(s);
    }
    return t;
  }

 private:
  static constexpr Nanoseconds kBase = 40us;  // a veth's own round trip in the bed
  std::mt19937_64 rng_;
  std::vector<Nanoseconds> printed_;
};

// `trials` runs of the demo's procedure on a faithful link: a calibration of 1000 probes through a
// constant `calibration_delay`, then `count` probes through `profile` (the link draws them with
// seeds 1000 on), judged as `jitterctl validate --shaped --link-calibration` judges them.
Outcome calibrate_through_link(const Profile& profile, Nanoseconds calibration_delay,
                               std::size_t count, std::size_t trials) {
  const DelaySeries like = probes(count);
  const DelaySeries reference =
      simulate_profile(profile, like, kInterval, 1, simulation_copies(count, 100 * count));
  LinkModel link(7);
  Outcome out;
  for (std::size_t t = 0; t < trials; ++t) {
    const Trace calibration =
        link.ping(std::vector<std::optional<Nanoseconds>>(1000, calibration_delay));
    auto measured = link_calibration(calibration, calibration_delay);
    if (!measured) throw std::runtime_error(to_string(measured.diagnostics()));
    const LinkNoise noise = with_link_noise(std::move(*measured), reference, false);
    const Trace shaped_trace =
        link.ping(simulate_profile(profile, like, kInterval, 1000 + t).delay);
    const DelaySeries shaped = shaped_series(shaped_trace, reference, false, &noise);
    const ValidationReport report = validate_shaped_only(shaped, reference, &noise);
    out.add(report);
  }
  std::printf("%s through a noisy link, calibrated at %.1f ms, %zu probes: %s\n",
              profile.phases.front().name.c_str(),
              static_cast<double>(calibration_delay.count()) / 1e6, count, out.text().c_str());
  std::fflush(stdout);
  return out;
}

}  // namespace

// The procedure docs/validation.md gives: calibrate through a constant 500 µs (ping prints µs) and
// give that delay, so that the link's base is measured. Each phase of the demo's profile, 1000
// trials of 1000 probes.
TEST(ValidationCalibration, SlowAFaithfulNoisyLinkAsPingPrintsItPasses95PercentOfTrials) {
  for (const char* phase : {"regime-1", "regime-2"}) {
    const Outcome o = calibrate_through_link(lab_regimes(phase), 500us, 1000, kTrials);
    EXPECT_NEAR(o.pass_rate(), kPassRate, kPassTolerance) << phase << ": " << o.text();
  }
}

// ---- Through a link that stalls
// ---------------------------------------------------------------
//
// A loaded machine's link (a fleet's pairs in the bed, docs/validation.md "Fleets"): most probes
// see a tenth of a millisecond of noise, one in twenty meets a stall of up to 15 ms. The noise's
// upper tail, which reaches the p99 of a profile 20 ms +- 4.2 ms (two 10 ms +- 3 ms lanes), is then
// known only to the precision of the calibration's few stalled probes, and a judge that counts
// only the shaped probes' sampling at the p99 fails a faithful link more often than its level.
// Stalls that come in runs (a busy second of the machine delays the consecutive probes in it) make
// both the calibration's tail and the shaped probes' depend on a few runs, not on as many
// independent probes: a judge that counts probes (or their lag-1 autocorrelation) there fails a
// faithful link more often again.

namespace {

Profile pair_of_lanes() {
  ProfileLoad load = parse_profile(R"({"version": 1, "name": "pair", "phases": {"p": {"delay":
      {"latency": "20ms", "jitter": "4243us", "distribution": "normal"}}}})");
  if (!load) throw std::runtime_error("pair: " + to_string(load.diagnostics()));
  return load->profile;
}

// `trials` runs of a calibration of 1000 probes through a constant `calibration_delay` and
// `count` probes through `profile`, both through a link whose noise stalls as above (seeded): each
// probe on its own (`run` 1), or in runs of `run` consecutive probes that start at 0.05 / `run` a
// probe (about the same share of stalled probes), each probe of a run with its own stall.
Outcome calibrate_through_stalls(const Profile& profile, Nanoseconds calibration_delay,
                                 std::size_t count, std::size_t trials, std::size_t run = 1) {
  const DelaySeries like = probes(count);
  const DelaySeries reference =
      simulate_profile(profile, like, kInterval, 1, simulation_copies(count, 100 * count));
  std::mt19937_64 rng(11);
  std::exponential_distribution<double> quiet(1 / 100e3);  // ns: a mean of 0.1 ms
  std::uniform_real_distribution<double> stall(0, 15e6);
  std::bernoulli_distribution stalls(0.05);
  std::bernoulli_distribution starts(0.05 / static_cast<double>(run));
  std::size_t left = 0;  // probes left in the run under way
  auto stalled = [&] {
    if (run == 1) return stalls(rng);
    if (left == 0 && starts(rng)) left = run;
    if (left == 0) return false;
    --left;
    return true;
  };
  auto through_link = [&](const std::vector<std::optional<Nanoseconds>>& delays) {
    Trace t;
    t.interval = kInterval;
    for (std::size_t i = 0; i < delays.size(); ++i) {
      RttSample s;
      s.seq = i;
      s.send_time = kInterval * static_cast<std::int64_t>(i);
      const double noise = quiet(rng) + (stalled() ? stall(rng) : 0);
      if (delays[i]) s.rtt = 40us + *delays[i] + Nanoseconds(static_cast<std::int64_t>(noise));
      t.samples.push_back(s);
    }
    return t;
  };
  Outcome out;
  for (std::size_t t = 0; t < trials; ++t) {
    auto measured = link_calibration(
        through_link(std::vector<std::optional<Nanoseconds>>(1000, calibration_delay)),
        calibration_delay);
    if (!measured) throw std::runtime_error(to_string(measured.diagnostics()));
    const LinkNoise noise = with_link_noise(std::move(*measured), reference, false);
    const Trace shaped_trace =
        through_link(simulate_profile(profile, like, kInterval, 1000 + t).delay);
    const DelaySeries shaped = shaped_series(shaped_trace, reference, false, &noise);
    const ValidationReport report = validate_shaped_only(shaped, reference, &noise);
    out.add(report);
  }
  std::printf("a pair of lanes through a link stalling in runs of %zu, %zu probes: %s\n", run,
              count, out.text().c_str());
  std::fflush(stdout);
  return out;
}

}  // namespace

// 500 trials (half the others': each judges a 200 000-probe expected series against a fresh
// calibration). The p99 is one of four judged figures here (KS, p99, p99.9, loss rate), so its
// share of the 5 % level is about 1.25 %: 6 of 500 trials. A judge that counted only the shaped
// probes' sampling at the p99 failed it in 13 of these 500 (docs/validation.md, "p99 and p99.9
// count it too").
TEST(ValidationCalibration, SlowAFaithfulLinkThatStallsFailsItsP99NoMoreThanItsShare) {
  constexpr std::size_t kStallTrials = 500;
  const Outcome o = calibrate_through_stalls(pair_of_lanes(), 20ms, 1000, kStallTrials);
  EXPECT_GE(o.pass_rate(), kPassRate - kPassTolerance) << o.text();
  const auto p99 = o.failed_by.find("p99_ms");
  EXPECT_LE(p99 == o.failed_by.end() ? 0 : p99->second, kStallTrials * 0.0125) << o.text();
}

// The same with the stalls in runs of 10 consecutive probes (200 ms at the fleet's 20 ms interval).
// A judge that counted the calibration at its values' lag-1 autocorrelation, and the shaped p99 at
// its probes' (the values' and the exceedances'), failed the p99 in 13 of these 500, twice its
// share; counting the runs by batch means, 7 (docs/validation.md, "Stalls in runs"). The bound is
// the share and two standard deviations of a count at the share (Poisson): 6.25 + 2 * 2.5.
TEST(ValidationCalibration, SlowAFaithfulLinkThatStallsInRunsFailsItsP99NoMoreThanItsShare) {
  constexpr std::size_t kStallTrials = 500;
  const Outcome o = calibrate_through_stalls(pair_of_lanes(), 20ms, 1000, kStallTrials, 10);
  EXPECT_GE(o.pass_rate(), kPassRate - kPassTolerance) << o.text();
  const auto p99 = o.failed_by.find("p99_ms");
  const double share = kStallTrials * 0.0125;
  EXPECT_LE(p99 == o.failed_by.end() ? 0 : p99->second, share + 2 * std::sqrt(share)) << o.text();
}
