// The judge of `jitterctl fleet validate` (ctl/fleet_validation.hpp): which pairs are probed, the
// level each pair gets, the expected series of a pair (two lanes crossed: delays added, lost when
// either loses), and a pair judged with and without a calibration. The probes themselves run in the
// kernel e2e (tests/e2e/fleet_test.cpp).
#include "fleet_validation.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace jitterctl {
namespace {

using namespace std::chrono_literals;

TEST(FleetPairs, AllIsEveryOrderedPairAndRingIsEachHostToTheNext) {
  using P = std::vector<std::pair<std::size_t, std::size_t>>;
  EXPECT_EQ(probe_pairs(3, PairMode::kAll), (P{{0, 1}, {0, 2}, {1, 0}, {1, 2}, {2, 0}, {2, 1}}));
  EXPECT_EQ(probe_pairs(4, PairMode::kRing), (P{{0, 1}, {1, 2}, {2, 3}, {3, 0}}));
  EXPECT_EQ(probe_pairs(2, PairMode::kRing), (P{{0, 1}, {1, 0}}));
  EXPECT_TRUE(probe_pairs(1, PairMode::kAll).empty());
  EXPECT_EQ(probe_pairs(16, PairMode::kAll).size(), 240u);
  EXPECT_EQ(pair_mode_from_name("ring"), PairMode::kRing);
  EXPECT_FALSE(pair_mode_from_name("star"));
}

TEST(FleetPairs, BonferroniSplitsTheLevelOverThePairs) {
  EXPECT_DOUBLE_EQ(pair_level(0.05, 12), 0.05 / 12);
  EXPECT_DOUBLE_EQ(pair_level(0.05, 1), 0.05);
}

shaper::Profile phase_profile(Nanoseconds latency, Nanoseconds jitter, double loss) {
  std::string text = R"({"version": 1, "name": "t", "phases": {"p": {"delay": {"latency": ")" +
                     std::to_string(latency.count()) + "ns\"";
  if (jitter > Nanoseconds(0))
    text +=
        R"(, "jitter": ")" + std::to_string(jitter.count()) + R"(ns", "distribution": "normal")";
  text += "}";
  if (loss > 0)
    text += R"(, "loss": {"model": "random", "probability": )" + std::to_string(loss) + "}";
  text += "}}}";
  auto loaded = shaper::parse_profile(text);
  EXPECT_TRUE(loaded) << (loaded ? "" : to_string(loaded.diagnostics()));
  return *loaded->profile.held("p");
}

TEST(FleetLanes, CrossingTwoLanesAddsTheirDelaysAndLosesWhatEitherLoses) {
  shaper::DelaySeries a, b;
  for (int i = 0; i < 4; ++i) {
    a.sent.push_back(i * 10ms);
    b.sent.push_back(i * 10ms);
  }
  a.delay = {5ms, std::nullopt, 7ms, 1ms};
  b.delay = {2ms, 3ms, std::nullopt, 4ms};
  const auto sum = cross_lanes(a, b);
  ASSERT_EQ(sum.delay.size(), 4u);
  EXPECT_EQ(sum.delay[0], 7ms);
  EXPECT_FALSE(sum.delay[1]);
  EXPECT_FALSE(sum.delay[2]);
  EXPECT_EQ(sum.delay[3], 5ms);
}

// The crossed lanes are a draw from the convolution: means and variances add, losses combine as
// 1 - (1 - a)(1 - b). Two normal lanes of 10 ms +- 3 ms at 2 % and 1 % loss: mean 20 ms, standard
// deviation 3 sqrt(2) = 4.24 ms, loss 2.98 %; over 200 000 probes the sampling errors are 0.01 ms,
// 0.007 ms and 0.04 %, so the bounds below are over 10 standard errors wide (netem's normal table
// is a quantised normal: its standard deviation is within 1 % of jitter).
TEST(FleetLanes, TwoSimulatedLanesCrossedAreTheirConvolution) {
  const auto a = phase_profile(10ms, 3ms, 0.02);
  const auto b = phase_profile(10ms, 3ms, 0.01);
  const auto sum =
      cross_lanes(lane_series(&a, 200'000, 20ms, 1), lane_series(&b, 200'000, 20ms, 2));
  double n = 0, lost = 0, mean = 0, m2 = 0;
  for (const auto& d : sum.delay) {
    ++n;
    if (!d) {
      ++lost;
      continue;
    }
    const double ms = std::chrono::duration<double, std::milli>(*d).count();
    const double k = n - lost;
    const double delta = ms - mean;
    mean += delta / k;
    m2 += delta * (ms - mean);
  }
  const double sd = std::sqrt(m2 / (n - lost - 1));
  EXPECT_NEAR(mean, 20.0, 0.1);
  EXPECT_NEAR(sd, 3 * std::sqrt(2.0), 0.1);
  EXPECT_NEAR(lost / n, 1 - 0.98 * 0.99, 0.004);
  // An unshaped lane adds nothing.
  const auto alone =
      cross_lanes(lane_series(&a, 1000, 20ms, 1), lane_series(nullptr, 1000, 20ms, 2));
  const auto only_a = lane_series(&a, 1000, 20ms, 1);
  EXPECT_EQ(alone.delay, only_a.delay);
}

TEST(FleetLanes, OnlyAConstantPhaseCanCalibrate) {
  const auto constant = phase_profile(10ms, 0ms, 0);
  EXPECT_EQ(constant_delay(&constant), 10ms);
  EXPECT_EQ(constant_delay(nullptr), 0ms);
  const auto jittery = phase_profile(10ms, 1ms, 0);
  EXPECT_FALSE(constant_delay(&jittery));
  const auto lossy = phase_profile(10ms, 0ms, 0.01);
  EXPECT_FALSE(constant_delay(&lossy));
}

