// Gilbert–Elliott loss through a real netem: loss rate and mean burst length over 10 000 probes.
#include <gtest/gtest.h>

#include <cmath>

#include "shaper/netem_engine.hpp"
#include "stats_helpers.hpp"
#include "test_network.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using jitterd_test::VethPair;

TEST(NetemLoss, GilbertElliottRateAndBurstLength) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  // Simple Gilbert: everything lost in Bad, nothing in Good. π_B = p/(p+r) = 7.4 %, mean burst 1/r
  // = 4.
  constexpr double p = 0.02, r = 0.25;
  NetemSpec spec;
  spec.loss = GilbertElliottLoss{Probability::checked(p), Probability::checked(r),
                                 Probability::one(), Probability::zero()};
  NetemQdisc qdisc = engine.install(engine.resolve(std::string(VethPair::kDevA)), spec);

  constexpr int kProbes = 10000;
  const auto result = jitterd_test::ping(net, kProbes, 1ms);
  ASSERT_EQ(result.transmitted, kProbes);
  const auto& lost = result.lost;
  const double n = static_cast<double>(lost.size());
  const double loss_rate = static_cast<double>(std::count(lost.begin(), lost.end(), true)) / n;
  const auto bursts = jitterd_test::burst_lengths(lost);
  ASSERT_FALSE(bursts.empty());
  double burst_mean = 0;
  for (int b : bursts) burst_mean += b;
  burst_mean /= static_cast<double>(bursts.size());

  // The loss indicators form a two-state Markov chain with eigenvalue λ = 1 - p - r, so the
  // variance of their mean is π(1-π)/n · (1+λ)/(1-λ) (not the binomial π(1-π)/n).
  const double pi = p / (p + r);
  const double lambda = 1 - p - r;
  const double rate_se = std::sqrt(pi * (1 - pi) / n * (1 + lambda) / (1 - lambda));
  EXPECT_NEAR(loss_rate, pi, 4.5 * rate_se);
  // Bursts are geometric with mean 1/r and variance (1-r)/r²; about n·π·r of them.
  const double bursts_expected = n * pi * r;
  const double burst_se = std::sqrt((1 - r) / (r * r)) / std::sqrt(bursts_expected);
  EXPECT_NEAR(burst_mean, 1 / r, 4.5 * burst_se);
  // And loss is bursty, unlike Bernoulli loss of the same rate (mean burst 1/(1-π) = 1.08).
  EXPECT_GT(burst_mean, 2.0);
}
