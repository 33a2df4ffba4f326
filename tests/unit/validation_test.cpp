// Validation against a shaped link: the link's own noise, measured through a constant-delay netem,
// is added to what the shaped link is compared with.
#include "shaper/validation.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>

using namespace shaper;
using namespace std::chrono_literals;

namespace {

// Every figure of a comparison, one a line: the message of a failed expectation.
std::string figures_text(const Comparison& c) {
  std::string out = c.a + " vs " + c.b + ":\n";
  for (const auto& f : c.figures) out += "  " + describe(f) + "\n";
  return out;
}

// `count` replies 10 ms apart, the i-th with the RTT rtt(i).
template <typename Rtt>
Trace ping_trace(std::size_t count, Rtt rtt) {
  Trace t;
  for (std::size_t i = 0; i < count; ++i) {
    RttSample s;
    s.seq = i;
    s.send_time = std::chrono::milliseconds(10) * static_cast<std::int64_t>(i);
    s.rtt = rtt(i);
    t.samples.push_back(s);
  }
  return t;
}

Trace calibration_trace(std::size_t replies, Nanoseconds base) {
  // Noise 0, 100, 200 ... 900 µs above the base, repeating.
  Trace t = ping_trace(replies, [&](std::size_t i) {
    return base + std::chrono::microseconds(100) * static_cast<std::int64_t>(i % 10);
  });
  RttSample lost;
  lost.seq = replies;
  t.samples.push_back(lost);
  return t;
}

DelaySeries series(const std::string& label, std::size_t n, Nanoseconds (*delay)(std::size_t)) {
  DelaySeries s;
  s.label = label;
  for (std::size_t i = 0; i < n; ++i) {
    s.sent.push_back(std::chrono::milliseconds(10) * static_cast<std::int64_t>(i));
    s.delay.push_back(delay(i));
  }
  return s;
}

// A capture that probed 10x faster in its first 10 s than in its next 10 s: 1000 probes 10 ms
// apart, then 100 probes 100 ms apart (19.9 s in all).
DelaySeries two_rate_capture() {
  DelaySeries capture;
  Nanoseconds t{0};
  for (int i = 0; i < 1100; ++i) {
    capture.sent.push_back(t);
    capture.delay.push_back(1ms);
    t += i < 1000 ? 10ms : 100ms;
  }
  return capture;
}

// Phases "calm" (1 ms) and "storm" (30 ms), 10 s each, looped.
Profile two_rate_profile() {
  Profile profile;
  profile.name = "two-rates";
  NetemSpec calm, storm;
  calm.delay.latency = 1ms;
  storm.delay.latency = 30ms;
  profile.phases.push_back(Phase{"calm", "", calm, TableSource::kNone, TableSource::kNone});
  profile.phases.push_back(Phase{"storm", "", storm, TableSource::kNone, TableSource::kNone});
  profile.schedule = Schedule{{{"calm", 10s}, {"storm", 10s}}, true, std::nullopt};
  return profile;
}

}  // namespace

TEST(LinkCalibration, TheNoiseIsWhatLiesAboveTheCalibrationsMinimum) {
  const auto calibration = link_calibration(calibration_trace(200, 10300us), std::nullopt);
  ASSERT_TRUE(calibration) << to_string(calibration.diagnostics());
  const auto& noise = calibration->noise;
  ASSERT_EQ(noise.size(), 200u);  // the lost probe carries no noise
  EXPECT_EQ(*std::min_element(noise.begin(), noise.end()), 0ns);
  EXPECT_EQ(*std::max_element(noise.begin(), noise.end()), 900us);
  EXPECT_FALSE(calibration->base) << "no constant delay given: the base is not measured";
  // Every RTT a multiple of 100 µs: printed that coarsely.
  EXPECT_EQ(calibration->print_step, 100us);
  // 0, 100 ... 900 repeating: lag-1 autocorrelation 0.7 or so, worth fewer than 200 probes.
  EXPECT_GT(calibration->effective_probes, 0);
  EXPECT_LT(calibration->effective_probes, 200);
}

