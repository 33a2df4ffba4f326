// The world changing under a session: the interface deleted mid-schedule ends that session cleanly
// (an interface-gone event, no errors, jitterd alive and answering, no IFB of its ingress left);
// jitterd's qdisc deleted or replaced behind its back ends the session with external-change
// (ended=true) and jitterd never touches what is there now; a change to its qdisc by another
// program is reported (ended=false) and the session goes on. iproute2 (`ip`, `tc`) plays the other
// program.
#include <gtest/gtest.h>

#include <chrono>

#include "e2e_support.hpp"

using namespace std::chrono_literals;
using jitterd_e2e::Json;

namespace {

// Events come from jitterd's netlink monitor within a few ms; the rest is the emulated machine.
constexpr auto kEventTimeout = 10s;

class E2eOutsideChange : public jitterd_e2e::E2eTest {
 protected:
  // Applies the two-phase schedule and waits for it to be in force.
  void apply_schedule(jitterd_e2e::EventStream& events) {
    const auto applied = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName});
    ASSERT_EQ(applied.exit_code, 0) << applied.err;
    ASSERT_TRUE(events.wait_for("applied", kEventTimeout)) << events.describe();
    ASSERT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
  }

  void expect_no_session() {
    EXPECT_TRUE(bed().ctl_json({"status"}).at("sessions").empty());
    const auto status = bed().ctl({"status", "jta"});
    EXPECT_EQ(status.exit_code, 3) << status.out << status.err;  // not-found
    EXPECT_TRUE(bed().ledger().at("interfaces").empty()) << bed().ledger().dump();
  }

  void expect_alive_and_answering() {
    EXPECT_TRUE(bed().daemon.running()) << bed().daemon.log();
    const Json version = bed().ctl_json({"version"});
    EXPECT_EQ(version.at("pid").get<pid_t>(), bed().daemon.pid());
  }
};

TEST_F(E2eOutsideChange, DeletingTheInterfaceMidScheduleEndsItsSessionCleanly) {
  auto events = bed().subscribe();
  apply_schedule(events);
  // Mid-schedule: after the first transition.
  ASSERT_TRUE(events.wait_for("phase-changed", kEventTimeout)) << events.describe();

  bed().in_ns_a("ip link del jta");
  const auto gone = events.wait_for("interface-gone", kEventTimeout);
  ASSERT_TRUE(gone) << events.describe();
  EXPECT_EQ(gone->at("interface"), "jta");
  EXPECT_EQ(gone->at("profile"), jitterd_e2e::kProfileName);

  expect_no_session();
  expect_alive_and_answering();
  const Json interfaces = bed().ctl_json({"interfaces"});
  for (const auto& i : interfaces.at("interfaces"))
    EXPECT_NE(i.at("name"), "jta") << interfaces.dump();
  // Cleanly: the schedule's next transition (due within 2 s) does not run into the missing
  // interface: no error, and no phase change after the interface went. How many came before is not
  // what this test is about (it depends on when `ip link del` ran, not on jitterd), so it is not
  // counted; the events' order is the judge.
  events.drain(std::chrono::duration_cast<std::chrono::milliseconds>(jitterd_e2e::kStepDuration) +
               500ms);
  EXPECT_TRUE(events.of_type("error").empty()) << events.describe();
  const auto changes = events.of_type("phase-changed");
  EXPECT_GE(changes.size(), 1u) << events.describe();
  for (const auto& change : changes) {
    EXPECT_LT(change.at("seq").get<std::uint64_t>(), gone->at("seq").get<std::uint64_t>())
        << events.describe();
  }

  const auto exit_code = bed().daemon.stop();
  ASSERT_TRUE(exit_code);
  EXPECT_EQ(*exit_code, 0) << bed().daemon.log();
}