// A pair's probes made from a lane pair and a base path with its own noise, as the bed shows
// them: base 0.2 ms plus an exponential noise of mean 0.3 ms on every probe.
PairProbes made_probes(const shaper::DelaySeries& truth, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> noise(1 / 0.3);
  PairProbes p;
  p.from = "a";
  p.to = "b";
  p.address = "198.18.1.1";
  p.interval = 20ms;
  for (std::size_t i = 0; i < n; ++i) {
    p.sent.push_back(1'000'000'000'000ns + i * 20ms);
    if (!truth.delay[i]) {
      p.rtt.emplace_back();
      continue;
    }
    const auto extra = std::chrono::duration<double, std::milli>(0.2 + noise(rng));
    p.rtt.emplace_back(*truth.delay[i] + std::chrono::duration_cast<Nanoseconds>(extra));
  }
  return p;
}

// A faithful pair passes, with the calibration through 20 ms (the two constants) giving the base
// and the noise; the same probes judged against lanes of 10 % more delay fail, KS first.
TEST(FleetJudge, AFaithfulPairPassesAndTenPercentMoreDelayFails) {
  const auto a = phase_profile(10ms, 3ms, 0.01);
  const auto b = phase_profile(10ms, 3ms, 0.01);
  const auto truth = cross_lanes(lane_series(&a, 1000, 20ms, 11), lane_series(&b, 1000, 20ms, 12));
  const PairProbes seen = made_probes(truth, 1000, 5);
  const auto constant = phase_profile(10ms, 0ms, 0);
  const auto cal_truth =
      cross_lanes(lane_series(&constant, 1000, 20ms, 1), lane_series(&constant, 1000, 20ms, 2));
  const PairProbes calibration = made_probes(cal_truth, 1000, 6);
  shaper::ValidationOptions options;
  options.alpha = pair_level(0.05, 12);

  const auto expected =
      cross_lanes(lane_series(&a, 200'000, 20ms, 1), lane_series(&b, 200'000, 20ms, 2));
  const PairVerdict ok = judge_pair(expected, seen, &calibration, 20ms, options);
  ASSERT_EQ(ok.report.comparisons.size(), 1u);
  EXPECT_TRUE(ok.report.pass) << (ok.report.comparisons[0].failures.empty()
                                      ? ""
                                      : ok.report.comparisons[0].failures.front());
  EXPECT_TRUE(ok.notes.empty());
  // What was judged carries the calibrated noise (median of the exponential, 0.21 ms, and more):
  // the expected series alone does not.
  EXPECT_GT(ok.judged_expected.p50_ms, ok.report.profile.p50_ms + 0.1);

  const auto a11 = phase_profile(11ms, 3ms, 0.01);
  const auto b11 = phase_profile(11ms, 3ms, 0.01);
  const auto wrong =
      cross_lanes(lane_series(&a11, 200'000, 20ms, 1), lane_series(&b11, 200'000, 20ms, 2));
  const PairVerdict bad = judge_pair(wrong, seen, &calibration, 20ms, options);
  EXPECT_FALSE(bad.report.pass);
  EXPECT_GT(bad.report.comparisons[0].ks, bad.report.comparisons[0].ks_limit);

  // A calibration that was not taken through the constant it claims is not used, and says why.
  const PairVerdict unclaimed = judge_pair(expected, seen, &calibration, 25ms, options);
  ASSERT_FALSE(unclaimed.notes.empty());
  EXPECT_NE(unclaimed.notes.front().find("calibration not used"), std::string::npos);
}

// The path's own losses come in bursts (the bed's host stalls) where the lanes lose at random: a
// pair losing 2 % in bursts of three passes on its loss rate, its mean burst reported, not judged.
TEST(FleetJudge, APairsMeanLossBurstIsReportedNotJudged) {
  const auto a = phase_profile(10ms, 3ms, 0.01);
  const auto delivered =
      cross_lanes(lane_series(&a, 1500, 20ms, 21), lane_series(&a, 1500, 20ms, 22));
  shaper::DelaySeries truth = delivered;
  for (std::size_t i = 0; i < truth.delay.size(); ++i) {
    if (!truth.delay[i]) truth.delay[i] = 20ms;  // the lanes' own losses delivered...
    if (i % 150 < 3) truth.delay[i].reset();     // ...and 2 % lost in bursts of three instead
  }
  const PairProbes seen = made_probes(truth, 1500, 7);
  const auto expected =
      cross_lanes(lane_series(&a, 200'000, 20ms, 1), lane_series(&a, 200'000, 20ms, 2));
  shaper::ValidationOptions options;
  options.alpha = pair_level(0.05, 12);
  const auto constant = phase_profile(10ms, 0ms, 0);
  const PairProbes calibration = made_probes(
      cross_lanes(lane_series(&constant, 1500, 20ms, 1), lane_series(&constant, 1500, 20ms, 2)),
      1500, 8);
  const PairVerdict v = judge_pair(expected, seen, &calibration, 20ms, options);
  const shaper::Comparison& c = v.report.comparisons.front();
  bool reported = false;
  for (const auto& f : c.figures) {
    if (f.name != "mean_loss_burst") continue;
    reported = true;
    EXPECT_FALSE(f.judged);
    ASSERT_TRUE(f.b);
    EXPECT_NEAR(*f.b, 3.0, 1e-9);
  }
  EXPECT_TRUE(reported);
  EXPECT_TRUE(v.report.pass) << (c.failures.empty() ? "" : c.failures.front());
}

}  // namespace
}  // namespace jitterctl