TEST(LinkCalibration, WithItsConstantDelayTheLinksBaseIsMeasured) {
  Trace trace = calibration_trace(200, 10300us);
  trace.samples[3].rtt = 10300us + 7us;  // printed to the microsecond
  const auto calibration = link_calibration(trace, 10ms);
  ASSERT_TRUE(calibration) << to_string(calibration.diagnostics());
  ASSERT_TRUE(calibration->base);
  EXPECT_EQ(*calibration->base, 300us);
  EXPECT_EQ(calibration->print_step, 0ns);
}

TEST(LinkCalibration, AReplyFasterThanTheConstantDelayIsAProblem) {
  const auto calibration = link_calibration(calibration_trace(200, 10300us), 20ms);
  EXPECT_FALSE(calibration);
  const std::string problem = to_string(calibration.diagnostics());
  EXPECT_NE(problem.find("fastest reply took 10.3 ms, less than the constant delay of 20 ms"),
            std::string::npos)
      << problem;
}

TEST(LinkCalibration, TooFewRepliesIsAProblemNotANoiseModel) {
  const auto calibration = link_calibration(calibration_trace(99, 10ms), std::nullopt);
  EXPECT_FALSE(calibration);
  const std::string problem = to_string(calibration.diagnostics());
  EXPECT_NE(problem.find("99 replies"), std::string::npos) << problem;
}

TEST(CalibrationSampling, CountsTheCalibrationOnlyWhereTheNoiseShapesTheSeries) {
  std::vector<Nanoseconds> noise;
  for (int k = 0; k < 1000; ++k) noise.push_back(std::chrono::microseconds((k * 7919) % 100));
  // A constant delay: the noised series is the noise itself, known only to the calibration's own
  // precision (ratio 1 at every percentile).
  const DelaySeries constant =
      series("profile", 10000, [](std::size_t) { return Nanoseconds(5ms); });
  const CalibrationSampling at_constant = calibration_sampling(constant, noise, false, 1000);
  EXPECT_NEAR(at_constant.ks, 1.0 / 1000, 0.02 / 1000);
  EXPECT_NEAR(at_constant.p99, 1.0 / 1000, 0.02 / 1000);
  // Delays spread over 100 ms: 100 µs of noise hardly moves its CDF, nor an error in that noise.
  const DelaySeries wide = series("profile", 10000, [](std::size_t i) {
    return Nanoseconds(std::chrono::microseconds(10) *
                       static_cast<std::int64_t>((i * 7919) % 10000));
  });
  const CalibrationSampling at_wide = calibration_sampling(wide, noise, false, 1000);
  EXPECT_LT(at_wide.ks, 0.01 / 1000);
  EXPECT_LT(at_wide.p99, 0.01 / 1000);
  EXPECT_LT(at_wide.p999, 0.01 / 1000);
  // A noise of one value is known exactly, and a calibration worth nothing adds nothing.
  const CalibrationSampling exact =
      calibration_sampling(constant, std::vector<Nanoseconds>(1000, 50us), false, 1000);
  EXPECT_EQ(exact.ks, 0);
  EXPECT_EQ(exact.p99, 0);
  EXPECT_EQ(calibration_sampling(constant, noise, false, 0).p99, 0);
  // Halved: the mean of two draws varies less than one, and the ratio stays near 1.
  const double halved = calibration_sampling(constant, noise, true, 1000).ks;
  EXPECT_GT(halved, 0.5 / 1000);
  EXPECT_LT(halved, 2.0 / 1000);
}

namespace {

// 1000 probes of 0-99 µs noise, 50 of them stalled, 10 each by 2, 4, 6, 8 and 10 ms (the tenth of
// them, at the noised p99, the 10 ms ones): in five runs of 10 consecutive probes, or one probe in
// 20 with the levels taking turns.
std::vector<Nanoseconds> stalled_noise(bool in_runs) {
  std::vector<Nanoseconds> noise;
  for (int k = 0; k < 1000; ++k) {
    Nanoseconds v = std::chrono::microseconds((k * 7919) % 100);
    if (in_runs && k % 200 < 10) v += 2ms * (k / 200 + 1);
    if (!in_runs && k % 20 == 0) v += 2ms * ((k / 20) % 5 + 1);
    noise.push_back(v);
  }
  return noise;
}

}  // namespace

