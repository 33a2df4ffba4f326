// Validation against a shaped link: the link's own noise, measured through a constant-delay netem, is
// added to what the shaped link is compared with.
#include "shaper/validation.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>

using namespace shaper;
using namespace std::chrono_literals;

namespace {

Trace calibration_trace(std::size_t replies, Nanoseconds base) {
  Trace t;
  for (std::size_t i = 0; i < replies; ++i) {
    RttSample s;
    s.seq = i;
    s.send_time = std::chrono::milliseconds(10) * static_cast<std::int64_t>(i);
    // Noise 0, 100, 200 ... 900 µs above the base, repeating.
    s.rtt = base + std::chrono::microseconds(100) * static_cast<std::int64_t>(i % 10);
    t.samples.push_back(s);
  }
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

// A capture that probed 10x faster in its first 10 s than in its next 10 s: 1000 probes 10 ms apart,
// then 100 probes 100 ms apart (19.9 s in all).
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
  profile.schedule = Schedule{{{"calm", 10s}, {"storm", 10s}}, true};
  return profile;
}

}  // namespace

TEST(LinkNoise, IsWhatLiesAboveTheCalibrationsMinimum) {
  std::string problem;
  const auto noise = link_noise(calibration_trace(200, 10300us), &problem);
  ASSERT_TRUE(noise) << problem;
  ASSERT_EQ(noise->size(), 200u);  // the lost probe carries no noise
  EXPECT_EQ(*std::min_element(noise->begin(), noise->end()), 0ns);
  EXPECT_EQ(*std::max_element(noise->begin(), noise->end()), 900us);
}

TEST(LinkNoise, TooFewRepliesIsAProblemNotANoiseModel) {
  std::string problem;
  EXPECT_FALSE(link_noise(calibration_trace(99, 10ms), &problem));
  EXPECT_NE(problem.find("99 replies"), std::string::npos) << problem;
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
  EXPECT_TRUE(std::any_of(h.delay.begin(), h.delay.end(), [](auto d) { return d && *d == 5500us; }));
}

TEST(ValidateSeries, ANoisyLinkPassesOnlyOnceItsNoiseIsAccountedFor) {
  // The profile: 2 to 12 ms. The shaped link: the same delays plus the link's 0-2 ms of noise.
  auto base = [](std::size_t i) { return Nanoseconds(2ms + std::chrono::microseconds(10) * static_cast<std::int64_t>((i * 7919) % 1000)); };
  const DelaySeries capture = series("capture", 20000, base);
  const DelaySeries profile = series("profile", 20000, base);
  std::vector<Nanoseconds> noise;
  for (int k = 0; k <= 200; ++k) noise.push_back(std::chrono::microseconds(10) * k);
  DelaySeries shaped = add_link_noise(profile, noise, false, 99);
  shaped.label = "shaped";

  const ValidationReport raw = validate_series(capture, profile, &shaped);
  ASSERT_EQ(raw.comparisons.size(), 3u);
  EXPECT_FALSE(raw.comparisons[2].pass()) << "a 1 ms mean shift must fail KS";
  const LinkNoise link = with_link_noise(noise, profile, false);
  const ValidationReport calibrated = validate_series(capture, profile, &shaped, &link);
  for (const auto& c : calibrated.comparisons) {
    EXPECT_TRUE(c.pass()) << c.a << " vs " << c.b << ": KS " << c.ks;
  }
  ASSERT_FALSE(calibrated.notes.empty());
  EXPECT_NE(calibrated.notes.back().find("201 calibration probes"), std::string::npos) << calibrated.notes.back();
}

