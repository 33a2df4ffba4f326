// Statistics: every expected value is worked out by hand in a comment, taken from a closed form, or
// computed by a second, independent method in the test itself (brute-force ECDF comparison for KS,
// sorted pairing for W1 of equal-size samples).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <vector>

#include "shaper/statistics.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

std::vector<Nanoseconds> ns(std::initializer_list<std::int64_t> values) {
  std::vector<Nanoseconds> out;
  for (auto v : values) out.emplace_back(v);
  return out;
}

SortedSamples sorted(std::initializer_list<std::int64_t> values) {
  return SortedSamples(ns(values));
}

SortedSamples range(std::int64_t first, std::int64_t last, std::int64_t step = 1) {
  std::vector<Nanoseconds> v;
  for (std::int64_t x = first; x <= last; x += step) v.emplace_back(x);
  return SortedSamples(std::move(v));
}

double value(std::optional<FractionalNanoseconds> d) {
  return d.value().count();
}

// The brute-force KS distance: evaluate both ECDFs by counting at every observed value (where the
// supremum of two right-continuous step functions is attained). O(n m), no merging, no tie logic.
double brute_force_ks(const std::vector<Nanoseconds>& a, const std::vector<Nanoseconds>& b) {
  double d = 0;
  auto at = [&](Nanoseconds x) {
    double fa = 0, fb = 0;
    for (auto v : a) fa += v <= x;
    for (auto v : b) fb += v <= x;
    d = std::max(d, std::fabs(fa / a.size() - fb / b.size()));
  };
  for (auto x : a) at(x);
  for (auto x : b) at(x);
  return d;
}

}  // namespace

// ---- Sorting ------------------------------------------------------------------------------------

