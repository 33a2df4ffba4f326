// The Baum–Welch loss fits against per-packet forward–backward passes. The expected values are what
// the dense fits of commit 8e659dc (every N × N product computed, packet by packet) gave for the
// same simulated sequences, printed with %a: Gilbert–Elliott's fit must still give them bit for
// bit; the 4-state fit now runs over runs of deliveries (loss_fit.cpp, four_state_runs), which sums
// in another order, so it must agree to 1e-9. The second half checks refine_four_state against a
// per-packet pass written here, on the sequences where runs are hardest: long runs, none, losses
// first and last.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "shaper/loss_fit.hpp"

using namespace shaper;

namespace {

FourStateLoss four_state(double p13, double p31, double p32, double p23, double p14) {
  FourStateLoss m;
  m.p13 = Probability::checked(p13);
  m.p31 = Probability::checked(p31);
  m.p32 = Probability::checked(p32);
  m.p23 = Probability::checked(p23);
  m.p14 = Probability::checked(p14);
  return m;
}

struct Expected {
  double p13, p14, p23, p31, p32;    // fit_four_state
  double p, r, loss_good, loss_bad;  // fit_gilbert_elliott
};

// Agreement of two fits of the same model that sum in different orders.
constexpr double kRelativeTolerance = 1e-9;

void expect_close(double actual, double expected) {
  EXPECT_NEAR(actual, expected, kRelativeTolerance * std::max(std::fabs(expected), 1e-12));
}

void expect_fits(const std::vector<bool>& lost, const Expected& e) {
  const FourStateLoss f = fit_four_state(lost);
  expect_close(f.p13.value(), e.p13);
  expect_close(f.p14.value(), e.p14);
  expect_close(f.p23.value(), e.p23);
  expect_close(f.p31.value(), e.p31);
  expect_close(f.p32.value(), e.p32);
  const GilbertElliottLoss g = fit_gilbert_elliott(lost);
  EXPECT_EQ(g.p.value(), e.p);
  EXPECT_EQ(g.r.value(), e.r);
  EXPECT_EQ(g.loss_good.value(), e.loss_good);
  EXPECT_EQ(g.loss_bad.value(), e.loss_bad);
}

}  // namespace

