// Standard tables generated from their definitions, the kernel's tabledist arithmetic, and the
// exact-table builder's property: every entry decodes to a sample's quantile exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <utility>

#include "shaper/distribution_tables.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

double mean_of(const DistributionTable& t) {
  return std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size());
}

double stddev_of(const DistributionTable& t) {
  const double m = mean_of(t);
  double s = 0;
  for (auto v : t) s += (v - m) * (v - m);
  return std::sqrt(s / static_cast<double>(t.size()));
}

}  // namespace

TEST(InverseNormalCdf, MatchesKnownQuantiles) {
  EXPECT_NEAR(inverse_normal_cdf(0.5), 0.0, 1e-15);
  EXPECT_NEAR(inverse_normal_cdf(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(inverse_normal_cdf(0.001), -3.090232306167813, 1e-12);
  EXPECT_NEAR(inverse_normal_cdf(1e-9), -5.997807015007686, 1e-9);
  for (double p : {0.01, 0.2, 0.6, 0.99}) {
    EXPECT_NEAR(0.5 * std::erfc(-inverse_normal_cdf(p) / std::sqrt(2.0)), p, 1e-14);
  }
}

TEST(NormalTable, IsAStandardNormalScaledBy8192) {
  const auto t = make_normal_table();
  ASSERT_EQ(t.size(), kMaxTableEntries);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  // Symmetric by construction: entry i and n-1-i are negatives (up to the s16 clamp at the ends).
  for (std::size_t i = 1; i + 1 < t.size(); ++i) EXPECT_EQ(t[i], -t[t.size() - 1 - i]) << i;
  EXPECT_NEAR(mean_of(t), 0.0, 1.0);
  // Midpoint quantiles of 16384 levels lose a little of the tails: std is 8192 * (1 - ~0.2%).
  EXPECT_NEAR(stddev_of(t), 8192.0, 8192 * 0.005);
  // The outermost levels are ±4.009σ: beyond s16, so they are clamped (the ±4σ limit of any table
  // used with sigma = jitter); the next ones (±3.74σ) are exact.
  EXPECT_EQ(t.front(), -32768);
  EXPECT_EQ(t.back(), 32767);
  EXPECT_EQ(t[1],
            static_cast<std::int16_t>(std::nearbyint(8192 * inverse_normal_cdf(1.5 / 16384))));
}

TEST(ParetoTable, IsStandardisedAndRightSkewedWithItsTailClipped) {
  const auto t = make_pareto_table();
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  // Pareto(3,1) starts at x=1: (1 - 1.5)/(sqrt(3)/2) = -0.577σ.
  EXPECT_NEAR(t.front(), -0.57735 * 8192, 2);
  EXPECT_EQ(t.back(), 32767);  // +4σ clip: the kernel cannot represent more with sigma = jitter
  const auto median = t[t.size() / 2];
  EXPECT_LT(median, 0);                       // right skew: median below the mean
  EXPECT_NEAR(mean_of(t), 0.0, 0.05 * 8192);  // the clip removes only a sliver of the mean
}

TEST(ParetoNormalTable, IsAQuarterNormalThreeQuartersPareto) {
  const auto n = make_normal_table(1024);
  const auto p = make_pareto_table(1024);
  const auto pn = make_paretonormal_table(1024);
  for (std::size_t i = 0; i < pn.size(); ++i) {
    if (p[i] == 32767) continue;  // clipped component
    EXPECT_NEAR(pn[i], 0.25 * n[i] + 0.75 * p[i], 1.5) << i;
  }
}

TEST(UniformTable, CoversMinusToPlusJitter) {
  const auto t = make_uniform_table();
  EXPECT_EQ(t.front(), -8192);
  EXPECT_EQ(t.back(), 8191);
  EXPECT_NEAR(mean_of(t), -0.5, 0.01);
  // Uniform on [-a, a) has std a/sqrt(3).
  EXPECT_NEAR(stddev_of(t), 8192 / std::sqrt(3.0), 1.0);
}

TEST(TableDelay, MatchesTheKernelArithmetic) {
  // sigma % 8192 == 0: exact, mu + (sigma/8192) * t.
  EXPECT_EQ(netem_table_delay_ns(100, 8192 * 3, -32768), 100 - 3 * 32768);
  EXPECT_EQ(netem_table_delay_ns(0, 8192 * 3052, 32767), 3052ll * 32767);
  // sigma not a multiple: remainder rounded half away from zero, C truncation.
  // sigma = 10000: t = 1 -> (1808*1 + 4096)/8192 = 0, + 1*1 = 1.
  EXPECT_EQ(netem_table_delay_ns(0, 10000, 1), 1);
  EXPECT_EQ(netem_table_delay_ns(0, 10000, -1), -1);
  EXPECT_EQ(netem_table_delay_ns(0, 10000, 8192), 10000);
  EXPECT_EQ(netem_table_delay_ns(5, 0, 12345), 5);  // jitter 0: the table is ignored
}

TEST(ExactTable, SmallRangeDecodesEverySampleExactly) {
  std::vector<Nanoseconds> samples;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> d(1'000'000, 1'060'000);  // 60 µs range: step 1 ns
  for (int i = 0; i < 5000; ++i) samples.emplace_back(d(rng));
  const auto result = build_exact_delay_table(samples);
  ASSERT_TRUE(result.table) << to_string(result.diagnostics);
  const auto& table = *result.table;
  EXPECT_EQ(table.resolution, 1ns);
  EXPECT_EQ(table.jitter.count(), 8192);
  ASSERT_EQ(table.table.size(), samples.size());
  std::vector<std::int64_t> decoded, expected;
  for (auto t : table.table) {
    decoded.push_back(netem_table_delay_ns(table.latency.count(),
                                           static_cast<std::int32_t>(table.jitter.count()), t));
  }
  for (auto s : samples) expected.push_back(s.count());
  std::sort(decoded.begin(), decoded.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(decoded, expected);
}

TEST(ExactTable, LargeCaptureEntriesAreQuantilesWithinHalfAStep) {
  // Bimodal 5 ms / 40 ms with a heavy tail to 220 ms: range 215 ms → step ceil(215e6/65535) ns.
  std::vector<Nanoseconds> samples;
  std::mt19937_64 rng(11);
  std::normal_distribution<double> a(5e6, 3e5), b(40e6, 1e6);
  std::bernoulli_distribution pick(0.6);
  for (int i = 0; i < 100000; ++i) {
    samples.emplace_back(static_cast<std::int64_t>(std::max(1e6, pick(rng) ? a(rng) : b(rng))));
  }
  samples.emplace_back(220'000'000);
  const auto result = build_exact_delay_table(samples);
  ASSERT_TRUE(result.table);
  const auto& table = *result.table;
  std::vector<std::int64_t> sorted;
  for (auto s : samples) sorted.push_back(s.count());
  std::sort(sorted.begin(), sorted.end());
  const std::int64_t step = (sorted.back() - sorted.front() + 65534) / 65535;
  EXPECT_EQ(table.resolution.count(), step);
  EXPECT_EQ(table.jitter.count() % 8192, 0);  // every entry decodes without rounding
  ASSERT_EQ(table.table.size(), kMaxTableEntries);
  EXPECT_EQ(table.latency.count(), sorted.front() + 32768 * step);  // the minimum maps to -32768
  const std::size_t n = sorted.size();
  for (std::size_t i = 0; i < table.table.size(); ++i) {
    const double u = (i + 0.5) / kMaxTableEntries;
    const auto q = sorted[std::min(n, static_cast<std::size_t>(std::ceil(u * n))) - 1];
    const auto decoded = netem_table_delay_ns(
        table.latency.count(), static_cast<std::int32_t>(table.jitter.count()), table.table[i]);
    EXPECT_LE(std::llabs(decoded - q), step / 2 + 1) << i;
  }
}

TEST(ExactTable, ReportsWhatCannotBeRepresented) {
  EXPECT_EQ(build_exact_delay_table({}).diagnostics.front().message,
            "no delay samples to build a table from");
  std::vector<Nanoseconds> negative{-1ms, 2ms};
  EXPECT_NE(build_exact_delay_table(negative).diagnostics.front().message.find("negative"),
            std::string::npos);
  std::vector<Nanoseconds> huge{0ms, 20s};
  EXPECT_NE(build_exact_delay_table(huge).diagnostics.front().message.find("17.17s"),
            std::string::npos);
  std::vector<Nanoseconds> fine{0ms, 17s};
  EXPECT_TRUE(build_exact_delay_table(fine).table);
}

TEST(ExactTable, StepDividesTheCapturesPrintResolution) {
  // ping prints 10 µs steps between 10 and 100 ms: a 21 ms range would give a 321 ns step, which
  // does not divide 10 µs; the builder picks 400 ns (the smallest divisor of 10 000 above 321), so
  // every sample decodes exactly.
  std::vector<Nanoseconds> samples;
  for (std::int64_t i = 0; i <= 2100; ++i) samples.emplace_back(10'000'000 + i * 10'000);
  const auto result = build_exact_delay_table(samples);
  ASSERT_TRUE(result.table);
  EXPECT_EQ(result.table->resolution, 400ns);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto decoded = netem_table_delay_ns(
        result.table->latency.count(), static_cast<std::int32_t>(result.table->jitter.count()),
        result.table->table[i]);
    EXPECT_EQ(decoded, samples[i].count()) << i;
  }
}

// A delay with the fields the test sets (designated initializers would leave the others unnamed,
// which GCC's -Wmissing-field-initializers refuses under -Werror).
static DelaySpec delay_of(Nanoseconds latency, Nanoseconds jitter = Nanoseconds{0},
                          std::optional<DistributionTable> table = std::nullopt) {
  DelaySpec d;
  d.latency = latency;
  d.jitter = jitter;
  d.distribution = std::move(table);
  return d;
}

TEST(MeanNetemDelay, IsTheAverageEntryWithNegativeDelaysSentAtOnce) {
  EXPECT_EQ(mean_netem_delay(delay_of(7ms)), 7ms);
  // Built-in uniform jitter: symmetric about the latency while it stays above 0; latency 0 with
  // 10 ms jitter keeps only the positive half, whose mean over the whole width is 10^2 / 40 ms.
  EXPECT_EQ(mean_netem_delay(delay_of(10ms, 4ms)), 10ms);
  EXPECT_EQ(mean_netem_delay(delay_of(0ms, 10ms)), 2500us);
  // A table of -1, 0 and +1 sigma at latency 1 ms, sigma 2 ms: -1, 1 and 3 ms, the first sent at
  // once (0): (0 + 1 + 3) / 3 ms.
  EXPECT_EQ(mean_netem_delay(delay_of(1ms, 2ms, DistributionTable{-8192, 0, 8192})),
            Nanoseconds{1'333'333});
  // An exact table decodes to its samples: its mean is theirs.
  std::vector<Nanoseconds> samples{2ms, 3ms, 4ms, 11ms};
  const auto exact = build_exact_delay_table(samples);
  ASSERT_TRUE(exact.table);
  EXPECT_EQ(
      mean_netem_delay(delay_of(exact.table->latency, exact.table->jitter, exact.table->table)),
      5ms);
}