TEST(ValidateShapedOnly, OneComparisonAtTheShapedLinksThresholdsWithTheNoiseAdded) {
  auto base = [](std::size_t i) { return Nanoseconds(2ms + std::chrono::microseconds(10) * static_cast<std::int64_t>((i * 7919) % 1000)); };
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

  const LinkNoise link = with_link_noise(noise, profile, false);
  const ValidationReport calibrated = validate_shaped_only(shaped, profile, &link);
  EXPECT_TRUE(calibrated.pass) << "KS " << calibrated.comparisons[0].ks;
  // The shaped link's KS floor (0.05), not the profile's (0.02).
  EXPECT_DOUBLE_EQ(calibrated.comparisons[0].ks_limit, 0.05);
  ASSERT_FALSE(calibrated.notes.empty());
  EXPECT_NE(calibrated.notes[0].find("added to the profile"), std::string::npos) << calibrated.notes[0];
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
  // The two-rate capture again (1000 calm probes 10 ms apart, 100 storm probes 100 ms apart, 19.9 s),
  // under a looped 20 s schedule. Three copies: each starts where the schedule starts again (0, 20 s,
  // 40 s), so each meets the storm with the capture's 100 probes.
  const DelaySeries capture = two_rate_capture();
  const Profile profile = two_rate_profile();

  const DelaySeries sim = simulate_profile(profile, capture, 10ms, 1, 3);
  ASSERT_EQ(sim.sent.size(), 3300u);
  ASSERT_EQ(sim.delay.size(), 3300u);
  for (std::size_t copy = 0; copy < 3; ++copy) {
    for (std::size_t i = 0; i < capture.sent.size(); ++i) {
      ASSERT_EQ(sim.sent[copy * 1100 + i], capture.sent[i] + 20s * static_cast<std::int64_t>(copy)) << copy << ' ' << i;
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
  // A profile whose smallest delay is a lone 0 ms among 10 000 between 1 and 2 ms, and a shaped run of
  // 4000 probes over a 0.5 ms link that never drew the 0 ms. Read at the minima, the link would be
  // taken as 1.5 ms and the whole shaped series shifted 1 ms low; read at the 1st percentiles, it is
  // the shaped series that the profile describes.
  DelaySeries profile;
  profile.delay.push_back(0ms);
  for (int i = 0; i < 10000; ++i) profile.delay.push_back(1ms + std::chrono::microseconds(i / 10));
  Trace shaped;
  for (std::size_t i = 0; i < 4000; ++i) {
    RttSample s;
    s.seq = i;
    s.send_time = 10ms * static_cast<std::int64_t>(i);
    s.rtt = 500us + 1ms + std::chrono::microseconds((i * 7919) % 1000);
    shaped.samples.push_back(s);
  }
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

TEST(ValidateShapedOnly, TailQuantilesAreJudgedWithinWhatTheShapedProbesCanResolve) {
  // A Pareto law (shape 1.5 from 1 ms) as the profile, 200 000 simulated probes; the shaped link is
  // 1000 probes of exactly that law (its quantiles at (j + 0.5) / 1000). Their p99.9 is their
  // second largest probe, 24 % below the law's: a 1000-probe trace cannot tell, and the verdict must not
  // fail it. A trace whose tail was cut at the law's p98 must still fail on p99.
  auto pareto = [](double u) { return Nanoseconds(static_cast<std::int64_t>(1e6 / std::pow(1 - u, 1 / 1.5))); };
  DelaySeries profile;
  profile.label = "profile";
  for (int i = 0; i < 200000; ++i) {
    profile.sent.push_back(10ms * i);
    profile.delay.push_back(pareto((i + 0.5) / 200000));
  }
  DelaySeries shaped, clipped;
  shaped.label = clipped.label = "shaped";
  for (int j = 0; j < 1000; ++j) {
    const double u = (j + 0.5) / 1000;
    shaped.sent.push_back(10ms * j);
    shaped.delay.push_back(pareto(u));
    clipped.sent.push_back(10ms * j);
    clipped.delay.push_back(pareto(std::min(u, 0.98)));
  }
  const ValidationReport exact = validate_shaped_only(shaped, profile);
  ASSERT_EQ(exact.comparisons.size(), 1u);
  EXPECT_GT(std::fabs(exact.comparisons[0].p999_error), 0.05);  // off by more than the tolerance ...
  EXPECT_TRUE(exact.pass) << testing::PrintToString(exact.comparisons[0].failures);  // ... and within the sample's reach

  const ValidationReport cut = validate_shaped_only(clipped, profile);
  EXPECT_LT(cut.comparisons[0].ks, cut.comparisons[0].ks_limit);  // the body is right
  EXPECT_FALSE(cut.pass);
  ASSERT_FALSE(cut.comparisons[0].failures.empty());
  EXPECT_NE(cut.comparisons[0].failures[0].find("p99 off by"), std::string::npos) << cut.comparisons[0].failures[0];
  EXPECT_NE(cut.comparisons[0].failures[0].find("95 % interval"), std::string::npos) << cut.comparisons[0].failures[0];
}