TEST_F(E2eOutsideChange, DeletingAnInterfaceShapedOnIngressLeavesNoIfbBehind) {
  // The interface takes its filters and ingress qdisc along, but the IFB is a device of its own.
  auto events = bed().subscribe();
  const auto applied = bed().ctl(
      {"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--direction", "ingress"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  ASSERT_TRUE(events.wait_for("applied", kEventTimeout)) << events.describe();
  ASSERT_NE(bed().in_ns_a("ip -o link show type ifb").find("jdifb"), std::string::npos);

  bed().in_ns_a("ip link del jta");
  ASSERT_TRUE(events.wait_for("interface-gone", kEventTimeout)) << events.describe();
  EXPECT_EQ(bed().in_ns_a("ip -o link show type ifb"), "") << bed().daemon.log();
  expect_no_session();
  expect_alive_and_answering();
  EXPECT_TRUE(events.of_type("error").empty()) << events.describe();
}

TEST_F(E2eOutsideChange, QdiscDeletedBehindItsBackEndsTheSession) {
  const Json before = bed().root_qdisc_by_tc();
  auto events = bed().subscribe();
  apply_schedule(events);

  bed().in_ns_a("tc qdisc del dev jta root");
  const auto change = events.wait_for("external-change", kEventTimeout);
  ASSERT_TRUE(change) << events.describe();
  EXPECT_EQ(change->at("interface"), "jta");
  EXPECT_EQ(change->value("ended", false), true) << change->dump();
  EXPECT_NE(change->value("what", "").find("deleted"), std::string::npos) << change->dump();
  const auto cleared = events.wait_for("cleared", kEventTimeout);
  ASSERT_TRUE(cleared) << events.describe();
  EXPECT_EQ(cleared->at("reason"), "external-change");

  expect_no_session();
  expect_alive_and_answering();
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "0:");
  EXPECT_EQ(bed().root_qdisc_by_tc().value("kind", ""), before.value("kind", ""));
  events.drain(std::chrono::duration_cast<std::chrono::milliseconds>(jitterd_e2e::kStepDuration) +
               500ms);
  EXPECT_TRUE(events.of_type("error").empty()) << events.describe();
}

TEST_F(E2eOutsideChange, ForeignQdiscPutInItsPlaceIsLeftAlone) {
  auto events = bed().subscribe();
  apply_schedule(events);

  bed().in_ns_a("tc qdisc replace dev jta root handle 2: pfifo limit 77");
  const auto change = events.wait_for("external-change", kEventTimeout);
  ASSERT_TRUE(change) << events.describe();
  EXPECT_EQ(change->value("ended", false), true) << change->dump();
  EXPECT_NE(change->value("what", "").find("replaced by pfifo 2:"), std::string::npos)
      << change->dump();
  expect_no_session();

  // Not at the next scheduled transition, not at shutdown: jitterd never touches it.
  events.drain(std::chrono::duration_cast<std::chrono::milliseconds>(jitterd_e2e::kStepDuration) +
               500ms);
  const auto exit_code = bed().daemon.stop();
  ASSERT_TRUE(exit_code);
  EXPECT_EQ(*exit_code, 0) << bed().daemon.log();
  const Json root = bed().root_qdisc_by_tc();
  EXPECT_EQ(root.value("kind", ""), "pfifo") << root.dump();
  EXPECT_EQ(root.value("handle", ""), "2:") << root.dump();
  EXPECT_EQ(root.at("options").value("limit", 0), 77) << root.dump();
}

TEST_F(E2eOutsideChange, ChangeToItsQdiscByAnotherProgramIsReportedAndTheSessionGoesOn) {
  auto events = bed().subscribe();
  const auto applied = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  ASSERT_TRUE(events.wait_for("applied", kEventTimeout)) << events.describe();

  bed().in_ns_a("tc qdisc change dev jta root handle 1a7e: netem delay 7ms");
  const auto change = events.wait_for("external-change", kEventTimeout);
  ASSERT_TRUE(change) << events.describe();
  EXPECT_EQ(change->value("ended", true), false) << change->dump();

  const Json status = bed().ctl_json({"status", "jta"});
  ASSERT_EQ(status.at("sessions").size(), 1u) << status.dump();
  EXPECT_EQ(status.at("sessions")[0].at("phase"), "high");
  EXPECT_EQ(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
  EXPECT_TRUE(events.of_type("cleared").empty()) << events.describe();
  // The next transition sends the full state again (a switch back to the session's own phases
  // works).
  const auto switched = bed().ctl({"switch", "jta", "low"});
  EXPECT_EQ(switched.exit_code, 0) << switched.err;
  ASSERT_TRUE(events.wait_for("phase-changed", kEventTimeout)) << events.describe();
}

}  // namespace
