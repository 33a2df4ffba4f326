// The capture compiler: exact tables (property: entries decode to the samples), baselines,
// loss-model choice, regimes, presets, tails, ordering and queue limits. Captures are synthetic and
// seeded.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "shaper/compiler.hpp"
#include "shaper/distribution_tables.hpp"
#include "shaper/statistics.hpp"
#include "shaper/trace.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

// A ping-like capture: one probe every `interval`, RTTs from `rtt(i)`, lost where `lost(i)`.
template <typename Rtt, typename Lost>
CaptureInput capture(std::size_t n, Nanoseconds interval, Rtt rtt, Lost lost) {
  CaptureInput c;
  c.name = "/captures/synthetic.txt";
  c.sha256 = std::string(64, 'b');
  c.trace.format = TraceFormat::kPing;
  c.trace.interval = interval;
  for (std::size_t i = 0; i < n; ++i) {
    RttSample s;
    s.seq = i;
    s.send_time = 1'764'520'000'000'000'000ns + interval * static_cast<std::int64_t>(i);
    if (!lost(i)) s.rtt = rtt(i);
    c.trace.samples.push_back(s);
  }
  return c;
}

std::vector<std::int64_t> decoded(const Phase& phase) {
  std::vector<std::int64_t> out;
  for (auto t : *phase.spec.delay.distribution) {
    out.push_back(netem_table_delay_ns(phase.spec.delay.latency.count(),
                                       static_cast<std::int32_t>(phase.spec.delay.jitter.count()),
                                       t));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// --regimes 2 --window 10s.
CompileOptions two_regimes_in_10s_windows() {
  CompileOptions options;
  options.regimes = RegimeMode::kClusters;
  options.clusters = 2;
  options.window = 10s;
  return options;
}

}  // namespace

TEST(Compiler, SmallCaptureTableDecodesToEverySampleExactly) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<std::int64_t> jitter(0,
                                                     40'000);  // 40 µs of spread: 1 ns resolution
  std::vector<std::int64_t> expected;
  auto c = capture(
      2000, 10ms, [&](std::size_t) { return Nanoseconds(10'000'000 + jitter(rng)); },
      [](std::size_t) { return false; });
  for (const auto& s : c.trace.samples) expected.push_back(s.rtt->count());
  const auto min = *std::min_element(expected.begin(), expected.end());
  for (auto& e : expected) e -= min;  // minimum-RTT baseline
  std::sort(expected.begin(), expected.end());
  const auto result = compile_profile({c}, CompileOptions{});
  ASSERT_TRUE(result.profile) << to_string(result.diagnostics);
  ASSERT_EQ(result.profile->phases.size(), 1u);
  const Phase& phase = result.profile->phases[0];
  EXPECT_EQ(phase.name, "capture");
  EXPECT_EQ(result.report.phases[0].resolution, 1ns);
  EXPECT_EQ(decoded(phase), expected);
  EXPECT_FALSE(result.profile->schedule);  // one phase, no tail: nothing to schedule
  EXPECT_EQ(result.report.baseline, Nanoseconds(min + 0));
  EXPECT_EQ(result.profile->provenance->capture, "synthetic.txt");
  EXPECT_EQ(result.profile->provenance->samples, 2000u);
  EXPECT_TRUE(result.profile->provenance->start);
}

TEST(Compiler, LargeCaptureTableHoldsItsQuantilesAndKeepsTheTail) {
  // 100 000 probes, lognormal-ish body, plus 2 spikes of 900 ms that a 16384-entry table cannot
  // hold: its top entry is the quantile at level 1 - 1/32768, rank 99 997, and the spikes are ranks
  // 99 999 and 100 000.
  std::mt19937_64 rng(5);
  std::lognormal_distribution<double> body(std::log(20e6), 0.3);
  const std::vector<std::size_t> spikes{10'000, 70'000};
  auto c = capture(
      100'000, 100ms,
      [&](std::size_t i) {
        if (std::find(spikes.begin(), spikes.end(), i) != spikes.end())
          return Nanoseconds(900'000'000);
        return Nanoseconds(static_cast<std::int64_t>(std::min(body(rng), 400e6)));
      },
      [](std::size_t) { return false; });
  CompileOptions options;
  options.baseline.kind = BaselineKind::kNone;
  const auto result = compile_profile({c}, options);
  ASSERT_TRUE(result.profile) << to_string(result.diagnostics);
  const Phase* main = result.profile->find_phase("capture");
  const Phase* tail = result.profile->find_phase("capture-tail");
  ASSERT_TRUE(main && tail);
  // Every entry is the sample quantile at its level, within half a resolution step.
  std::vector<Nanoseconds> delays;
  for (const auto& s : c.trace.samples) delays.push_back(*s.rtt);
  const SortedSamples sorted(delays);
  const auto values = decoded(*main);
  const auto step = result.report.phases[0].resolution.count();
  for (std::size_t i = 0; i < values.size(); i += 97) {
    const auto q = quantile_inverse_ecdf(sorted, (static_cast<double>(i) + 0.5) / 16384.0)->count();
    EXPECT_LE(std::llabs(values[i] - q), step / 2 + 1) << i;
  }
  // Samples above the table's top entry (rank 99 997) live in the tail phase: the largest body
  // sample and both spikes, and the schedule replays each when it happened.
  EXPECT_EQ(result.report.phases[0].tail_samples, 3u);
  const auto tail_values = decoded(*tail);
  ASSERT_EQ(tail_values.size(), 3u);
  EXPECT_NEAR(tail_values[1], 900'000'000, 1e-9 * 900'000'000 + 10'000);
  EXPECT_NEAR(tail_values[2], 900'000'000, 1e-9 * 900'000'000 + 10'000);
  ASSERT_TRUE(result.profile->schedule);
  const auto& steps = result.profile->schedule->steps;
  EXPECT_EQ(std::count_if(steps.begin(), steps.end(),
                          [](const ScheduleStep& s) { return s.phase == "capture-tail"; }),
            3);
  EXPECT_EQ(steps.front().phase, "capture");
  EXPECT_LE(steps.front().duration, 1000s);  // the first spike is probe 10 000 at 100 ms spacing
  Nanoseconds total{0};
  for (const auto& s : steps) total += s.duration;
  EXPECT_EQ(total, 10000s);  // the whole capture, nothing lost or added
  // Queue limit: 2 x 100 000 pps x the largest delay of the phase.
  EXPECT_EQ(tail->spec.limit, 180'000u);
}

TEST(Compiler, BaselinesAndDirectionSplit) {
  auto c = capture(
      1000, 10ms,
      [](std::size_t i) { return Nanoseconds(10'000'000 + static_cast<std::int64_t>(i) * 1000); },
      [](std::size_t) { return false; });
  CompileOptions options;
  options.split = DirectionSplit::kHalves;
  auto r = compile_profile({c}, options);
  ASSERT_TRUE(r.profile);
  // Halved range 499.5 µs: 8 ns steps, so within 4 ns.
  EXPECT_NEAR(decoded(r.profile->phases[0]).back(), 999'000 / 2, 4);
  options.split = DirectionSplit::kOneWay;
  options.baseline = {BaselineKind::kPercentile, 50.0, {}};
  r = compile_profile({c}, options);
  ASSERT_TRUE(r.profile);
  EXPECT_EQ(r.report.baseline, Nanoseconds(10'000'000 + 499'000));
  EXPECT_EQ(r.report.clamped_to_zero, 499u);
  options.baseline = {BaselineKind::kFixed, 0, 5ms};
  r = compile_profile({c}, options);
  EXPECT_EQ(decoded(r.profile->phases[0]).front(), 5'000'000);
}

TEST(Compiler, BurstyLossIsFittedWithAMarkovModelAndRandomLossWithBernoulli) {
  const auto bursty = simulate_loss(
      GilbertElliottLoss{Probability::checked(0.01), Probability::checked(0.2)}, 100'000, 9);
  auto c = capture(
      bursty.size(), 10ms, [](std::size_t) { return 20ms; },
      [&](std::size_t i) { return bursty[i]; });
  auto r = compile_profile({c}, CompileOptions{});
  ASSERT_TRUE(r.profile);
  const auto& fit = r.report.phases[0].loss;
  EXPECT_TRUE(fit.chosen.kind == LossModelKind::kGilbert ||
              fit.chosen.kind == LossModelKind::kGilbertElliott)
      << to_string(fit.chosen.kind);
  EXPECT_NEAR(fit.chosen.mean_burst, fit.capture_mean_burst, 0.1 * fit.capture_mean_burst);
  EXPECT_NEAR(fit.chosen.loss_rate, fit.capture_loss_rate, 0.1 * fit.capture_loss_rate);
  EXPECT_FALSE(std::holds_alternative<RandomLoss>(r.profile->phases[0].spec.loss));

  const auto random =
      simulate_loss(RandomLoss{Probability::checked(0.03), Probability::zero()}, 100'000, 4);
  c = capture(
      random.size(), 10ms, [](std::size_t) { return 20ms; },
      [&](std::size_t i) { return random[i]; });
  r = compile_profile({c}, CompileOptions{});
  ASSERT_TRUE(r.profile);
  EXPECT_EQ(r.report.phases[0].loss.chosen.kind, LossModelKind::kBernoulli);
  const auto& loss = std::get<RandomLoss>(r.profile->phases[0].spec.loss);
  EXPECT_TRUE(loss.correlation.is_zero());  // never netem's broken loss correlation
}

TEST(Compiler, LossBurstsOfAnUnevenlySpacedPingCaptureStayWhole) {
  // ping -D sends unevenly (spacings 15, 15, 15, 2, 2 ms here: median 15 ms); the probes after the
  // two short spacings are lost, two at a time. A lost probe's send time is inferred from the one
  // before it plus the median interval, which puts the second of each pair after the next delivery.
  // Sorted by those times the pairs became two single losses; the burst lengths must be the
  // capture's own, in sequence order.
  std::string text;
  const std::int64_t spacing_us[] = {15'000, 15'000, 15'000, 2'000, 2'000};
  std::int64_t t_us = 1'764'520'000'000'000;
  std::vector<bool> lost;
  for (int seq = 1; seq <= 5001; ++seq) {  // ends on a reply: trailing losses would be unknown
    const bool gone = seq % 5 == 4 || seq % 5 == 0;  // sent after the 2 ms spacings
    lost.push_back(gone);
    if (!gone) {
      text += "[" + std::to_string(t_us / 1'000'000) + "." +
              std::to_string(1'000'000 + t_us % 1'000'000).substr(1) +
              "] 64 bytes from 10.0.0.2: icmp_seq=" + std::to_string(seq) +
              " ttl=64 time=20.0 ms\n";
    }
    t_us += spacing_us[seq % 5];
  }
  CaptureInput c;
  c.name = "uneven.txt";
  c.sha256 = std::string(64, 'c');
  c.trace = parse_trace_text(text, c.name);
  ASSERT_EQ(c.trace.samples.size(), 5001u);
  const auto expected = loss_statistics(lost);
  ASSERT_EQ(*expected.mean_burst, 2.0);

  const auto r = compile_profile({c}, CompileOptions{});
  ASSERT_TRUE(r.profile);
  const auto& fit = r.report.phases[0].loss;
  EXPECT_EQ(fit.capture_mean_burst, 2.0);
  EXPECT_DOUBLE_EQ(fit.capture_loss_rate, *expected.loss_rate);
}

TEST(Compiler, RegimesAreClusteredAndReplayedInOrder) {
  // 60 s calm (5 ms ± 1), 20 s storm (50 ms ± 10), three times, at 10 Hz.
  std::mt19937_64 rng(8);
  std::normal_distribution<double> calm(5e6, 1e6), storm(50e6, 10e6);
  auto in_storm = [](std::size_t i) { return (i % 800) >= 600; };
  auto c = capture(
      2400, 100ms,
      [&](std::size_t i) {
        return Nanoseconds(
            static_cast<std::int64_t>(std::max(1e5, in_storm(i) ? storm(rng) : calm(rng))));
      },
      [](std::size_t) { return false; });
  const auto r = compile_profile({c}, two_regimes_in_10s_windows());
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  ASSERT_TRUE(r.profile->find_phase("regime-1") && r.profile->find_phase("regime-2"));
  ASSERT_TRUE(r.profile->schedule);
  const auto& steps = r.profile->schedule->steps;
  ASSERT_EQ(steps.size(), 6u);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].phase, i % 2 == 0 ? "regime-1" : "regime-2") << i;
    EXPECT_EQ(steps[i].duration, i % 2 == 0 ? 60s : 20s) << i;
  }
  EXPECT_TRUE(r.profile->schedule->loop);
}

TEST(Compiler, RegimeChangesBetweenWindowEdgesAreReplayedWhereTheCaptureChanged) {
  // Calm (2 ms) and storm (25 ms, 6 % loss) alternate every 10 s, but the capture starts 3 s into a
  // calm spell: every 10 s window straddles a change. Window labels alone put the changes on window
  // edges (a 10 s first step, then 10 s steps) and feed 3 s of each regime into the other's table.
  // The changes must land where the capture changed: first step 7 s, then 10 s each, within a
  // probe. (A change inside the last window has no next window to move into; here the last window
  // is calm.)
  std::mt19937_64 rng(11);
  std::normal_distribution<double> calm(2e6, 0.2e6), storm(25e6, 3e6);
  std::bernoulli_distribution storm_loss(0.06);
  auto in_storm = [](std::size_t i) { return ((i + 300) / 1000) % 2 == 1; };  // 10 ms probes
  std::vector<bool> lost(
      8300);  // 83 s: the last window (80-83 s) is calm, so the last change has one
  for (std::size_t i = 0; i < lost.size(); ++i) lost[i] = in_storm(i) && storm_loss(rng);
  auto c = capture(
      lost.size(), 10ms,
      [&](std::size_t i) {
        return Nanoseconds(
            static_cast<std::int64_t>(std::max(1e5, in_storm(i) ? storm(rng) : calm(rng))));
      },
      [&](std::size_t i) { return lost[i]; });
  const auto r = compile_profile({c}, two_regimes_in_10s_windows());
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  ASSERT_TRUE(r.profile->schedule);
  const auto& steps = r.profile->schedule->steps;
  std::string listed;
  for (const auto& step : steps)
    listed += step.phase + " " + duration_to_string(step.duration) + "; ";
  ASSERT_EQ(steps.size(), 9u) << listed;  // 7 s, seven 10 s spells, the last calm one 6 s
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].phase, i % 2 == 0 ? "regime-1" : "regime-2") << i;
    const Nanoseconds expected = i == 0 ? 7s : i + 1 < steps.size() ? 10s : 6s;
    EXPECT_LE(std::chrono::abs(steps[i].duration - expected), 10ms) << i;
  }
  // Each table holds its own regime's delays only: nothing of the storm in the calm table.
  EXPECT_LT(decoded(*r.profile->find_phase("regime-1")).back(), 5'000'000);
  EXPECT_GT(decoded(*r.profile->find_phase("regime-2")).front(), 5'000'000);
}

TEST(Compiler, ARegimeHoldingMostWindowsIsNotSplitWhileTwoRareOnesMerge) {
  // 32 windows of 10 s at 20 ms: 18 good (30 ms), 10 fair (55 ms), 4 poor (120 ms), each ± 2 %.
  // Centres started at the 1/6, 1/2 and 5/6 quantiles of the median delay would all but one sit in
  // "good": the good windows split in two and fair and poor merge. Each regime must come out whole.
  const std::string windows = "GGGFGGFFPFGGGGFFGPPFGGGFGGGFFPGG";
  std::mt19937_64 rng(32);
  std::normal_distribution<double> noise(1.0, 0.02);
  auto centre = [&](std::size_t i) {
    const char w = windows[i / 500];
    return w == 'G' ? 30e6 : w == 'F' ? 55e6 : 120e6;
  };
  auto c = capture(
      16000, 20ms,
      [&](std::size_t i) { return Nanoseconds(static_cast<std::int64_t>(centre(i) * noise(rng))); },
      [](std::size_t) { return false; });
  CompileOptions options;
  options.baseline.kind = BaselineKind::kNone;
  options.regimes = RegimeMode::kClusters;
  options.clusters = 3;
  options.window = 10s;
  const auto r = compile_profile({c}, options);
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  ASSERT_EQ(r.report.phases.size(), 3u);
  std::map<std::string, std::size_t> samples;
  for (const auto& phase : r.report.phases) samples[phase.name] = phase.samples;
  EXPECT_EQ(samples["regime-1"], 18u * 500);
  EXPECT_EQ(samples["regime-2"], 10u * 500);
  EXPECT_EQ(samples["regime-3"], 4u * 500);
  // And the schedule is the window sequence: 17 runs of one letter.
  ASSERT_TRUE(r.profile->schedule);
  EXPECT_EQ(r.profile->schedule->steps.size(), 17u);
  EXPECT_EQ(r.profile->schedule->steps.front().phase, "regime-1");
  EXPECT_EQ(r.profile->schedule->steps.front().duration, 30s);
}

TEST(Compiler, PercentilePresetAndPeriodicSpikes) {
  auto c = capture(
      10000, 10ms,
      [](std::size_t i) { return Nanoseconds(static_cast<std::int64_t>(i + 1) * 1000); },
      [](std::size_t) { return false; });
  CompileOptions options;
  options.baseline.kind = BaselineKind::kNone;
  options.regimes = RegimeMode::kPercentiles;
  auto r = compile_profile({c}, options);
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  EXPECT_EQ(r.profile->find_phase("p50")->spec.delay.latency, 5000us);
  EXPECT_EQ(r.profile->find_phase("p95")->spec.delay.latency, 9500us);
  EXPECT_EQ(r.profile->find_phase("p99.9")->spec.delay.latency, 9990us);
  ASSERT_EQ(r.profile->schedule->steps.size(), 3u);
  EXPECT_EQ(r.profile->schedule->steps[1].duration, 30s);

  options.regimes = RegimeMode::kSingle;
  options.spikes = PeriodicSpikes{100ms, 2, 30s};
  r = compile_profile({c}, options);
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  const Phase* spike = r.profile->find_phase("spike");
  ASSERT_TRUE(spike);
  EXPECT_EQ(spike->spec.delay.latency,
            r.profile->find_phase("capture")->spec.delay.latency + 100ms);
  const auto& steps = r.profile->schedule->steps;
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].phase, "spike");
  EXPECT_EQ(steps[1].duration, 20ms);  // 2 packets at 10 ms
  EXPECT_EQ(steps[0].duration + steps[1].duration, 30s);
}

// A capture whose tail does not fit the table has a time line (tail events); periodic spikes are
// put on it rather than left out of the schedule.
TEST(Compiler, PeriodicSpikesGoOnTheTimeLineOfTailEvents) {
  // 20 000 probes 10 ms apart (200 s) with four delays (each a quarter, so the 16-entry table's top
  // entry is the largest of them) and a 900 ms outlier at probe 5000, above the table: one tail
  // event.
  auto c = capture(
      20'000, 10ms,
      [](std::size_t i) {
        return i == 5000 ? Nanoseconds(900'000'000)
                         : Nanoseconds(static_cast<std::int64_t>(i % 4) * 10'000);
      },
      [](std::size_t) { return false; });
  CompileOptions options;
  options.baseline.kind = BaselineKind::kNone;
  options.table_entries = 16;
  options.spikes = PeriodicSpikes{100ms, 2, 30s};
  const auto r = compile_profile({c}, options);
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  ASSERT_TRUE(r.profile->find_phase("capture-tail"));
  ASSERT_TRUE(r.profile->find_phase("spike"));
  ASSERT_TRUE(r.profile->schedule);
  // Replay the schedule once: spikes start at 30 s - 20 ms, 60 s - 20 ms, ... (6 in 200 s), each 20
  // ms.
  std::vector<Nanoseconds> spike_starts;
  Nanoseconds t{0}, total{0};
  for (const auto& step : r.profile->schedule->steps) {
    if (step.phase == "spike") {
      spike_starts.push_back(t);
      EXPECT_EQ(step.duration, 20ms);
    }
    t += step.duration;
    total += step.duration;
  }
  ASSERT_EQ(spike_starts.size(), 6u);
  for (std::size_t k = 0; k < spike_starts.size(); ++k) {
    EXPECT_EQ(spike_starts[k], 30s * static_cast<std::int64_t>(k + 1) - 20ms) << k;
  }
  EXPECT_EQ(total, 200s);  // the whole capture, nothing lost or added
  const auto& steps = r.profile->schedule->steps;
  EXPECT_EQ(std::count_if(steps.begin(), steps.end(),
                          [](const ScheduleStep& s) { return s.phase == "capture-tail"; }),
            1);
}

// A stall's probes are sent at uneven spacings around the median interval (ping waits longer while
// replies are outstanding). Each tail event must still be in force when its probe is sent: an event
// that overran the next one, or a gap under 1 ms stretched to the 1 ms a step needs, moved every
// later step, and after a few of them the tail events no longer met their probes
// (stalls-overflow.txt lost 11 of its 40 tail probes that way).
TEST(Compiler, TailEventsMeetTheirProbesWhateverTheSpacing) {
  // 3000 probes 100 ms apart with a tight body; probes 1000-1039 are a 4 s stall, sent alternately
  // 100.5 ms (a 0.5 ms gap after a 100 ms event) and 99.5 ms (an overlap) apart.
  auto c = capture(
      3000, 100ms,
      [](std::size_t i) { return 40ms + Nanoseconds(static_cast<std::int64_t>(i % 7) * 10'000); },
      [](std::size_t) { return false; });
  Nanoseconds shift{0};
  for (std::size_t i = 1000; i < 3000; ++i) {
    if (i < 1040) {
      shift += (i % 2 ? 500us : -500us);
      c.trace.samples[i].rtt = 4s - 100ms * static_cast<std::int64_t>(i - 1000);
    }
    *c.trace.samples[i].send_time += shift;
  }
  CompileOptions options;
  options.table_entries = 64;
  const auto r = compile_profile({c}, options);
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  ASSERT_TRUE(r.profile->schedule);
  ASSERT_EQ(r.report.phases.at(0).tail_samples, 40u);
  // The phase in force at each probe's send time, the schedule started at the first probe.
  std::vector<std::pair<Nanoseconds, std::string>> starts;
  Nanoseconds t{0};
  for (const auto& step : r.profile->schedule->steps) {
    starts.emplace_back(t, step.phase);
    t += step.duration;
  }
  const Nanoseconds origin = *c.trace.samples.front().send_time;
  for (std::size_t i = 990; i < 1050; ++i) {
    const Nanoseconds at = *c.trace.samples[i].send_time - origin;
    const auto in_force =
        std::prev(std::upper_bound(starts.begin(), starts.end(), at,
                                   [](Nanoseconds v, const auto& s) { return v < s.first; }));
    EXPECT_EQ(in_force->second, i >= 1000 && i < 1040 ? "capture-tail" : "capture")
        << "probe " << i;
  }
  EXPECT_EQ(
      t, *c.trace.samples.back().send_time - origin + 100ms);  // the capture's span, nothing added
}

TEST(Compiler, NoReorderKeepsOrderWithRate) {
  auto c = capture(
      500, 10ms,
      [](std::size_t i) { return Nanoseconds(static_cast<std::int64_t>(i % 50) * 100'000); },
      [](std::size_t) { return false; });
  CompileOptions options;
  options.reorder = false;
  const auto r = compile_profile({c}, options);
  ASSERT_TRUE(r.profile);
  EXPECT_FALSE(r.profile->reorder);
  EXPECT_EQ(r.profile->phases[0].spec.rate.rate.value, 12'500'000'000u);
}

TEST(Compiler, RefusesWhatItCannotCompile) {
  auto all_lost = capture(
      10, 1s, [](std::size_t) { return 1ms; }, [](std::size_t) { return true; });
  auto r = compile_profile({all_lost}, CompileOptions{});
  EXPECT_FALSE(r.profile);
  EXPECT_EQ(r.diagnostics.at(0).message,
            "no delivered probe with an RTT: nothing to build a delay model from");
  CompileOptions options;
  options.regimes = RegimeMode::kClusters;
  options.spikes = PeriodicSpikes{};
  r = compile_profile({all_lost}, options);
  EXPECT_EQ(r.diagnostics.at(0).where, "spikes");
}

TEST(Compiler, ReplayWithAGivenWindowPlaysOnceAndLosesExactlyTheCapturesBursts) {
  // 600 probes 10 ms apart: 1 ms for the first half, 50 ms for the second, bursts of 3 lost probes
  // at 100-102 and 400-402.
  auto lost = [](std::size_t i) { return (i >= 100 && i <= 102) || (i >= 400 && i <= 402); };
  auto c = capture(
      600, 10ms, [](std::size_t i) { return i < 300 ? 1ms : 50ms; }, lost);
  CompileOptions options;
  options.baseline.kind = BaselineKind::kNone;
  options.regimes = RegimeMode::kReplay;
  options.replay_window = 500ms;
  options.replay_loop = false;
  const auto r = compile_profile({c}, options);
  ASSERT_TRUE(r.profile) << to_string(r.diagnostics);
  ASSERT_TRUE(r.report.replay);
  EXPECT_EQ(r.report.replay->window, 500ms);
  EXPECT_EQ(r.report.replay->windows, 12u);
  EXPECT_EQ(r.report.replay->loss_bursts, 2u);
  ASSERT_TRUE(r.profile->schedule);
  EXPECT_FALSE(r.profile->schedule->loop);
  EXPECT_EQ(r.profile->schedule->replay_window, 500ms);
  // The schedule: level of 1 ms, the first burst for 30 ms from 1 s, 1 ms again, 50 ms from 3 s,
  // the second burst from 4 s; and only replay-lost loses anything.
  std::vector<std::pair<std::string, Nanoseconds>> starts;
  Nanoseconds t{0};
  for (const auto& step : r.profile->schedule->steps) {
    starts.emplace_back(step.phase, t);
    t += step.duration;
  }
  ASSERT_EQ(starts.size(), 6u);
  EXPECT_EQ(starts[1], std::pair(std::string("replay-lost"), Nanoseconds(1s)));
  EXPECT_EQ(starts[2].second, 1030ms);
  EXPECT_EQ(starts[3].second, 3s);
  EXPECT_EQ(starts[4], std::pair(std::string("replay-lost"), Nanoseconds(4s)));
  EXPECT_EQ(t, 6s);
  EXPECT_EQ(r.profile->find_phase(starts[0].first)->spec.delay.latency, 1ms);
  EXPECT_EQ(r.profile->find_phase(starts[3].first)->spec.delay.latency, 50ms);
  for (const auto& phase : r.profile->phases) {
    EXPECT_EQ(std::holds_alternative<std::monostate>(phase.spec.loss), phase.name != "replay-lost")
        << phase.name;
  }
}
