// Typed quantities and the kernel-unit conversions (kernel_units.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "shaper/kernel_units.hpp"
#include "shaper/quantities.hpp"

using namespace shaper;
using namespace std::chrono_literals;

TEST(Probability, AcceptsTheClosedUnitIntervalOnly) {
  EXPECT_TRUE(Probability::make(0.0));
  EXPECT_TRUE(Probability::make(1.0));
  EXPECT_TRUE(Probability::make(0.25));
  EXPECT_FALSE(Probability::make(-1e-12));
  EXPECT_FALSE(Probability::make(1.0000001));
  EXPECT_FALSE(Probability::make(std::nan("")));
  EXPECT_FALSE(Probability::make(std::numeric_limits<double>::infinity()));
  EXPECT_DOUBLE_EQ(Probability::make(0.3)->complement().value(), 0.7);
}

TEST(FormatDuration, PicksAReadableUnit) {
  EXPECT_EQ(format_duration(250ns), "250ns");
  EXPECT_EQ(format_duration(3us), "3us");
  EXPECT_EQ(format_duration(12500us), "12.5ms");
  EXPECT_EQ(format_duration(1200ms), "1.2s");
  EXPECT_EQ(format_duration(-5ms), "-5ms");
}

TEST(KernelUnits, ProbabilityIsScaledToUint32Max) {
  EXPECT_EQ(kernel_units::probability(Probability::zero()), 0u);
  EXPECT_EQ(kernel_units::probability(Probability::one()), 0xffffffffu);
  // tc's set_percent: rint(0.5 * 4294967295) = 2147483648 (ties to even on .5).
  EXPECT_EQ(kernel_units::probability(Probability::checked(0.5)), 2147483648u);
  EXPECT_EQ(kernel_units::probability(Probability::checked(0.01)), 42949673u);
}

TEST(KernelUnits, ProbabilityRoundTripsEveryKernelValueExactly) {
  // Sampled across the whole u32 range plus the edges: decode then encode gives the same word.
  for (std::uint64_t v = 0; v <= 0xffffffffull; v += 999983) {
    const auto word = static_cast<std::uint32_t>(v);
    EXPECT_EQ(kernel_units::probability(kernel_units::probability_from(word)), word) << v;
  }
  for (std::uint32_t word : {0u, 1u, 2u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu}) {
    EXPECT_EQ(kernel_units::probability(kernel_units::probability_from(word)), word) << word;
  }
}

TEST(KernelUnits, PschedTicksAre64NanosecondsAndSaturate) {
  EXPECT_EQ(kernel_units::psched_ticks(0ns), 0u);
  EXPECT_EQ(kernel_units::psched_ticks(63ns), 0u);
  EXPECT_EQ(kernel_units::psched_ticks(64ns), 1u);
  EXPECT_EQ(kernel_units::psched_ticks(20ms), 20'000'000u / 64);
  // 2^32 ticks of 64 ns is ~274.9 s: beyond it the kernel's own dump saturates, so do we.
  EXPECT_EQ(kernel_units::psched_ticks(300s), 0xffffffffu);
  EXPECT_EQ(kernel_units::psched_ticks(-1ms), 0u);
}

TEST(KernelUnits, RatesOf4GiBPerSecondAndAboveGoToRate64) {
  EXPECT_FALSE(kernel_units::needs_rate64(BytesPerSecond{0xffffffffull}));
  EXPECT_EQ(kernel_units::rate32(BytesPerSecond{125'000'000}), 125'000'000u);
  EXPECT_TRUE(kernel_units::needs_rate64(BytesPerSecond{1ull << 32}));
  EXPECT_EQ(kernel_units::rate32(BytesPerSecond{12'500'000'000ull}), 0xffffffffu);
}

TEST(KernelUnits, GilbertElliottHIsTheDeliveryProbabilityInBad) {
  // Lose everything in Bad: the kernel loses when random > h, so h must be 0.
  EXPECT_EQ(kernel_units::ge_h_from_loss_bad(Probability::one()), 0u);
  EXPECT_EQ(kernel_units::ge_h_from_loss_bad(Probability::zero()), 0xffffffffu);
  EXPECT_EQ(kernel_units::ge_k1_from_loss_good(Probability::checked(0.01)), 42949673u);
  for (std::uint32_t h : {0u, 1u, 123456789u, 0xfffffffeu, 0xffffffffu}) {
    EXPECT_EQ(kernel_units::ge_h_from_loss_bad(kernel_units::loss_bad_from_ge_h(h)), h);
  }
}