// sort_samples radix-sorts large inputs; std::sort is the independent reference. The inputs cover
// one radix pass (a narrow range), several (wide), the whole int64 range with negative samples (the
// keys are offsets from the minimum), ties, and inputs sorted or reversed already.
TEST(SortSamples, LargeInputsComeOutAsStdSortPutsThem) {
  std::mt19937_64 rng(7);
  const std::size_t n = 200'000;  // above the radix threshold
  auto check = [&](const char* what, auto draw) {
    std::vector<Nanoseconds> v;
    for (std::size_t i = 0; i < n; ++i) v.emplace_back(draw(i));
    std::vector<Nanoseconds> expected = v;
    std::sort(expected.begin(), expected.end());
    sort_samples(v);
    EXPECT_EQ(v, expected) << what;
  };
  std::uniform_int_distribution<std::int64_t> narrow(0, 4000);
  std::uniform_int_distribution<std::int64_t> wide(0, 13'400'000'000);
  std::uniform_int_distribution<std::int64_t> full(std::numeric_limits<std::int64_t>::min(),
                                                   std::numeric_limits<std::int64_t>::max());
  std::uniform_int_distribution<std::int64_t> signed_ms(-5'000'000, 5'000'000);
  check("narrow range, many ties", [&](std::size_t) { return narrow(rng); });
  check("13.4 s range", [&](std::size_t) { return wide(rng); });
  check("the whole int64 range", [&](std::size_t) { return full(rng); });
  check("negative and positive", [&](std::size_t) { return signed_ms(rng); });
  check("reversed", [&](std::size_t i) { return static_cast<std::int64_t>(n - i) * 1000; });
  check("one value", [&](std::size_t) { return std::int64_t{42}; });
  check("sorted", [&](std::size_t i) { return static_cast<std::int64_t>(i); });
}

// ---- Quantiles ---------------------------------------------------------------------------------

TEST(Quantile, Type1IsTheSmallestSampleWhoseEcdfReachesP) {
  const auto s = range(1, 10);  // x_(k) = k
  // ceil(10 p): p = .5 -> 5, .9 -> 9, .91 -> ceil(9.1) = 10, .05 -> 1, 0 -> x_(1), 1 -> x_(10).
  EXPECT_EQ(quantile_inverse_ecdf(s, 0.5), 5ns);
  EXPECT_EQ(quantile_inverse_ecdf(s, 0.9), 9ns);
  EXPECT_EQ(quantile_inverse_ecdf(s, 0.91), 10ns);
  EXPECT_EQ(quantile_inverse_ecdf(s, 0.05), 1ns);
  EXPECT_EQ(quantile_inverse_ecdf(s, 0.0), 1ns);
  EXPECT_EQ(quantile_inverse_ecdf(s, 1.0), 10ns);
  // The definition, checked directly: ECDF(q) >= p and ECDF of the sample below q < p.
  for (double p : {0.13, 0.5, 0.77, 0.99}) {
    const auto q = *quantile_inverse_ecdf(s, p);
    EXPECT_GE(*ecdf(s, q), p);
    EXPECT_LT(*ecdf(s, q - 1ns), p);
  }
  EXPECT_EQ(value(quantile(s, 0.91, QuantileType::kInverseEcdf)), 10.0);
}

TEST(Quantile, Type1TakesRoundProbabilitiesAtTheirWord) {
  const auto s = range(1, 100);
  // 0.07 * 100 is 7.000000000000001 in doubles; without the fuzz ceil() would give x_(8).
  EXPECT_EQ(quantile_inverse_ecdf(s, 0.07), 7ns);
  EXPECT_EQ(quantile_inverse_ecdf(s, 0.29), 29ns);  // 28.999999999999996
  EXPECT_EQ(quantile_inverse_ecdf(s, 0.071), 8ns);  // a real 7.1 still rounds up
}

TEST(Quantile, Type7InterpolatesLikeR) {
  const auto s = range(1, 10);
  // h = 9 p. R: quantile(1:10, c(.25, .5, .9)) = 3.25 5.5 9.1.
  EXPECT_DOUBLE_EQ(value(quantile(s, 0.25, QuantileType::kLinear)), 3.25);
  EXPECT_DOUBLE_EQ(value(quantile(s, 0.5, QuantileType::kLinear)), 5.5);
  EXPECT_DOUBLE_EQ(value(quantile(s, 0.9, QuantileType::kLinear)), 9.1);
  EXPECT_EQ(value(quantile(s, 0.0, QuantileType::kLinear)), 1.0);
  EXPECT_EQ(value(quantile(s, 1.0, QuantileType::kLinear)), 10.0);
  // Unsorted input with ties: sorted {1, 3, 3, 5, 9}; h = 4 p. p = .6 -> h 2.4 -> 3 + .4 * 2 = 3.8.
  const SortedSamples t(ns({5, 1, 3, 3, 9}));
  EXPECT_DOUBLE_EQ(value(quantile(t, 0.6, QuantileType::kLinear)), 3.8);
  EXPECT_EQ(quantile_inverse_ecdf(t, 0.6), 3ns);   // ceil(3) = 3 -> x_(3) = 3
  EXPECT_EQ(quantile_inverse_ecdf(t, 0.61), 5ns);  // ceil(3.05) = 4
}

TEST(Quantile, UndefinedInputsGiveNullopt) {
  const SortedSamples none;
  EXPECT_FALSE(quantile(none, 0.5, QuantileType::kLinear));
  EXPECT_FALSE(quantile_inverse_ecdf(none, 0.5));
  EXPECT_FALSE(tail_quantiles(none, QuantileType::kInverseEcdf));
  const auto s = range(1, 3);
  for (double p : {-0.1, 1.1, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_FALSE(quantile(s, p, QuantileType::kLinear)) << p;
    EXPECT_FALSE(quantile_inverse_ecdf(s, p)) << p;
  }
  // One sample: every quantile of both types is that sample.
  const auto one = sorted({42});
  for (double p : {0.0, 0.3, 1.0}) {
    EXPECT_EQ(value(quantile(one, p, QuantileType::kLinear)), 42.0);
    EXPECT_EQ(quantile_inverse_ecdf(one, p), 42ns);
  }
}

TEST(Quantile, TailSummary) {
  const auto s = range(1, 1000);
  // Type 1: ceil(1000 p) -> 500, 900, 990, 999.
  const auto t1 = *tail_quantiles(s, QuantileType::kInverseEcdf);
  EXPECT_EQ(t1.p50.count(), 500);
  EXPECT_EQ(t1.p90.count(), 900);
  EXPECT_EQ(t1.p99.count(), 990);
  EXPECT_EQ(t1.p999.count(), 999);
  EXPECT_EQ(t1.max.count(), 1000);
  // Type 7: h = 999 p -> 499.5, 899.1, 989.01, 998.001, plus 1.
  const auto t7 = *tail_quantiles(s, QuantileType::kLinear);
  EXPECT_NEAR(t7.p50.count(), 500.5, 1e-9);
  EXPECT_NEAR(t7.p90.count(), 900.1, 1e-9);
  EXPECT_NEAR(t7.p99.count(), 990.01, 1e-9);
  EXPECT_NEAR(t7.p999.count(), 999.001, 1e-9);
  EXPECT_EQ(t7.max.count(), 1000);
}

TEST(Quantile, ExtremeValuesDoNotOverflow) {
  const SortedSamples s(
      ns({std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()}));
  // Halfway between -2^63 and 2^63 - 1 is -0.5; in doubles both ends round to ±2^63, so 0.
  EXPECT_NEAR(value(quantile(s, 0.5, QuantileType::kLinear)), 0.0, 1e4);
}

// ---- ECDF --------------------------------------------------------------------------------------

TEST(Ecdf, CountsSamplesAtOrBelow) {
  const SortedSamples s(ns({5, 1, 3, 3, 9}));
  EXPECT_EQ(ecdf(s, 0ns), 0.0);
  EXPECT_EQ(ecdf(s, 1ns), 0.2);
  EXPECT_EQ(ecdf(s, 3ns), 0.6);  // both 3s
  EXPECT_EQ(ecdf(s, 4ns), 0.6);
  EXPECT_EQ(ecdf(s, 9ns), 1.0);
  EXPECT_EQ(ecdf(s, 100ns), 1.0);
  EXPECT_FALSE(ecdf(SortedSamples{}, 1ns));
  const std::vector<EcdfStep> expected{{1ns, 0.2}, {3ns, 0.6}, {5ns, 0.8}, {9ns, 1.0}};
  EXPECT_EQ(ecdf_steps(s), expected);
  EXPECT_TRUE(ecdf_steps(SortedSamples{}).empty());
}

// ---- Histograms --------------------------------------------------------------------------------

TEST(Histogram, FixedBinsAreHalfOpenAndNothingIsDropped) {
  const auto samples = ns({-1, 0, 9, 10, 29, 30, 100, std::numeric_limits<std::int64_t>::min(),
                           std::numeric_limits<std::int64_t>::max()});
  const auto h = fixed_histogram(samples, 0ns, 10ns, 3).value();
  ASSERT_EQ(h.edges.size(), 4u);
  EXPECT_EQ(h.edges[0].count(), 0);
  EXPECT_EQ(h.edges[3].count(), 30);
  EXPECT_EQ(h.counts, (std::vector<std::uint64_t>{2, 1, 1}));  // {0, 9}, {10}, {29}
  EXPECT_EQ(h.underflow, 2u);                                  // -1, INT64_MIN
  EXPECT_EQ(h.overflow, 3u);                                   // 30 (edge), 100, INT64_MAX
  EXPECT_EQ(h.total, samples.size());
}

TEST(Histogram, FixedBinsRejectBadParameters) {
  const auto samples = ns({1});
  EXPECT_FALSE(fixed_histogram(samples, 0ns, 10ns, 0));
  EXPECT_FALSE(fixed_histogram(samples, 0ns, 0ns, 3));
  EXPECT_FALSE(fixed_histogram(samples, 0ns, -1ns, 3));
  EXPECT_FALSE(fixed_histogram(samples, Nanoseconds(std::numeric_limits<std::int64_t>::max() - 5),
                               10ns, 1));  // the upper edge would overflow
}

TEST(Histogram, LogBinsHaveGeometricEdgesAndConsistentAssignment) {
  // 1 us .. 1 s is six decades; 12 bins are two per decade: edges 1e3, 1e3.5, 1e4, ... 1e9.
  std::vector<Nanoseconds> samples = ns({999, 1000, 5000, 999'999'999, 1'000'000'000});
  const auto h = log_histogram(samples, 1us, 1s, 12).value();
  ASSERT_EQ(h.edges.size(), 13u);
  EXPECT_EQ(h.edges.front().count(), 1e3);
  EXPECT_EQ(h.edges.back().count(), 1e9);
  EXPECT_NEAR(h.edges[1].count(), std::sqrt(10.0) * 1e3, 1e-6);
  EXPECT_NEAR(h.edges[8].count(), 1e7, 1e-3);
  EXPECT_EQ(h.underflow, 1u);   // 999
  EXPECT_EQ(h.overflow, 1u);    // 1 s is the (excluded) upper edge
  EXPECT_EQ(h.counts[0], 1u);   // 1000
  EXPECT_EQ(h.counts[1], 1u);   // 3162 <= 5000 < 10000
  EXPECT_EQ(h.counts[11], 1u);  // 999999999

  // Every sample lands in the bin whose edges bracket it, including values right at edges.
  samples.clear();
  for (std::int64_t x = 1000; x < 1'000'000'000; x = x * 11 / 10 + 1) samples.emplace_back(x);
  for (const auto& e : h.edges) samples.emplace_back(static_cast<std::int64_t>(e.count()));
  const auto g = log_histogram(samples, 1us, 1s, 12).value();
  std::vector<std::uint64_t> expected(12, 0);
  for (auto x : samples) {
    for (std::size_t k = 0; k < 12; ++k) {
      if (x.count() >= g.edges[k].count() && x.count() < g.edges[k + 1].count()) ++expected[k];
    }
  }
  EXPECT_EQ(g.counts, expected);
  EXPECT_EQ(g.total, samples.size());

  EXPECT_FALSE(log_histogram(samples, 0ns, 1s, 6));
  EXPECT_FALSE(log_histogram(samples, 1s, 1s, 6));
  EXPECT_FALSE(log_histogram(samples, 1us, 1s, 0));
}

// ---- Moments -----------------------------------------------------------------------------------

TEST(Moments, TextbookExample) {
  // {2,4,4,4,5,5,7,9}: mean 5, squared deviations sum to 32, sample variance 32/7.
  const auto s = ns({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_DOUBLE_EQ(value(mean(s)), 5.0);
  EXPECT_DOUBLE_EQ(value(sample_stddev(s)), std::sqrt(32.0 / 7.0));
  const auto m = moments(s).value();
  EXPECT_EQ(m.count, 8u);
  EXPECT_DOUBLE_EQ(m.mean.count(), 5.0);
  EXPECT_DOUBLE_EQ(m.sample_stddev.count(), std::sqrt(32.0 / 7.0));
}

TEST(Moments, EdgeCases) {
  EXPECT_FALSE(mean({}));
  EXPECT_FALSE(sample_stddev({}));
  const auto one = ns({7});
  EXPECT_EQ(value(mean(one)), 7.0);
  EXPECT_FALSE(sample_stddev(one));  // n - 1 = 0
  EXPECT_FALSE(moments(one));
  EXPECT_EQ(value(sample_stddev(ns({3, 3, 3}))), 0.0);
}

TEST(Moments, KeepPrecisionOnLargeOffsetsAndLargeCounts) {
  // 10^7 samples alternating offset + {0, 1}. Mean offset + 1/2; the squared deviations sum to n/4,
  // so s = 0.5 * sqrt(n / (n - 1)). A sum of squares at offset 1e12 (squares ~1e24, ulp ~1e8)
  // would lose the spread entirely.
  constexpr std::int64_t kN = 10'000'000;
  const double expected_sd = 0.5 * std::sqrt(static_cast<double>(kN) / (kN - 1));
  for (std::int64_t offset :
       {std::int64_t{1'000'000'000'000}, std::int64_t{4'000'000'000'000'000'000}}) {
    std::vector<Nanoseconds> s(kN);
    for (std::int64_t i = 0; i < kN; ++i) s[i] = Nanoseconds(offset + (i % 2));
    const auto m = moments(s).value();
    EXPECT_NEAR(m.sample_stddev.count(), expected_sd, 1e-12) << offset;
    if (offset == 1'000'000'000'000) {
      EXPECT_EQ(m.mean.count(), 1e12 + 0.5);  // exact in a double
    }
  }
}

// ---- Kolmogorov–Smirnov ------------------------------------------------------------------------

TEST(KolmogorovSmirnov, TiesAreConsumedBeforeTheDifferenceIsTaken) {
  // a = {1,2,2,3}, b = {2,2,2,4}. After each distinct value: 1: F=1/4 G=0; 2: F=3/4 G=3/4;
  // 3: F=1 G=3/4; 4: 1, 1. D = 1/4. Stepping through the tied 2s one sample at a time would pass
  // through F=1/4, G=3/4 (0.5) or F=3/4, G=0 (0.75), which no x realises.
  EXPECT_EQ(ks_distance(sorted({1, 2, 2, 3}), sorted({2, 2, 2, 4})), 0.25);
  EXPECT_EQ(ks_distance(sorted({1, 2, 3}), sorted({1, 2, 3})), 0.0);
  EXPECT_EQ(ks_distance(sorted({1, 2, 3}), sorted({4, 5})), 1.0);
  EXPECT_EQ(ks_distance(sorted({5, 5, 5}), sorted({5})), 0.0);
  // 1..100 against 11..110: at x = 10, F = 0.1 and G = 0; the gap never widens.
  EXPECT_DOUBLE_EQ(ks_distance(range(1, 100), range(11, 110)).value(), 0.1);
}

TEST(KolmogorovSmirnov, MatchesBruteForceOnRandomSamplesWithManyTies) {
  std::mt19937_64 rng(2024);
  std::uniform_int_distribution<std::int64_t> small(0, 6);  // 7 values: ties everywhere
  std::uniform_int_distribution<std::size_t> size(1, 40);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<Nanoseconds> a(size(rng)), b(size(rng));
    for (auto& x : a) x = Nanoseconds(small(rng));
    for (auto& x : b) x = Nanoseconds(small(rng) + (trial % 3));  // some shifted, some not
    EXPECT_NEAR(ks_distance(SortedSamples(a), SortedSamples(b)).value(), brute_force_ks(a, b),
                1e-15)
        << "trial " << trial;
  }
}

TEST(KolmogorovSmirnov, EdgeCasesAndCriticalValue) {
  EXPECT_FALSE(ks_distance(SortedSamples{}, sorted({1})));
  EXPECT_FALSE(ks_distance(sorted({1}), SortedSamples{}));
  // c(0.05) = sqrt(-ln(0.025) / 2) = sqrt(3.6888794541 / 2) = 1.3581015; c(0.01) = 1.6276236.
  EXPECT_NEAR(ks_critical_value(1, 1).value(), 1.3581015 * std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(ks_critical_value(100, 100).value(), 1.3581015 * std::sqrt(200.0 / 10000.0), 1e-7);
  EXPECT_NEAR(ks_critical_value(100, 400, 0.01).value(), 1.6276236 * std::sqrt(500.0 / 40000.0),
              1e-7);
  EXPECT_FALSE(ks_critical_value(0, 5));
  EXPECT_FALSE(ks_critical_value(5, 0));
  EXPECT_FALSE(ks_critical_value(5, 5, 0.0));
  EXPECT_FALSE(ks_critical_value(5, 5, 1.0));
}

// ---- Wasserstein-1 -----------------------------------------------------------------------------

TEST(Wasserstein1, SmallCasesByHand) {
  EXPECT_EQ(value(wasserstein1(sorted({0}), sorted({10}))), 10.0);
  // {0, 10} vs {5}: |F - G| = 1/2 on [0, 5) and on [5, 10): 2.5 + 2.5.
  EXPECT_EQ(value(wasserstein1(sorted({0, 10}), sorted({5}))), 5.0);
  // Equal sizes pair sorted samples: (|1-2| + |2-4| + |3-9|) / 3 = 3.
  EXPECT_EQ(value(wasserstein1(sorted({3, 1, 2}), sorted({9, 2, 4}))), 3.0);
  // {0, 6} vs {0, 3, 6}: |1/2 - 1/3| on [0, 3) and |1/2 - 2/3| on [3, 6): 3/6 + 3/6 = 1.
  EXPECT_DOUBLE_EQ(value(wasserstein1(sorted({0, 6}), sorted({0, 3, 6}))), 1.0);
  EXPECT_EQ(value(wasserstein1(sorted({4, 4}), sorted({4}))), 0.0);
  EXPECT_FALSE(wasserstein1(SortedSamples{}, sorted({1})));
}

TEST(Wasserstein1, EqualSizesMatchSortedPairing) {
  // For n = m, W1 = (1/n) sum |a_(i) - b_(i)|: an independent formula (quantile coupling).
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> delay(0, 1000);
  for (int trial = 0; trial < 100; ++trial) {
    const std::size_t n = 1 + trial % 30;
    std::vector<Nanoseconds> a(n), b(n);
    for (auto& x : a) x = Nanoseconds(delay(rng));
    for (auto& x : b) x = Nanoseconds(delay(rng) / 3 * 3);  // ties
    const SortedSamples sa(a), sb(b);
    double pairing = 0;
    for (std::size_t i = 0; i < n; ++i) {
      pairing += std::fabs(static_cast<double>((sa.values()[i] - sb.values()[i]).count()));
    }
    EXPECT_NEAR(value(wasserstein1(sa, sb)), pairing / n, 1e-9) << "trial " << trial;
  }
}

TEST(DistancesOnLargeSamples, StayExact) {
  // 10^6 samples k * 1000 (+ a 1e15 ns offset) against the same shifted by 7 ns: every unit of
  // probability moves 7 ns, so W1 = 7 exactly; F leads G by one step of 1/n between each pair.
  constexpr std::int64_t kN = 1'000'000;
  constexpr std::int64_t kOffset = 1'000'000'000'000'000;
  std::vector<Nanoseconds> a(kN), b(kN);
  for (std::int64_t k = 0; k < kN; ++k) {
    a[k] = Nanoseconds(kOffset + k * 1000);
    b[k] = a[k] + 7ns;
  }
  const SortedSamples sa(std::move(a)), sb(std::move(b));
  EXPECT_EQ(value(wasserstein1(sa, sb)), 7.0);
  EXPECT_EQ(ks_distance(sa, sb).value(), 1.0 / kN);
}

// ---- Autocorrelation ---------------------------------------------------------------------------

TEST(Autocorrelation, SmallCasesByHand) {
  // 1..5: deviations -2,-1,0,1,2, sum of squares 10. Lag 1: 2+0+0+2 = 4 -> 0.4; lag 2:
  // 0-1+0 = -1 -> -0.1; lags 3 and 4: -4 -> -0.4 (R: acf(1:5) = 1, .4, -.1, -.4, -.4).
  const auto s = ns({1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(autocorrelation(s, 0).value(), 1.0);
  EXPECT_DOUBLE_EQ(autocorrelation(s, 1).value(), 0.4);
  EXPECT_DOUBLE_EQ(autocorrelation(s, 2).value(), -0.1);
  EXPECT_DOUBLE_EQ(autocorrelation(s, 3).value(), -0.4);
  EXPECT_DOUBLE_EQ(autocorrelation(s, 4).value(), -0.4);
  // Alternating 0,1,0,1: deviations ±1/2, three lag-1 products of -1/4 over a sum of squares of 1.
  EXPECT_DOUBLE_EQ(autocorrelation(ns({0, 1, 0, 1}), 1).value(), -0.75);
  EXPECT_DOUBLE_EQ(autocorrelation(std::vector<bool>{false, true, false, true}, 1).value(), -0.75);
  // A huge offset changes nothing (the series is shifted exactly before any arithmetic).
  constexpr std::int64_t kBig = 4'000'000'000'000'000'000;
  EXPECT_DOUBLE_EQ(
      autocorrelation(ns({kBig + 1, kBig + 2, kBig + 3, kBig + 4, kBig + 5}), 1).value(), 0.4);
}

TEST(Autocorrelation, UndefinedCases) {
  EXPECT_FALSE(autocorrelation(std::span<const Nanoseconds>{}, 0));
  EXPECT_FALSE(autocorrelation(ns({1, 2, 3}), 3));  // lag >= n
  EXPECT_FALSE(autocorrelation(ns({4, 4, 4}), 1));  // constant
  EXPECT_FALSE(autocorrelation(std::vector<bool>{true, true}, 1));
}

// ---- Loss sequences ----------------------------------------------------------------------------

TEST(LossStatistics, BurstsGapsAndTransitionsByHand) {
  // T T F F F T F T T T F   (T = lost)
  const std::vector<bool> lost{true,  true, false, false, false, true,
                               false, true, true,  true,  false};
  const auto s = loss_statistics(lost);
  EXPECT_EQ(s.packets, 11u);
  EXPECT_EQ(s.lost, 6u);
  EXPECT_DOUBLE_EQ(s.loss_rate.value(), 6.0 / 11.0);
  // Bursts TT, T, TTT; gaps FFF, F, F.
  EXPECT_EQ(s.burst_lengths, (std::vector<std::uint64_t>{0, 1, 1, 1}));
  EXPECT_EQ(s.gap_lengths, (std::vector<std::uint64_t>{0, 2, 0, 1}));
  EXPECT_EQ(s.bursts, 3u);
  EXPECT_EQ(s.gaps, 3u);
  EXPECT_DOUBLE_EQ(s.mean_burst.value(), 2.0);
  EXPECT_DOUBLE_EQ(s.mean_gap.value(), 5.0 / 3.0);
  // Ten consecutive pairs: losses at 0,1,5,7,8,9 have a successor (6), three followed by a
  // delivery (1->2, 5->6, 9->10); deliveries at 2,3,4,6 have one (4), two followed by a loss.
  EXPECT_EQ(s.lost_followed, 6u);
  EXPECT_EQ(s.lost_to_delivered, 3u);
  EXPECT_EQ(s.delivered_followed, 4u);
  EXPECT_EQ(s.delivered_to_lost, 2u);
}

TEST(LossStatistics, EdgeCases) {
  const auto empty = loss_statistics({});
  EXPECT_EQ(empty.packets, 0u);
  EXPECT_FALSE(empty.loss_rate);
  EXPECT_FALSE(empty.mean_burst);
  EXPECT_FALSE(empty.mean_gap);
  const auto clean = loss_statistics(std::vector<bool>(5, false));
  EXPECT_EQ(clean.loss_rate, 0.0);
  EXPECT_FALSE(clean.mean_burst);
  EXPECT_TRUE(clean.burst_lengths.empty());
  EXPECT_EQ(clean.gap_lengths, (std::vector<std::uint64_t>{0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(clean.mean_gap, 5.0);
  const auto one = loss_statistics({true});
  EXPECT_EQ(one.loss_rate, 1.0);
  EXPECT_EQ(one.mean_burst, 1.0);
  EXPECT_EQ(one.lost_followed, 0u);
}

// ---- Sampling noise (validation's intervals) ----------------------------------------------------

TEST(NormalQuantile, MatchesTabulatedValues) {
  EXPECT_NEAR(normal_quantile(0.975).value(), 1.959964, 1e-6);
  EXPECT_NEAR(normal_quantile(0.995).value(), 2.575829, 1e-6);
  EXPECT_NEAR(normal_quantile(0.5).value(), 0.0, 1e-12);
  EXPECT_NEAR(normal_quantile(0.025).value(), -1.959964, 1e-6);
  EXPECT_FALSE(normal_quantile(0.0));
  EXPECT_FALSE(normal_quantile(1.0));
  EXPECT_FALSE(normal_quantile(std::nan("")));
}

TEST(EffectiveSampleSize, Ar1FormulaWithNegativeCorrelationNotCounted) {
  EXPECT_DOUBLE_EQ(effective_sample_size(1000, 0.6), 250.0);  // 1000 * 0.4 / 1.6
  EXPECT_DOUBLE_EQ(effective_sample_size(1000, std::nullopt), 1000.0);
  EXPECT_DOUBLE_EQ(effective_sample_size(1000, -0.5), 1000.0);
  EXPECT_NEAR(effective_sample_size(199'000, 1.0), 1000.0, 1e-6);  // rho held at 0.99
}

TEST(BatchMeansVariance, CountsRunsThatTheLag1AutocorrelationHardlySees) {
  // Runs of 50 ones and 50 zeros: 20 batches of 50, means 1, 0, 1, ...: their sample variance
  // (20 * 0.25 / 19) over 20.
  std::vector<double> runs;
  for (int k = 0; k < 1000; ++k) runs.push_back((k / 50) % 2 == 0 ? 1.0 : 0.0);
  EXPECT_NEAR(batch_means_variance(runs).value(), 5.0 / 19 / 20, 1e-12);
  // The same values alternating: every batch's mean is 0.5, nothing left over.
  std::vector<double> alternating;
  for (int k = 0; k < 1000; ++k) alternating.push_back(k % 2 == 0 ? 1.0 : 0.0);
  EXPECT_NEAR(batch_means_variance(alternating).value(), 0.0, 1e-15);
  // The remainder past 20 whole batches is left out: 1 019 values are 20 batches of 50.
  std::vector<double> longer = runs;
  longer.insert(longer.end(), 19, 1.0);
  EXPECT_NEAR(batch_means_variance(longer).value(), 5.0 / 19 / 20, 1e-12);
  // Too short for 20 batches of 2, or too few batches.
  EXPECT_FALSE(batch_means_variance(std::vector<double>(39, 1.0)));
  EXPECT_TRUE(batch_means_variance(std::vector<double>(40, 1.0)));
  EXPECT_FALSE(batch_means_variance(runs, 1));
}

TEST(KolmogorovSmirnov, OfCountsIsTheDistanceOfTheSamplesTheyCount) {
  // a: 1, 1, 2, 3 (counts {0, 2, 1, 1}); b: 1, 3, 3, 3, 5.
  const std::vector<std::uint64_t> a = {0, 2, 1, 1}, b = {0, 1, 0, 3, 0, 1};
  const SortedSamples sa(ns({1, 1, 2, 3})), sb(ns({1, 3, 3, 3, 5}));
  EXPECT_DOUBLE_EQ(ks_distance_of_counts(a, b).value(), ks_distance(sa, sb).value());
  EXPECT_DOUBLE_EQ(ks_distance_of_counts(a, b).value(), 0.55);  // at 2: 3/4 - 1/5
  EXPECT_FALSE(ks_distance_of_counts(a, std::vector<std::uint64_t>{0, 0}));
  EXPECT_DOUBLE_EQ(ks_critical_value_effective(100, 100, 0.05).value(),
                   ks_critical_value(100, 100, 0.05).value());
  EXPECT_FALSE(ks_critical_value_effective(0, 100, 0.05));
}

TEST(LossNoise, CyclesByHand) {
  // Cycles (losses, length): (0, 2) [the gap before the first loss], (2, 3), (1, 3). R = 3/8.
  const std::vector<bool> lost = {false, false, true, true, false, true, false, false};
  const LossNoise n = loss_noise(lost);
  EXPECT_EQ(n.cycles, 3u);
  // Residuals x - R y: -0.75, 0.875, -0.125; s^2 = (0.5625 + 0.765625 + 0.015625) / 2 = 0.671875;
  // V = N s^2 / n = 3 * 0.671875 / 8.
  EXPECT_DOUBLE_EQ(n.loss_rate_variance_per_probe.value(), 3 * 0.671875 / 8);
  EXPECT_DOUBLE_EQ(n.burst_variance.value(), 0.5);  // bursts 2 and 1
  EXPECT_FALSE(loss_noise({false, false}).loss_rate_variance_per_probe);
  EXPECT_FALSE(loss_noise({}).burst_variance);
}

// For a Gilbert chain (loss_bad 1, loss_good 0) the loss indicator is a two-state Markov chain with
// eigenvalue lambda = 1 - p - r, and the variance of its mean over n steps is pi (1 - pi)
// (1 + lambda) / (1 - lambda) / n (pi = p / (p + r)): the per-probe V the cycle estimator must
// find.
TEST(LossNoise, FindsAGilbertChainsVarianceAndIndependentLossesBinomialOne) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto chain = [&](double p, double r, std::size_t n) {
    std::vector<bool> lost(n);
    bool bad = false;
    for (std::size_t i = 0; i < n; ++i) {
      bad = bad ? u(rng) >= r : u(rng) < p;
      lost[i] = bad;
    }
    return lost;
  };
  // lab-regimes' regime-2: p 0.0218, r 0.336 (6.1 % loss in bursts of 3).
  const double p = 0.0218, r = 0.336, pi = p / (p + r), lambda = 1 - p - r;
  const double expected = pi * (1 - pi) * (1 + lambda) / (1 - lambda);
  // 2 000 000 steps hold ~120 000 cycles: the estimate's relative error is a few per cent at most.
  const LossNoise ge = loss_noise(chain(p, r, 2'000'000));
  EXPECT_NEAR(ge.loss_rate_variance_per_probe.value() / expected, 1.0, 0.05) << expected;
  // Mean burst 1/r, burst variance (1 - r) / r^2 (geometric).
  EXPECT_NEAR(ge.burst_variance.value() / ((1 - r) / (r * r)), 1.0, 0.05);
  // Independent losses (p + r = 1: lambda 0) are binomial.
  const LossNoise iid = loss_noise(chain(0.05, 0.95, 2'000'000));
  EXPECT_NEAR(iid.loss_rate_variance_per_probe.value() / (0.05 * 0.95), 1.0, 0.05);
}
