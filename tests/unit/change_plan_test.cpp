// plan_change: what a change sends, given what the kernel holds (no kernel needed).
#include <gtest/gtest.h>

#include "shaper/distribution_tables.hpp"
#include "shaper/netem_engine.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

NetemSpec with_table(Nanoseconds latency) {
  NetemSpec spec;
  spec.delay.latency = latency;
  spec.delay.jitter = 2ms;
  spec.delay.distribution = make_normal_table(4096);
  return spec;
}

NetemSpec with_ge(double p) {
  NetemSpec spec;
  spec.loss = GilbertElliottLoss{Probability::checked(p), Probability::checked(0.25)};
  return spec;
}

}  // namespace

TEST(ChangePlan, UnchangedTableIsNotResent) {
  const auto plan = plan_change(with_table(10ms), with_table(30ms), true);
  EXPECT_FALSE(plan.encode.send_delay_table);
  EXPECT_EQ(plan.to_send.delay.latency, 30ms);
}

TEST(ChangePlan, ChangedTableIsSent) {
  NetemSpec wanted = with_table(10ms);
  wanted.delay.distribution = make_pareto_table(4096);
  EXPECT_TRUE(plan_change(with_table(10ms), wanted, true).encode.send_delay_table);
}

TEST(ChangePlan, UnknownKernelTablesAreAlwaysResent) {
  EXPECT_TRUE(plan_change(with_table(10ms), with_table(10ms), false).encode.send_delay_table);
}

TEST(ChangePlan, DroppingATableSendsAUniformOne) {
  NetemSpec wanted;
  wanted.delay.latency = 10ms;
  wanted.delay.jitter = 2ms;  // plain uniform jitter wanted
  const auto plan = plan_change(with_table(10ms), wanted, true);
  ASSERT_TRUE(plan.to_send.delay.distribution);
  EXPECT_EQ(*plan.to_send.delay.distribution, make_uniform_table());
  EXPECT_TRUE(plan.encode.send_delay_table);
  // Without jitter the kernel ignores the table entirely, so nothing needs sending.
  wanted.delay.jitter = 0ms;
  EXPECT_FALSE(plan_change(with_table(10ms), wanted, true).to_send.delay.distribution);
}

TEST(ChangePlan, NoTableEverInstalledStaysTableless) {
  NetemSpec applied, wanted;
  wanted.delay.latency = 5ms;
  wanted.delay.jitter = 1ms;
  const auto plan = plan_change(applied, wanted, true);
  EXPECT_FALSE(plan.to_send.delay.distribution);
  EXPECT_FALSE(plan.encode.send_delay_table);
}

TEST(ChangePlan, LossChainKeepsRunningWhenTheModelIsUnchanged) {
  NetemSpec wanted = with_ge(0.01);
  wanted.delay.latency = 40ms;  // only the delay changes
  EXPECT_EQ(plan_change(with_ge(0.01), wanted, true).encode.loss, LossEncoding::kKeepRunning);
  EXPECT_EQ(plan_change(with_ge(0.01), with_ge(0.02), true).encode.loss, LossEncoding::kFull);
  EXPECT_EQ(plan_change(NetemSpec{}, with_ge(0.02), true).encode.loss, LossEncoding::kFull);
}

TEST(ChangePlan, LossModelsAreComparedInKernelUnits) {
  // A model read back from the kernel differs from the user's double by rounding only.
  NetemSpec applied = with_ge(0.01);
  auto& ge = std::get<GilbertElliottLoss>(applied.loss);
  ge.p = Probability::checked(0.01 + 1e-13);
  EXPECT_EQ(plan_change(applied, with_ge(0.01), false).encode.loss, LossEncoding::kKeepRunning);
}

TEST(ChangePlan, UniformSlotAfterASlotTableBecomesAUniformTable) {
  NetemSpec applied;
  applied.slot = SlotSpec{0ms, 0ms, SlotDistribution{2ms, 1ms, make_normal_table(64)}, 0, 0};
  NetemSpec wanted;
  wanted.slot = SlotSpec{1ms, 5ms, std::nullopt, 4, 0};
  const auto plan = plan_change(applied, wanted, true);
  ASSERT_TRUE(plan.to_send.slot->distribution);
  EXPECT_EQ(plan.to_send.slot->distribution->delay, 3ms);
  EXPECT_EQ(plan.to_send.slot->distribution->jitter, 2ms);
  EXPECT_TRUE(plan.encode.send_slot_table);
  EXPECT_EQ(plan.to_send.slot->max_packets, 4);
}
