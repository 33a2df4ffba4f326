// Delay distributions through a real netem, measured with ping over a veth pair.
//
// Tolerances are derived, not tuned: z = 4.5 standard errors (a false failure about once in 150 000
// runs per assertion) plus a stated systematic budget for what the emulated machine adds. The
// baseline RTT of the unshaped link is measured first and subtracted.
#include <gtest/gtest.h>

#include <cmath>

#include "shaper/distribution_tables.hpp"
#include "shaper/netem_engine.hpp"
#include "stats_helpers.hpp"
#include "test_network.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using jitterd_test::VethPair;

namespace {

constexpr double kZ = 4.5;
// Timer and softirq latency that netem's hrtimer release adds on top of the configured delay:
// measured at 0.1-0.4 ms in qemu TCG, 0.1-0.2 ms in User-Mode Linux (the default bed). 1 ms is
// budgeted because the same test must hold in both beds (JITTERD_VM=qemu is the second kernel,
// docs/testing.md); the bias it allows is still a twentieth of the 20 ms under test.
constexpr double kTimerBudgetMs = 1.0;

struct Baseline {
  double median_ms;
  double stddev_ms;
};

Baseline measure_baseline(const VethPair& net) {
  const auto probe = jitterd_test::ping(net, 100, 5ms);
  EXPECT_EQ(probe.received_seq.size(), 100u) << "the unshaped link lost probes";
  return {jitterd_test::median(probe.rtt_ms), jitterd_test::stddev(probe.rtt_ms)};
}

}  // namespace

TEST(NetemDelay, NormalTwentyPlusMinusFive) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  const Baseline base = measure_baseline(net);
  NetemSpec spec;
  spec.delay = {20ms, 5ms, Probability::zero(), make_normal_table()};
  NetemQdisc qdisc = engine.install(engine.resolve(std::string(VethPair::kDevA)), spec);

  constexpr int kProbes = 1000;
  const auto result = jitterd_test::ping(net, kProbes, 10ms);
  ASSERT_EQ(result.received_seq.size(), static_cast<std::size_t>(kProbes));
  const double n = static_cast<double>(result.rtt_ms.size());
  const double m = jitterd_test::mean(result.rtt_ms) - base.median_ms;
  const double s = jitterd_test::stddev(result.rtt_ms);
  // The table is clipped at ±4σ and sampled at 16384 midpoints: its own std is 0.998σ.
  const double sigma = 5.0 * 0.998;
  const double expected_s = std::sqrt(sigma * sigma + base.stddev_ms * base.stddev_ms);
  // Mean: SE = σ/√n. Std: SE ≈ σ/√(2n) for a normal sample.
  const double mean_tolerance = kZ * sigma / std::sqrt(n) + kTimerBudgetMs;
  const double std_tolerance = kZ * sigma / std::sqrt(2 * n) + kTimerBudgetMs / 2;
  EXPECT_NEAR(m, 20.0, mean_tolerance) << "baseline " << base.median_ms << " ms";
  EXPECT_NEAR(s, expected_s, std_tolerance);
  // Shape, not just moments: about 68.3 % within ±1σ of the mean (binomial SE √(p(1-p)/n)).
  const double centre = jitterd_test::mean(result.rtt_ms);
  double inside = 0;
  for (double r : result.rtt_ms) inside += std::fabs(r - centre) <= 5.0 ? 1 : 0;
  EXPECT_NEAR(inside / n, 0.6827, kZ * std::sqrt(0.6827 * 0.3173 / n) + 0.02);
}

TEST(NetemDelay, CustomBimodalTableSixtyFortyIsReproduced) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  const Baseline base = measure_baseline(net);
  // 60 % at 5 ms and 40 % at 40 ms: five samples make an exact five-entry table.
  const std::vector<Nanoseconds> samples{5ms, 5ms, 5ms, 40ms, 40ms};
  const auto built = build_exact_delay_table(samples);
  ASSERT_TRUE(built.table);
  NetemSpec spec;
  spec.delay = {built.table->latency, built.table->jitter, Probability::zero(), built.table->table};
  NetemQdisc qdisc = engine.install(engine.resolve(std::string(VethPair::kDevA)), spec);

  constexpr int kProbes = 1000;
  const auto result = jitterd_test::ping(net, kProbes, 5ms);
  ASSERT_EQ(result.received_seq.size(), static_cast<std::size_t>(kProbes));
  // Shares are split at the midpoint between the modes, as a reader of a histogram would. Emulation
  // makes some packets late (never early), so the modes are smeared upwards by a few ms.
  double low = 0, high = 0, between = 0, early = 0;
  std::string odd;
  for (double r : result.rtt_ms) {
    const double d = r - base.median_ms;
    (d < 22.5 ? low : high) += 1;
    if (d < 5.0 - 0.5 || (d > 5.0 + 10.0 && d < 40.0 - 0.5)) {
      (d < 5.0 ? early : between) += 1;
      odd += std::to_string(r) + " ";
    }
  }
  const double n = static_cast<double>(kProbes);
  // The bound is ±5 points; at n = 1000 the binomial SE is 1.55 points, so ±5 is 3.2 SE.
  EXPECT_NEAR(low / n, 0.60, 0.05);
  EXPECT_NEAR(high / n, 0.40, 0.05);
  // Nothing earlier than a mode, and little in the gap between them. A normal distribution fitted
  // to the same mean and deviation (19 ms, 17 ms), or maketable's interpolated table, puts over 35
  // % of the delays between 15 and 39.5 ms; an exact table puts none there, but under emulation a
  // loaded host releases some 5 ms packets over 10 ms late (seen: up to 6 % with three compilers
  // running beside the VM), so the bound is 15 %: far from what a wrong table gives.
  EXPECT_EQ(early, 0) << "RTTs (ms): " << odd;
  EXPECT_LE(between / n, 0.15) << "RTTs (ms): " << odd;
}

// Profiles with "reorder": false keep order with netem's rate (docs/profile-format.md). Checked on
// the wire: with wide jitter and 2 ms between probes, replies arrive out of order without a rate
// and in order with one.
TEST(NetemOrder, RateKeepsOrderWhereJitterAloneReorders) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  NetemSpec spec;
  spec.delay = {20ms, 10ms, Probability::zero(), std::nullopt};  // uniform 10..30 ms
  NetemQdisc qdisc = engine.install(engine.resolve(std::string(VethPair::kDevA)), spec);
  auto inversions = [](const std::vector<int>& arrival) {
    int count = 0;
    for (std::size_t i = 1; i < arrival.size(); ++i) count += arrival[i] < arrival[i - 1];
    return count;
  };
  const auto jittered = jitterd_test::ping(net, 300, 2ms);
  // Uniform ±10 ms with 2 ms spacing: P(swap of neighbours) = (2J - Δ)² / (8J²) = 0.405.
  EXPECT_GT(inversions(jittered.received_seq), 30);
  spec.rate.rate = BytesPerSecond{12'500'000'000};  // what the compiler sets for "reorder": false
  qdisc.change(spec);
  const auto ordered = jitterd_test::ping(net, 300, 2ms);
  EXPECT_EQ(ordered.received_seq.size(), 300u);
  EXPECT_EQ(inversions(ordered.received_seq), 0);
}
