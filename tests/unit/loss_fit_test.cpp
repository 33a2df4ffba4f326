// The Baum–Welch loss fits, bit for bit: the expected values are what the dense fits of commit
// 8e659dc (every N × N product computed) gave for the same simulated sequences, printed with %a.
// The fits now skip the products that are zero by construction, which must not change a single bit
// (a compiled profile's digest depends on them; loss_fit.cpp says why the skipping is exact).
#include <gtest/gtest.h>

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

void expect_fits(const std::vector<bool>& lost, const Expected& e) {
  const FourStateLoss f = fit_four_state(lost);
  EXPECT_EQ(f.p13.value(), e.p13);
  EXPECT_EQ(f.p14.value(), e.p14);
  EXPECT_EQ(f.p23.value(), e.p23);
  EXPECT_EQ(f.p31.value(), e.p31);
  EXPECT_EQ(f.p32.value(), e.p32);
  const GilbertElliottLoss g = fit_gilbert_elliott(lost);
  EXPECT_EQ(g.p.value(), e.p);
  EXPECT_EQ(g.r.value(), e.r);
  EXPECT_EQ(g.loss_good.value(), e.loss_good);
  EXPECT_EQ(g.loss_bad.value(), e.loss_bad);
}

}  // namespace

TEST(LossFit, FourStateAndGilbertElliottFitsOfAFourStateChainAreTheDenseFitsBitForBit) {
  expect_fits(simulate_loss(four_state(0.01, 0.3, 0.05, 0.2, 0.005), 60'000, 1),
              {0x1.219100746e477p-7, 0x1.784b8539d468cp-8, 0x1.8010d1527fa41p-3,
               0x1.2a395d219f7c3p-2, 0x1.f16b6e866709bp-5, 0x1.49e8a3f366b52p-7,
               0x1.54710ca069a1dp-2, 0x1.8ab2b400da082p-8, 0x1.f32458784860ep-1});
}

// 400 000 packets: more than the fits' window of 250 000 (kMaxBaumWelchPackets).
TEST(LossFit, FitsOfALongSequenceUseTheirWindowAndAreTheDenseFitsBitForBit) {
  expect_fits(simulate_loss(four_state(0.0005, 0.7, 0.05, 0.2, 0.005), 400'000, 1),
              {0x1.11ce0970c580bp-9, 0x1.c839ef51fe042p-9, 0x1.8a247ab18e652p-4,
               0x1.d03caddc25d4cp-1, 0x1.7e84ab59b82d1p-6, 0x1.4548b92a7ef31p-8,
               0x1.eef0266a2503cp-1, 0x1.e30055c56cfe2p-11, 0x1.e442fd80d4d6p-1});
}

TEST(LossFit, FitsOfAGilbertElliottChainAreTheDenseFitsBitForBit) {
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
