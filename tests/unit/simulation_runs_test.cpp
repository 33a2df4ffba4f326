// simulate_profile in bounded runs: many copies of a short series against a looped schedule are
// simulated run after run, on a clock without the gaps between copies, and every probe still meets
// the phase its send time (on the series' clock) falls in.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "shaper/validation.hpp"

namespace shaper {
namespace {

using namespace std::chrono_literals;

// Phases "a" (1 ms) and "b" (5 ms), no jitter or loss, each `step` long, looped.
Profile two_phase_loop(Nanoseconds step) {
  Profile profile;
  profile.name = "a-b";
  NetemSpec a, b;
  a.delay.latency = 1ms;
  b.delay.latency = 5ms;
  profile.phases = {{"a", "", a}, {"b", "", b}};
  profile.schedule = Schedule{{{"a", step}, {"b", step}}, true, std::nullopt};
  return profile;
}

// `n` probes, one every `every`, all delivered.
DelaySeries probes(std::size_t n, Nanoseconds every) {
  DelaySeries s;
  s.label = "capture";
  for (std::size_t i = 0; i < n; ++i) {
    s.sent.push_back(every * static_cast<std::int64_t>(i));
    s.delay.push_back(1ms);
  }
  return s;
}

TEST(SimulationRuns, EveryProbeOfManyRunsMeetsThePhaseItsSendTimeFallsIn) {
  // 300 probes over 3 s against a 2 s loop (a 1 s, b 1 s), 300 copies: 90 000 probes, more than one
  // run of the simulator holds. Each copy starts at the loop's next start (0, 4 s, 8 s ...) and
  // meets a, b, a.
  const Profile profile = two_phase_loop(1s);
  const DelaySeries like = probes(300, 10ms);
  const DelaySeries sim = simulate_profile(profile, like, 10ms, 7, 300);
  ASSERT_EQ(sim.sent.size(), 90'000u);
  ASSERT_EQ(sim.delay.size(), 90'000u);
  ASSERT_EQ(sim.phase.size(), 90'000u);
  std::size_t in_b = 0;
  for (std::size_t i = 0; i < sim.sent.size(); ++i) {
    const std::size_t copy = i / 300;
    ASSERT_EQ(sim.sent[i], like.sent[i % 300] + 4s * static_cast<std::int64_t>(copy)) << i;
    const bool b = sim.sent[i] % 2s >= 1s;
    in_b += b;
    ASSERT_EQ(sim.phase[i], b ? "b" : "a")
        << "probe " << i << " sent at " << sim.sent[i].count() << " ns";
    ASSERT_TRUE(sim.delay[i]) << i;
    ASSERT_EQ(*sim.delay[i], b ? 5ms : 1ms) << i;
  }
  EXPECT_EQ(in_b, 300u * 100u);
}

TEST(SimulationRuns, ACaptureLongerThanARunIsSplitWithoutLosingAProbe) {
  // One copy of 200 000 probes 1 ms apart (200 s) under a 20 s loop: runs split inside phases.
  const Profile profile = two_phase_loop(10s);
  const DelaySeries like = probes(200'000, 1ms);
  const DelaySeries sim = simulate_profile(profile, like, 1ms, 1, 1);
  ASSERT_EQ(sim.sent, like.sent);
  for (std::size_t i = 0; i < sim.sent.size(); ++i) {
    const bool b = sim.sent[i] % 20s >= 10s;
    ASSERT_EQ(sim.phase[i], b ? "b" : "a") << i;
    ASSERT_TRUE(sim.delay[i]) << i;
    ASSERT_EQ(*sim.delay[i], b ? 5ms : 1ms) << i;
  }
}

TEST(SimulationRuns, TheSameSeedGivesTheSameSeriesAndAnotherSeedAnother) {
  // Jitter, so that the draws show: 50 probes, 2000 copies (several runs).
  Profile profile = two_phase_loop(1s);
  for (auto& p : profile.phases) p.spec.delay.jitter = 1ms;
  const DelaySeries like = probes(50, 10ms);
  const DelaySeries one = simulate_profile(profile, like, 10ms, 3, 2000);
  const DelaySeries again = simulate_profile(profile, like, 10ms, 3, 2000);
  const DelaySeries other = simulate_profile(profile, like, 10ms, 4, 2000);
  ASSERT_EQ(one.delay.size(), 100'000u);
  EXPECT_EQ(one.delay, again.delay);
  EXPECT_NE(one.delay, other.delay);
  // The runs after the first are not the first one's draws again.
  const std::vector<std::optional<Nanoseconds>> first_run(one.delay.begin(),
                                                          one.delay.begin() + 50);
  std::size_t repeats = 0;
  for (std::size_t copy = 1; copy < 2000; ++copy) {
    repeats += std::equal(first_run.begin(), first_run.end(),
                          one.delay.begin() + static_cast<std::ptrdiff_t>(copy * 50));
  }
  EXPECT_EQ(repeats, 0u);
}

}  // namespace
}  // namespace shaper