TEST(CalibrationSampling, CountsTheRunsOfStalledProbesAtTheQuantiles) {
  const DelaySeries constant =
      series("profile", 10000, [](std::size_t) { return Nanoseconds(5ms); });
  const CalibrationSampling scattered =
      calibration_sampling(constant, stalled_noise(false), false, 1000);
  const CalibrationSampling runs = calibration_sampling(constant, stalled_noise(true), false, 1000);
  // Scattered, the p99's ten probes are ten draws: the calibration counts as its 1000 probes, and
  // a series probed through that link meets no runs.
  EXPECT_NEAR(scattered.p99, 1.0 / 1000, 0.05 / 1000);
  EXPECT_DOUBLE_EQ(scattered.p99_clustering, 1.0);
  // In runs they are one run: by batch means (20 batches of 50, one of them 0.8 below the p99)
  // the share is about ten times as large, and so is a probed series' variance there.
  EXPECT_GT(runs.p99, 8.0 / 1000);
  EXPECT_GT(runs.p99_clustering, 8.0);
}

TEST(AddLinkNoise, AddsADrawToEveryDeliveredProbeAndKeepsLossesAndSeeds) {
  DelaySeries s = series("profile", 1000, [](std::size_t) { return Nanoseconds(5ms); });
  s.delay[7] = std::nullopt;
  const std::vector<Nanoseconds> noise = {0us, 1000us};
  const DelaySeries a = add_link_noise(s, noise, false, 3);
  const DelaySeries b = add_link_noise(s, noise, false, 3);
  EXPECT_EQ(a.delay, b.delay);
  EXPECT_FALSE(a.delay[7]);
  std::size_t raised = 0;
  for (std::size_t i = 0; i < a.delay.size(); ++i) {
    if (!a.delay[i]) continue;
    EXPECT_TRUE(*a.delay[i] == 5ms || *a.delay[i] == 6ms) << i;
    raised += *a.delay[i] == 6ms;
  }
  // Half of 999 draws, give or take 4 standard deviations (sqrt(999 / 4) = 15.8).
  EXPECT_NEAR(static_cast<double>(raised), 499.5, 64);
  // Halved: the mean of two draws, so 5.5 ms appears too.
  const DelaySeries h = add_link_noise(s, noise, true, 3);
  EXPECT_TRUE(
      std::any_of(h.delay.begin(), h.delay.end(), [](auto d) { return d && *d == 5500us; }));
}

TEST(ValidateSeries, ANoisyLinkPassesOnlyOnceItsNoiseIsAccountedFor) {
  // The profile: 2 to 12 ms. The shaped link: the same delays plus the link's 0-2 ms of noise.
  auto base = [](std::size_t i) {
    return Nanoseconds(2ms + std::chrono::microseconds(10) *
                                 static_cast<std::int64_t>((i * 7919) % 1000));
  };
  const DelaySeries capture = series("capture", 20000, base);
  const DelaySeries profile = series("profile", 20000, base);
  std::vector<Nanoseconds> noise;
  for (int k = 0; k <= 200; ++k) noise.push_back(std::chrono::microseconds(10) * k);
  DelaySeries shaped = add_link_noise(profile, noise, false, 99);
  shaped.label = "shaped";

  const ValidationReport raw = validate_series(capture, profile, &shaped);
  ASSERT_EQ(raw.comparisons.size(), 3u);
  EXPECT_FALSE(raw.comparisons[2].pass()) << "a 1 ms mean shift must fail KS";
  const LinkNoise link =
      with_link_noise(LinkCalibration{noise, std::nullopt, 0, 0ns}, profile, false);
  const ValidationReport calibrated = validate_series(capture, profile, &shaped, &link);
  for (const auto& c : calibrated.comparisons) {
    EXPECT_TRUE(c.pass()) << c.a << " vs " << c.b << ": KS " << c.ks;
  }
  ASSERT_FALSE(calibrated.notes.empty());
  EXPECT_NE(calibrated.notes.back().find("201 calibration probes"), std::string::npos)
      << calibrated.notes.back();
}