TEST(LossFit, FourStateAndGilbertElliottFitsOfAFourStateChainMatchTheDenseFits) {
  expect_fits(simulate_loss(four_state(0.01, 0.3, 0.05, 0.2, 0.005), 60'000, 1),
              {0x1.219100746e477p-7, 0x1.784b8539d468cp-8, 0x1.8010d1527fa41p-3,
               0x1.2a395d219f7c3p-2, 0x1.f16b6e866709bp-5, 0x1.49e8a3f366b52p-7,
               0x1.54710ca069a1dp-2, 0x1.8ab2b400da082p-8, 0x1.f32458784860ep-1});
}

// 400 000 packets: more than the fits' window of 250 000 (kMaxBaumWelchPackets).
TEST(LossFit, FitsOfALongSequenceUseTheirWindowAndMatchTheDenseFits) {
  expect_fits(simulate_loss(four_state(0.0005, 0.7, 0.05, 0.2, 0.005), 400'000, 1),
              {0x1.11ce0970c580bp-9, 0x1.c839ef51fe042p-9, 0x1.8a247ab18e652p-4,
               0x1.d03caddc25d4cp-1, 0x1.7e84ab59b82d1p-6, 0x1.4548b92a7ef31p-8,
               0x1.eef0266a2503cp-1, 0x1.e30055c56cfe2p-11, 0x1.e442fd80d4d6p-1});
}

TEST(LossFit, FitsOfAGilbertElliottChainMatchTheDenseFits) {
  GilbertElliottLoss ge;
  ge.p = Probability::checked(0.02);
  ge.r = Probability::checked(0.4);
  ge.loss_bad = Probability::checked(0.8);
  ge.loss_good = Probability::checked(0.001);
  expect_fits(simulate_loss(ge, 60'000, 7),
              {0x1.2b056cd68a511p-6, 0x1.0d7947997900ap-10, 0x1.b53dcf6201444p-1,
               0x1.cf90040e2957cp-2, 0x1.0dc110cacedbfp-4, 0x1.4f16e2d63026dp-6,
               0x1.988e794ffd83ap-2, 0x1.afca615a35515p-11, 0x1.9768cfadfc7aap-1});
}

namespace {

using Matrix = std::array<std::array<double, 4>, 4>;
using Vector = std::array<double, 4>;

// A textbook scaled forward–backward pass over every packet (Rabiner), for netem's 4-state chain
// with fixed emissions (states 0 and 1 deliver, 2 and 3 lose), the same start (netem enters its
// first packet from state 1) and the same stopping rule as loss_fit.cpp.
FourStateLoss per_packet_fit(const FourStateLoss& start, const std::vector<bool>& lost,
                             int iterations) {
  const double p13 = start.p13.value(), p14 = start.p14.value(), p23 = start.p23.value(),
               p31 = start.p31.value(), p32 = start.p32.value();
  Matrix a{{{1 - p13 - p14, 0, p13, p14},
            {0, 1 - p23, p23, 0},
            {p31, p32, 1 - p31 - p32, 0},
            {1, 0, 0, 0}}};
  const Vector initial = a[0];
  const auto e = [](std::size_t state, bool is_lost) {
    return (state >= 2) == is_lost ? 1.0 : 0.0;
  };
  const std::size_t n = lost.size();
  double previous = -INFINITY;
  for (int k = 0; k < iterations; ++k) {
    std::vector<Vector> alpha(n);
    std::vector<double> scale(n);
    double ll = 0;
    for (std::size_t t = 0; t < n; ++t) {
      double sum = 0;
      for (std::size_t j = 0; j < 4; ++j) {
        double v = 0;
        for (std::size_t i = 0; i < 4; ++i)
          v += t == 0 ? (i == 0 ? initial[j] : 0) : alpha[t - 1][i] * a[i][j];
        alpha[t][j] = v * e(j, lost[t]);
        sum += alpha[t][j];
      }
      if (sum <= 0) sum = 1e-300;
      for (double& v : alpha[t]) v /= sum;
      scale[t] = sum;
      ll += std::log(sum);
    }
    Matrix xi_sum{};
    Vector beta;
    beta.fill(1.0);
    for (std::size_t t = n; t-- > 1;) {
      Matrix xi{};
      Vector next{};
      double norm = 0;
      for (std::size_t i = 0; i < 4; ++i) {
        for (std::size_t j = 0; j < 4; ++j) {
          const double w = a[i][j] * e(j, lost[t]) * beta[j];
          next[i] += w;
          xi[i][j] = alpha[t - 1][i] * w;
          norm += xi[i][j];
        }
      }
      for (std::size_t i = 0; i < 4 && norm > 0; ++i) {
        for (std::size_t j = 0; j < 4; ++j) xi_sum[i][j] += xi[i][j] / norm;
      }
      for (std::size_t i = 0; i < 4; ++i) beta[i] = next[i] / scale[t];
    }
    for (std::size_t i = 0; i < 4; ++i) {
      double row = 0;
      for (const double x : xi_sum[i]) row += x;
      for (std::size_t j = 0; j < 4 && row > 0; ++j) a[i][j] = xi_sum[i][j] / row;
    }
    if (std::isfinite(previous) && ll - previous < 1e-6 * std::fabs(ll)) break;
    previous = ll;
  }
  return four_state(a[0][2], a[2][0], a[2][1], a[1][2], a[0][3]);
}

void expect_refine_matches_per_packet(const std::vector<bool>& lost, int iterations = 60) {
  const FourStateLoss start = four_state(0.01, 0.5, 0.1, 0.3, 0.005);
  const FourStateLoss runs = refine_four_state(start, lost, iterations);
  const FourStateLoss packets = per_packet_fit(start, lost, iterations);
  expect_close(runs.p13.value(), packets.p13.value());
  expect_close(runs.p14.value(), packets.p14.value());
  expect_close(runs.p23.value(), packets.p23.value());
  expect_close(runs.p31.value(), packets.p31.value());
  expect_close(runs.p32.value(), packets.p32.value());
}

}  // namespace

TEST(LossFit, FourStateRunsMatchAPerPacketPassOnBurstyLoss) {
  const std::vector<bool> lost = simulate_loss(four_state(0.02, 0.3, 0.05, 0.2, 0.01), 20'000, 3);
  expect_refine_matches_per_packet(lost);
  // One pass only: the first update, before any stopping rule can hide a difference.
  expect_refine_matches_per_packet(lost, 1);
}

TEST(LossFit, FourStateRunsMatchAPerPacketPassAcrossLongRuns) {
  // Runs of up to 100 000 deliveries: a00^L and a11^L underflow a double unless taken in
  // logarithms. Between them, bursts with short gaps, so that every transition of the chain has
  // weight (a row without any, like state 1's when it is never visited, keeps whatever the
  // arithmetic leaves, which is nothing to compare).
  std::vector<bool> lost(200'000, false);
  for (const std::size_t at : {0, 1, 4, 5, 9, 100'000, 100'001, 100'003, 100'004, 100'007, 100'008,
                               100'009, 100'012, 160'000, 160'002, 160'003, 199'999}) {
    lost[at] = true;
  }
  expect_refine_matches_per_packet(lost, 3);
  expect_refine_matches_per_packet(lost, 1);
}

TEST(LossFit, FourStateRunsMatchAPerPacketPassAtTheEdges) {
  expect_refine_matches_per_packet(std::vector<bool>(1'000, false), 1);  // no loss at all
  expect_refine_matches_per_packet(std::vector<bool>(50, true), 1);      // nothing but loss
  expect_refine_matches_per_packet({true}, 1);
  expect_refine_matches_per_packet({false}, 1);
  expect_refine_matches_per_packet({false, true, false}, 1);
  std::vector<bool> alternating(2'000);
  for (std::size_t i = 0; i < alternating.size(); ++i) alternating[i] = i % 2 == 0;
  expect_refine_matches_per_packet(alternating);
}
