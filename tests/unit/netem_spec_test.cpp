// NetemSpec validation: every rule, with the field it names and the words that tell how to fix it.
#include <gtest/gtest.h>

#include "shaper/distribution_tables.hpp"
#include "shaper/netem_spec.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

// The single diagnostic for `spec`, or a failure listing them all.
Diagnostic only_diagnostic(const NetemSpec& spec) {
  const Diagnostics d = validate(spec);
  EXPECT_EQ(d.size(), 1u) << to_string(d);
  return d.empty() ? Diagnostic{} : d.front();
}

NetemSpec delayed() {
  NetemSpec spec;
  spec.delay.latency = 10ms;
  return spec;
}

}  // namespace

TEST(NetemSpecValidate, DefaultAndRichSpecsAreValid) {
  EXPECT_TRUE(validate(NetemSpec{}).empty());
  NetemSpec spec = delayed();
  spec.delay.jitter = 2ms;
  spec.delay.distribution = make_normal_table();
  spec.loss = GilbertElliottLoss{Probability::checked(0.01), Probability::checked(0.3)};
  spec.ecn = true;
  spec.reorder = {Probability::checked(0.1), Probability::zero(), 5};
  spec.slot = SlotSpec{1ms, 3ms, std::nullopt, 10, 0};
  EXPECT_TRUE(validate(spec).empty()) << to_string(validate(spec));
}

TEST(NetemSpecValidate, NegativeLatency) {
  NetemSpec spec;
  spec.delay.latency = -1ms;
  const auto d = only_diagnostic(spec);
  EXPECT_EQ(d.where, "delay.latency");
  EXPECT_EQ(d.message, "-1ms is negative; delays must be 0 or more");
}

TEST(NetemSpecValidate, JitterAboveIntMax) {
  NetemSpec spec = delayed();
  spec.delay.jitter = 2147483648ns;
  const auto d = only_diagnostic(spec);
  EXPECT_EQ(d.where, "delay.jitter");
  EXPECT_NE(d.message.find("jitter limit of 2.147483647s"), std::string::npos) << d.message;
}

TEST(NetemSpecValidate, TableSizes) {
  NetemSpec spec = delayed();
  spec.delay.jitter = 1ms;
  spec.delay.distribution = DistributionTable{};
  EXPECT_EQ(only_diagnostic(spec).message,
            "the table is empty; give 1 to 16384 entries, or leave the table out");
  spec.delay.distribution = DistributionTable(16385, 0);
  EXPECT_EQ(only_diagnostic(spec).message,
            "the table has 16385 entries; the kernel accepts at most 16384 (NETEM_DIST_MAX)");
  spec.delay.distribution = DistributionTable(16384, 0);
  EXPECT_TRUE(validate(spec).empty());
}

TEST(NetemSpecValidate, TableWithoutJitterIsIgnoredByTheKernel) {
  NetemSpec spec = delayed();
  spec.delay.distribution = make_normal_table(4096);
  const auto d = only_diagnostic(spec);
  EXPECT_EQ(d.where, "delay.distribution");
  EXPECT_NE(d.message.find("ignores the table when jitter is 0"), std::string::npos);
}

TEST(NetemSpecValidate, ReorderRules) {
  NetemSpec spec = delayed();
  spec.reorder.probability = Probability::checked(0.2);
  EXPECT_EQ(only_diagnostic(spec).where, "reorder.gap");
  spec.reorder = {Probability::zero(), Probability::zero(), 3};
  EXPECT_EQ(only_diagnostic(spec).where, "reorder.probability");
  NetemSpec undelayed;
  undelayed.reorder = {Probability::checked(0.2), Probability::zero(), 1};
  EXPECT_EQ(only_diagnostic(undelayed).where, "reorder");
}

TEST(NetemSpecValidate, EcnNeedsALossModel) {
  NetemSpec spec;
  spec.ecn = true;
  EXPECT_EQ(only_diagnostic(spec).where, "ecn");
  spec.loss = RandomLoss{Probability::zero(), Probability::zero()};
  EXPECT_EQ(only_diagnostic(spec).where, "ecn");
  spec.loss = RandomLoss{Probability::checked(0.01), Probability::zero()};
  EXPECT_TRUE(validate(spec).empty());
}

TEST(NetemSpecValidate, SlotRules) {
  NetemSpec spec;
  spec.slot = SlotSpec{5ms, 1ms, std::nullopt, 0, 0};
  EXPECT_EQ(only_diagnostic(spec).message, "1ms is below slot.min_delay 5ms");
  spec.slot = SlotSpec{0ms, 3s, std::nullopt, 0, 0};
  EXPECT_NE(only_diagnostic(spec).message.find("overflows the kernel's slot arithmetic"),
            std::string::npos);
  spec.slot = SlotSpec{};
  EXPECT_EQ(only_diagnostic(spec).where, "slot");
  spec.slot = SlotSpec{1ms, 2ms, std::nullopt, -1, 0};
  EXPECT_EQ(only_diagnostic(spec).where, "slot.max_packets");
  spec.slot = SlotSpec{1ms, 2ms, std::nullopt, 0, -5};
  EXPECT_EQ(only_diagnostic(spec).where, "slot.max_bytes");
  spec.slot = SlotSpec{0ms, 0ms, SlotDistribution{2ms, 0ms, make_normal_table(16)}, 0, 0};
  EXPECT_EQ(only_diagnostic(spec).where, "slot.distribution.jitter");
}

TEST(NetemSpecValidate, LimitZeroDropsEverything) {
  NetemSpec spec;
  spec.limit = 0;
  const auto d = only_diagnostic(spec);
  EXPECT_EQ(d.where, "limit");
  EXPECT_NE(d.message.find("drop every packet"), std::string::npos);
}

TEST(NetemSpecValidate, TwoFullTablesDoNotFitOneAttribute) {
  NetemSpec spec = delayed();
  spec.delay.jitter = 1ms;
  spec.delay.distribution = make_normal_table(16384);
  spec.slot = SlotSpec{0ms, 0ms, SlotDistribution{1ms, 1ms, make_normal_table(16384)}, 0, 0};
  const auto d = only_diagnostic(spec);
  EXPECT_NE(d.message.find("65535"), std::string::npos) << d.message;
  spec.slot->distribution->table = make_normal_table(16255);
  EXPECT_TRUE(validate(spec).empty()) << to_string(validate(spec));
}