TEST(ValidateShapedOnly, OneComparisonAtTheShapedLinksThresholdsWithTheNoiseAdded) {
  auto base = [](std::size_t i) {
    return Nanoseconds(2ms + std::chrono::microseconds(10) *
                                 static_cast<std::int64_t>((i * 7919) % 1000));
  };
  const DelaySeries profile = series("profile", 20000, base);
  std::vector<Nanoseconds> noise;
  for (int k = 0; k <= 200; ++k) noise.push_back(std::chrono::microseconds(10) * k);
  DelaySeries shaped = add_link_noise(profile, noise, false, 99);
  shaped.label = "shaped";

  const ValidationReport raw = validate_shaped_only(shaped, profile);
  ASSERT_EQ(raw.comparisons.size(), 1u);
  EXPECT_EQ(raw.comparisons[0].a + " vs " + raw.comparisons[0].b, "profile vs shaped");
  EXPECT_FALSE(raw.pass) << "a 1 ms mean shift must fail KS";
  EXPECT_EQ(raw.capture.samples, 20000u);
  EXPECT_FALSE(raw.shaped.has_value());

  const LinkNoise link =
      with_link_noise(LinkCalibration{noise, std::nullopt, 0, 0ns}, profile, false);
  const ValidationReport calibrated = validate_shaped_only(shaped, profile, &link);
  EXPECT_TRUE(calibrated.pass) << "KS " << calibrated.comparisons[0].ks;
  // The shaped link's KS floor (0.05), not the profile's (0.02).
  EXPECT_DOUBLE_EQ(calibrated.comparisons[0].ks_limit, 0.05);
  ASSERT_FALSE(calibrated.notes.empty());
  EXPECT_NE(calibrated.notes[0].find("added to the profile"), std::string::npos)
      << calibrated.notes[0];
}

TEST(SimulateProfile, SendsEachProbeWhenTheCaptureSentItSoRegimesGetTheCapturesShareOfProbes) {
  // A capture that probed 10x faster in its first 10 s (calm) than in its next 10 s (storm): 1000
  // probes 10 ms apart, then 100 probes 100 ms apart. Replayed at one fixed interval, the storm
  // would hold half the probes (its share of the time); sent when the capture sent them, it holds
  // 100 of 1100, as in the capture.
  const DelaySeries capture = two_rate_capture();
  const Profile profile = two_rate_profile();

  const DelaySeries sim = simulate_profile(profile, capture, 10ms, 1);
  ASSERT_EQ(sim.sent, capture.sent);
  const auto storm_probes = std::count(sim.phase.begin(), sim.phase.end(), "storm");
  EXPECT_EQ(storm_probes, 100);
  for (std::size_t i = 0; i < sim.delay.size(); ++i) {
    ASSERT_TRUE(sim.delay[i]) << i;
    EXPECT_EQ(*sim.delay[i], i < 1000 ? 1ms : 30ms) << i;
  }

  // Without send times (a length only), one probe per interval.
  DelaySeries length_only;
  length_only.delay.resize(3);
  const DelaySeries periodic = simulate_profile(profile, length_only, 10ms, 1);
  EXPECT_EQ(periodic.sent, (std::vector<Nanoseconds>{0ms, 10ms, 20ms}));
}

TEST(SimulateProfile, CopiesRepeatTheCapturesSendTimesEachFromTheScheduleStart) {
  // The two-rate capture again (1000 calm probes 10 ms apart, 100 storm probes 100 ms apart, 19.9
  // s), under a looped 20 s schedule. Three copies: each starts where the schedule starts again (0,
  // 20 s, 40 s), so each meets the storm with the capture's 100 probes.
  const DelaySeries capture = two_rate_capture();
  const Profile profile = two_rate_profile();

  const DelaySeries sim = simulate_profile(profile, capture, 10ms, 1, 3);
  ASSERT_EQ(sim.sent.size(), 3300u);
  ASSERT_EQ(sim.delay.size(), 3300u);
  for (std::size_t copy = 0; copy < 3; ++copy) {
    for (std::size_t i = 0; i < capture.sent.size(); ++i) {
      ASSERT_EQ(sim.sent[copy * 1100 + i], capture.sent[i] + 20s * static_cast<std::int64_t>(copy))
          << copy << ' ' << i;
    }
  }
  EXPECT_EQ(std::count(sim.phase.begin(), sim.phase.end(), "storm"), 300);

  // Without a schedule, a copy starts one interval after the previous one's last probe.
  Profile single = profile;
  single.name = "one";
  single.phases.pop_back();  // calm only
  single.schedule.reset();
  const DelaySeries plain = simulate_profile(single, capture, 10ms, 1, 2);
  ASSERT_EQ(plain.sent.size(), 2200u);
  EXPECT_EQ(plain.sent[1100], capture.sent.back() + 10ms);
  EXPECT_EQ(plain.sent[2199], 2 * capture.sent.back() + 10ms);
}

TEST(SimulationCopies, ReachTheAskedProbesAndNeverFewerThanOneCopy) {
  EXPECT_EQ(simulation_copies(12000), 84u);  // 1 008 000 probes
  EXPECT_EQ(simulation_copies(1'000'000), 1u);
  EXPECT_EQ(simulation_copies(2'600'000), 1u);  // a 72-hour capture is simulated once
  EXPECT_EQ(simulation_copies(3, 10), 4u);
  EXPECT_EQ(simulation_copies(0), 1u);
  EXPECT_EQ(simulation_copies(500, 1), 1u);
}

TEST(ShapedSeries, TheLinksBaseIsReadAtTheLowEndNotAtAMinimumTheShapedRunNeverDrew) {
  // A profile whose smallest delay is a lone 0 ms among 10 000 between 1 and 2 ms, and a shaped run
  // of 4000 probes over a 0.5 ms link that never drew the 0 ms. Read at the minima, the link would
  // be taken as 1.5 ms and the whole shaped series shifted 1 ms low; read at the 1st percentiles,
  // it is the shaped series that the profile describes.
  DelaySeries profile;
  profile.delay.push_back(0ms);
  for (int i = 0; i < 10000; ++i) profile.delay.push_back(1ms + std::chrono::microseconds(i / 10));
  const Trace shaped = ping_trace(4000, [](std::size_t i) {
    return 500us + 1ms + std::chrono::microseconds((i * 7919) % 1000);
  });
  const DelaySeries s = shaped_series(shaped, profile, false);
  auto median = [](std::vector<Nanoseconds> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const Nanoseconds off = median(s.delivered()) - median(profile.delivered());
  EXPECT_LT(std::chrono::abs(off), 20us) << off.count() << " ns";

  // Halved: the link is crossed twice; what is left is halved.
  DelaySeries halved_profile = profile;
  for (auto& d : halved_profile.delay) *d /= 2;
  const DelaySeries h = shaped_series(shaped, halved_profile, true);
  EXPECT_LT(std::chrono::abs(median(h.delivered()) - median(halved_profile.delivered())), 20us);
}

TEST(ShapedSeries, AMeasuredBaseIsTakenAsItIsNotEstimated) {
  // The shaped RTTs: 1.5 to 2.5 ms. The profile: 1 to 2 ms. Estimated, the base would be 0.5 ms;
  // measured by the calibration as 0.3 ms, every delay is its RTT less 0.3 ms, whatever the
  // profile.
  DelaySeries profile;
  for (int i = 0; i < 10000; ++i) profile.delay.push_back(1ms + std::chrono::microseconds(i / 10));
  const Trace shaped = ping_trace(
      1000, [](std::size_t i) { return 1500us + std::chrono::microseconds((i * 7919) % 1000); });
  LinkNoise link = with_link_noise(LinkCalibration{{0ns}, 300us, 0, 0ns}, profile, false);
  const DelaySeries s = shaped_series(shaped, profile, false, &link);
  for (std::size_t i = 0; i < shaped.samples.size(); ++i) {
    ASSERT_EQ(s.delay[i], *shaped.samples[i].rtt - 300us) << i;
  }
  link.base.reset();
  EXPECT_EQ(shaped_series(shaped, profile, false, &link).delay[0], *shaped.samples[0].rtt - 500us);
}

TEST(ValidateShapedOnly, TailQuantilesAreJudgedWithinWhatTheShapedProbesCanResolve) {
  // A Pareto law (shape 1.5 from 1 ms) as the profile, 200 000 simulated probes; the shaped link is
  // 1000 probes of exactly that law (its quantiles at (j + 0.5) / 1000). Their p99.9 is their
  // second largest probe, 24 % below the law's: a 1000-probe trace cannot tell, and the verdict
  // must not fail it. A trace whose tail was cut at the law's p98 must still fail on p99. The
  // quantiles are visited in a scrambled order (j -> j * s mod n with s near n / golden ratio and
  // coprime with n, a bijection whose neighbours lie far apart), as a real trace visits them: in
  // ascending order, the series' lag-1 autocorrelation would be 1 and the samples worth almost
  // nothing.
  auto pareto = [](double u) {
    return Nanoseconds(static_cast<std::int64_t>(1e6 / std::pow(1 - u, 1 / 1.5)));
  };
  DelaySeries profile;
  profile.label = "profile";
  for (int i = 0; i < 200000; ++i) {
    profile.sent.push_back(10ms * i);
    profile.delay.push_back(pareto((static_cast<double>((i * 123607LL) % 200000) + 0.5) / 200000));
  }
  DelaySeries shaped, clipped;
  shaped.label = clipped.label = "shaped";
  for (int j = 0; j < 1000; ++j) {
    const double u = (static_cast<double>((j * 617) % 1000) + 0.5) / 1000;
    shaped.sent.push_back(10ms * j);
    shaped.delay.push_back(pareto(u));
    clipped.sent.push_back(10ms * j);
    clipped.delay.push_back(pareto(std::min(u, 0.98)));
  }
  const ValidationReport exact = validate_shaped_only(shaped, profile);
  ASSERT_EQ(exact.comparisons.size(), 1u);
  EXPECT_GT(std::fabs(exact.comparisons[0].p999_error),
            0.05);  // off by more than the tolerance ...
  EXPECT_TRUE(exact.pass) << testing::PrintToString(
      exact.comparisons[0].failures);  // ... and within the sample's reach

  const ValidationReport cut = validate_shaped_only(clipped, profile);
  EXPECT_LT(cut.comparisons[0].ks, cut.comparisons[0].ks_limit);  // the body is right
  EXPECT_FALSE(cut.pass) << figures_text(cut.comparisons[0]);
  ASSERT_FALSE(cut.comparisons[0].failures.empty());
  EXPECT_NE(cut.comparisons[0].failures[0].find("p99_ms 21.54 vs 13.57"), std::string::npos)
      << cut.comparisons[0].failures[0];
  EXPECT_NE(cut.comparisons[0].failures[0].find(
                "the shaped p99's 95 % interval (1000 probes, effective 1000: 13.57 to 13.57 ms)"),
            std::string::npos)
      << cut.comparisons[0].failures[0];
}

namespace {

// lab-regimes' regime-2 held (profiles/lab-regimes.json, compiled from
// tests/fixtures/captures/regimes.txt): Gilbert–Elliott loss of 6.1 % in bursts of 3, delay about
// 82 ms; scripts/demo probes it 50 times a second for 1050 probes.
Profile demo_regime2() {
  ProfileLoad load =
      load_profile_file(std::string(JITTERD_SOURCE_DIR) + "/profiles/lab-regimes.json");
  EXPECT_TRUE(load) << to_string(load.diagnostics());
  return *load->profile.held("regime-2");
}

DelaySeries every_20ms(std::size_t count) {
  DelaySeries like;
  for (std::size_t i = 0; i < count; ++i) {
    like.sent.push_back(20ms * static_cast<std::int64_t>(i));
    like.delay.push_back(0ns);
  }
  return like;
}

// A trace of `count` probes 20 ms apart with `bursts` bursts of 3 losses and `singles` single
// losses, evenly spread, and the delivered probes' delays taken in order from `drawn` (a simulation
// of the profile, its own losses skipped): delays drawn from the profile, losses placed by hand.
DelaySeries with_bursts_of_3(const DelaySeries& drawn, std::size_t count, std::size_t bursts,
                             std::size_t singles) {
  DelaySeries out = every_20ms(count);
  out.label = "shaped";
  const std::vector<Nanoseconds> delays = drawn.delivered();
  const std::size_t step = count / (bursts + singles);
  std::vector<bool> lost(count, false);
  for (std::size_t k = 0; k < bursts + singles; ++k) {
    for (std::size_t j = 0; j < (k < bursts ? 3u : 1u); ++j) lost[k * step + j] = true;
  }
  std::size_t next = 0;
  for (std::size_t i = 0; i < count; ++i)
    out.delay[i] = lost[i] ? std::nullopt : std::optional(delays.at(next++));
  return out;
}

const Figure& figure(const Comparison& c, const std::string& name) {
  for (const auto& f : c.figures) {
    if (f.name == name) return f;
  }
  throw std::runtime_error("no figure " + name);
}

}  // namespace

// The demo's regime-2 phase (issue 20 §1): the link lost 49 of 1050 probes (0.0467) in bursts of 3
// where the profile says 0.0606. That is 23 % low, outside the old fixed ±20 % band, and well
// inside what 1050 probes of bursty loss can show: about 17 bursts, the rate's standard error
// 0.015. A link that loses twice as much (0.12) still fails, on the loss rate; one whose delays are
// 20 % longer fails on KS.
TEST(ValidateShapedOnly, TheDemosRegime2LinkPassesOnLossWithinWhatItsBurstsAllow) {
  const Profile p = demo_regime2();
  const DelaySeries like = every_20ms(1050);
  const PreparedSeries profile(
      simulate_profile(p, like, 20ms, 1, simulation_copies(like.delay.size())));
  const DelaySeries drawn = simulate_profile(p, every_20ms(2000), 20ms, 7);

  const DelaySeries demo = with_bursts_of_3(drawn, 1050, 16, 1);  // 49 lost
  const ValidationReport ok = validate_shaped_only(demo, profile);
  const Comparison& c = ok.comparisons.front();
  EXPECT_NEAR(ok.capture.loss_rate, 0.0467, 0.0001);
  EXPECT_TRUE(ok.pass) << figures_text(c);
  const Figure& loss = figure(c, "loss_rate");
  EXPECT_TRUE(loss.judged);
  EXPECT_LT(loss.difference, -0.2 * 0.0606) << "outside the old band";
  EXPECT_GT(loss.high, 0.025) << describe(
      loss);  // 2.58 standard errors of ~0.015, not 20 % of 0.06
  EXPECT_NE(loss.basis.find("bursts and gaps"), std::string::npos) << loss.basis;

  const DelaySeries lossy = with_bursts_of_3(drawn, 1050, 42, 0);  // 126 lost: 0.12
  const ValidationReport twice = validate_shaped_only(lossy, profile);
  EXPECT_FALSE(twice.pass);
  EXPECT_FALSE(figure(twice.comparisons.front(), "loss_rate").pass)
      << figures_text(twice.comparisons.front());

  DelaySeries slow = demo;
  for (auto& d : slow.delay) {
    if (d) *d = *d * 6 / 5;
  }
  const ValidationReport late = validate_shaped_only(slow, profile);
  EXPECT_FALSE(late.pass);
  EXPECT_FALSE(figure(late.comparisons.front(), "ks").pass)
      << figures_text(late.comparisons.front());
}

namespace {

// `count` delays 20 ms + 2 ms x an AR(1) series of lag-1 correlation `rho` with a standard normal
// marginal (seeded), 10 ms apart: a capture whose delays drift as real ones do (0.6-0.65 at lag 1).
DelaySeries ar1_series(const std::string& label, std::size_t count, double rho,
                       std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  DelaySeries s;
  s.label = label;
  double x = normal(rng);
  for (std::size_t i = 0; i < count; ++i) {
    s.sent.push_back(10ms * static_cast<std::int64_t>(i));
    s.delay.push_back(Nanoseconds(static_cast<std::int64_t>(20e6 + 2e6 * x)));
    x = rho * x + std::sqrt(1 - rho * rho) * normal(rng);
  }
  return s;
}

}  // namespace

// KS under autocorrelation (issue 20 §1): 2000 probes with lag-1 correlation 0.6 count as 500
// independent ones (n (1 - r) / (1 + r); conservative for KS, whose indicators correlate less than
// the values), and their ECDF wanders further from the law than the iid critical value expects.
// Judged against the law itself (20 000 independent draws of the same marginal), 50 seeded captures
// fail KS at most as often as the level says (1.25 % of 50: 0.6; at most 3 allowed, P(> 3) = 0.3
// %); at the iid critical value (the old code's 0.0317) 10 of these 50 fail, four times the 5 % it
// promises.
TEST(ValidateSeries, KsCountsAnAutocorrelatedCaptureAtItsEffectiveSize) {
  const DelaySeries profile = ar1_series("profile", 20'000, 0.0, 1);
  int failed_ks = 0, failed_iid = 0;
  for (std::uint64_t seed = 100; seed < 150; ++seed) {
    const DelaySeries capture = ar1_series("capture", 2000, 0.6, seed);
    const ValidationReport r = validate_series(capture, profile, nullptr);
    const Comparison& c = r.comparisons.front();
    failed_ks += !figure(c, "ks").pass;
    failed_iid += c.ks > ks_critical_value(2000, 20'000, 0.05).value();
    ASSERT_TRUE(r.capture.lag1_autocorr);
    EXPECT_NEAR(*r.capture.lag1_autocorr, 0.6, 0.1);
    // The timeline is reported, not judged: the profile is of independent draws.
    EXPECT_FALSE(figure(c, "lag1_autocorr").judged);
    EXPECT_FALSE(figure(c, "stall_ks").judged);
  }
  EXPECT_LE(failed_ks, 3);
  EXPECT_GE(failed_iid, 8) << "the iid critical value is too tight for these captures";
}

// With judge_timeline (a profile that claims to replay the capture in time), the lag-1
// autocorrelation and the stall lengths are judged: a profile of independent draws fails on both
// against a capture of lag-1 0.6; one that replays an AR(1) of the same correlation passes.
TEST(ValidateSeries, TheTimelineIsJudgedOnlyWhenTheProfileClaimsToReplayIt) {
  const DelaySeries capture = ar1_series("capture", 5000, 0.6, 3);
  const DelaySeries iid = ar1_series("profile", 50'000, 0.0, 4);
  const DelaySeries replay = ar1_series("profile", 50'000, 0.6, 5);
  ValidationOptions timeline;
  timeline.judge_timeline = true;

  const Comparison plain = validate_series(capture, iid, nullptr).comparisons.front();
  EXPECT_TRUE(plain.pass()) << figures_text(plain);
  EXPECT_FALSE(figure(plain, "lag1_autocorr").judged);

  const Comparison judged =
      validate_series(capture, iid, nullptr, nullptr, timeline).comparisons.front();
  EXPECT_FALSE(judged.pass());
  EXPECT_FALSE(figure(judged, "lag1_autocorr").pass) << figures_text(judged);
  EXPECT_FALSE(figure(judged, "stall_ks").pass) << figures_text(judged);
  // Stalls: above the capture's p90, so about a tenth of the probes stall in both series; the
  // capture's come in longer runs.
  EXPECT_GT(*figure(judged, "stall_ks").a, *figure(judged, "stall_ks").b);

  const Comparison replayed =
      validate_series(capture, replay, nullptr, nullptr, timeline).comparisons.front();
  EXPECT_TRUE(figure(replayed, "lag1_autocorr").judged);
  EXPECT_TRUE(figure(replayed, "stall_ks").judged);
  EXPECT_TRUE(replayed.pass()) << figures_text(replayed);
}

// Each figure in the JSON report says its limit and why (docs/validation.md, "--json").
TEST(ValidationJson, EveryFigureCarriesItsLimitAndBasis) {
  const DelaySeries capture = ar1_series("capture", 2000, 0.6, 3);
  const DelaySeries profile = ar1_series("profile", 20'000, 0.0, 4);
  const auto j = nlohmann::json::parse(validation_json(validate_series(capture, profile, nullptr)));
  const auto& c = j.at("comparisons").at("capture_vs_profile");
  // 5 % split among at most four figures (KS, p99, p99.9, loss rate; no bursts to judge), fewer
  // where a tolerance is wider than the sampling interval (here the loss rate's: neither series
  // loses).
  const double shares = 0.05 / c.at("level").get<double>();
  EXPECT_NEAR(shares, std::round(shares), 1e-9);
  EXPECT_GE(shares, 1);
  EXPECT_LE(shares, 3);
  for (const char* name :
       {"ks", "p99_ms", "p999_ms", "loss_rate", "mean_loss_burst", "lag1_autocorr", "stall_ks"}) {
    const auto& f = c.at("figures").at(name);
    for (const char* key : {"a", "b", "difference", "low", "high", "basis", "judged", "pass"}) {
      EXPECT_TRUE(f.contains(key)) << name << " has no " << key;
    }
  }
  EXPECT_EQ(c.at("figures").at("ks").at("high").get<double>(), c.at("ks_limit").get<double>());
  EXPECT_FALSE(c.at("figures").at("mean_loss_burst").at("judged").get<bool>());
}
