// Lanes of one interface (egress, ingress, rule sets), the SSH guard, commit-confirmed applies and
// offloads, against the fake backend: what layout each direction is given, in how many steps, and
// which events say so. The kernel side of the same (trees, IFB) is tested in tests/kernel.

#include <gtest/gtest.h>

#include "shaper/match_rules.hpp"
#include "test_files.hpp"
#include "test_support.hpp"

namespace jitterd::testing {
namespace {

using Call = FakeBackend::CallKind;
using namespace std::chrono_literals;

const LoadedProfile& profile() {
  static const LoadedProfile p = parse_test_profile(profile_json("held"));
  return p;
}

std::vector<shaper::U32Selector> redis_selectors() {
  auto parsed = shaper::parse_match_rule_text("proto=tcp,dport=6379");
  EXPECT_TRUE(parsed.rule);
  return shaper::compile_match(*parsed.rule);
}

ApplyRequest redis(DaemonRig& rig) {
  ApplyRequest r = rig.request("veth0", profile());
  r.set = "redis";
  r.selectors = redis_selectors();
  r.match = {"proto=tcp,dport=6379"};
  r.phase = "b";
  return r;
}

template <typename T>
T value(Outcome<T> o) {
  if (!o) {
    const RequestError& e = o.error();
    ADD_FAILURE() << e.code << ": " << e.message << " at " << e.where;
    return {};
  }
  return *std::move(o);
}

TEST(Lanes, BothDirectionsAreTwoSessionsAndOneClearRemovesBoth) {
  DaemonRig rig;
  ApplyRequest r = rig.request("veth0", profile());
  r.directions = {Direction::kEgress, Direction::kIngress};
  const auto list = value(rig.sessions.apply(r, test_peer()));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].direction, Direction::kEgress);
  EXPECT_EQ(list[1].direction, Direction::kIngress);
  EXPECT_EQ(rig.backend.layout_on(5, Direction::kEgress).lanes.size(), 1u);
  EXPECT_EQ(rig.backend.layout_on(5, Direction::kIngress).lanes.size(), 1u);
  // One transition, one event for the two lanes.
  ASSERT_EQ(rig.count(EventType::kApplied), 1u);
  EXPECT_EQ(rig.events_of(EventType::kApplied)[0].lanes.size(), 2u);

  const auto cleared = value(rig.sessions.clear("veth0", test_peer()));
  EXPECT_EQ(cleared, (std::vector<std::string>{"veth0", "veth0 ingress"}));
  EXPECT_EQ(rig.backend.count(Call::kRemove), 1u) << "one removal of everything, not lane by lane";
  EXPECT_TRUE(rig.backend.layout_on(5, Direction::kIngress).empty());
  EXPECT_FALSE(rig.backend.installed({5, "veth0"}));
}

TEST(Lanes, ARuleSetBesideTheWholeDirectionComesFirstAndClearingItKeepsTheOther) {
  DaemonRig rig;
  rig.apply_ok(rig.request("veth0", profile()));  // whole egress, phase a
  rig.apply_ok(redis(rig));                       // rule set, phase b
  Layout layout = rig.backend.layout_on(5, Direction::kEgress);
  ASSERT_EQ(layout.lanes.size(), 2u);
  EXPECT_EQ(layout.lanes[0].set, "redis");
  EXPECT_EQ(layout.lanes[0].selectors, redis_selectors());
  EXPECT_EQ(phase_of(layout.lanes[0].spec), "b");
  EXPECT_EQ(layout.lanes[1].set, "");
  EXPECT_EQ(phase_of(layout.lanes[1].spec), "a");

  Target t("veth0");
  t.set = "redis";
  EXPECT_EQ(value(rig.sessions.clear(t, test_peer())),
            std::vector<std::string>{"veth0 egress redis"});
  layout = rig.backend.layout_on(5, Direction::kEgress);
  ASSERT_EQ(layout.lanes.size(), 1u) << "the whole-direction lane stays";
  EXPECT_EQ(layout.lanes[0].set, "");
  EXPECT_EQ(rig.backend.count(Call::kRemove), 0u);
}

TEST(Lanes, ASwitchOfTheInterfaceChangesEveryLaneInOneStepAndOneEvent) {
  DaemonRig rig;
  ApplyRequest both = rig.request("veth0", profile());
  both.directions = {Direction::kEgress, Direction::kIngress};
  value(rig.sessions.apply(both, test_peer()));
  rig.apply_ok(redis(rig));
  const std::size_t before = rig.backend.count(Call::kApply);
  const auto list = value(rig.sessions.switch_phase("veth0", "c", std::nullopt, test_peer()));
  ASSERT_EQ(list.size(), 3u);
  for (const auto& s : list) EXPECT_EQ(s.phase, "c");
  EXPECT_EQ(rig.backend.count(Call::kApply) - before, 2u) << "one shape per direction";
  for (const auto& lane : rig.backend.layout_on(5, Direction::kEgress).lanes)
    EXPECT_EQ(phase_of(lane.spec), "c");
  ASSERT_EQ(rig.count(EventType::kPhaseChanged), 1u);
  const Event e = rig.events_of(EventType::kPhaseChanged)[0];
  ASSERT_EQ(e.lanes.size(), 3u);
  EXPECT_EQ(e.lanes[0].direction, "egress");
  EXPECT_EQ(e.lanes[2].direction, "ingress");

  // One lane alone.
  Target ingress("veth0");
  ingress.direction = Direction::kIngress;
  EXPECT_EQ(value(rig.sessions.switch_phase(ingress, "a", std::nullopt, test_peer())).size(), 1u);
  EXPECT_EQ(phase_of(rig.backend.layout_on(5, Direction::kIngress).lanes[0].spec), "a");
  EXPECT_EQ(phase_of(rig.backend.layout_on(5, Direction::kEgress).lanes[1].spec), "c");
}

TEST(Lanes, TheSshGuardSparesSshOnlyOnTheDefaultRouteInterface) {
  DaemonRig rig;
  auto status = rig.apply_ok(rig.request("veth0", profile()));
  EXPECT_TRUE(status.unshaped.empty());
  EXPECT_TRUE(rig.backend.layout_on(5, Direction::kEgress).bypass.empty());

  rig.backend.set_default_route(6, true);
  ApplyRequest r = rig.request("veth1", profile());
  r.ssh_connections.push_back(**shaper::parse_ssh_connection("192.0.2.7 51234 192.0.2.1 2222"));
  status = rig.apply_ok(r);
  ASSERT_EQ(status.unshaped.size(), 2u);
  EXPECT_EQ(status.unshaped[0], "tcp port 22 (either side)");
  EXPECT_NE(status.unshaped[1].find("192.0.2.7 port 51234"), std::string::npos)
      << status.unshaped[1];
  const Layout layout = rig.backend.layout_on(6, Direction::kEgress);
  EXPECT_FALSE(layout.bypass.empty());
  ASSERT_EQ(layout.lanes.size(), 1u);

  // sshd listening on 2222 too (found in /proc by the kernel backend): its sessions are spared as
  // well.
  const std::size_t bypass_22 = layout.bypass.size();
  rig.backend.set_ssh_ports({2222});
  status = rig.apply_ok(r);
  EXPECT_EQ(status.unshaped[0], "tcp ports 22, 2222 (either side)");
  EXPECT_GT(rig.backend.layout_on(6, Direction::kEgress).bypass.size(), bypass_22);

  r.protect_ssh = false;
  r.ssh_connections.clear();
  status = rig.apply_ok(r);
  EXPECT_TRUE(status.unshaped.empty());
  EXPECT_TRUE(rig.backend.layout_on(6, Direction::kEgress).bypass.empty())
      << "the operator turned it off";
}

TEST(Lanes, OffloadsGoOffWithTheFirstLaneAndComeBackWithTheLast) {
  DaemonRig rig;
  ApplyRequest r = rig.request("veth0", profile());
  r.offloads_off = true;
  rig.apply_ok(r);
  EXPECT_TRUE(rig.backend.offloads_off(5));
  EXPECT_EQ(rig.ledger.entries().size(), 1u);
  ApplyRequest rs = redis(rig);
  rs.offloads_off = true;
  rig.apply_ok(rs);
  Target t("veth0");
  t.set = "redis";
  value(rig.sessions.clear(t, test_peer()));
  EXPECT_TRUE(rig.backend.offloads_off(5)) << "a lane is still shaped";
  value(rig.sessions.clear("veth0", test_peer()));
  EXPECT_FALSE(rig.backend.offloads_off(5)) << "restored with the last lane";
}

TEST(Lanes, OffloadsAreRecordedBeforeTheDriverIsAskedToTurnThemOff) {
  // What a kill -9 at the moment the driver is asked would leave: the file already says what to put
  // back, so a restart restores them.
  DaemonRig rig;
  std::optional<std::vector<LedgerOffloads>> in_file;
  rig.backend.on_disable_offloads([&] {
    const auto loaded = rig.ledger.load();
    in_file = loaded->offloads;
    EXPECT_TRUE(loaded.diagnostics().empty());
  });
  ApplyRequest r = rig.request("veth0", profile());
  r.offloads_off = true;
  rig.apply_ok(r);
  ASSERT_TRUE(in_file) << "the driver was never asked";
  EXPECT_EQ(*in_file, (std::vector<LedgerOffloads>{{5, "veth0", true, true, true}}));
  EXPECT_TRUE(rig.backend.offloads_off(5));
}

TEST(Lanes, OffloadsTheDriverRefusesLeaveNeitherShapingNorARecord) {
  DaemonRig rig;
  rig.backend.fail_next_disable_offloads();
  ApplyRequest r = rig.request("veth0", profile());
  r.offloads_off = true;
  EXPECT_THROW(rig.sessions.apply(r, test_peer()), shaper::SystemError);
  EXPECT_FALSE(rig.backend.offloads_off(5));
  EXPECT_FALSE(rig.backend.spec_on(5)) << "the apply failed as a whole";
  const LedgerContents left = *rig.ledger.load();
  EXPECT_TRUE(left.offloads.empty()) << "a record of offloads that were never turned off";
  EXPECT_TRUE(left.sessions.empty());
}

TEST(Lanes, OffloadsOfALaterStartGoOffWhenItStartsNotBefore) {
  DaemonRig rig;
  ApplyRequest r = rig.request("veth0", profile());
  r.offloads_off = true;
  r.start = DaemonRig::Clock::now() + 100ms;
  rig.apply_ok(r);
  EXPECT_FALSE(rig.backend.offloads_off(5)) << "nothing changes before the start";
  rig.run_for(250ms);
  EXPECT_TRUE(rig.backend.offloads_off(5)) << "the session started without turning them off";
  EXPECT_EQ(rig.ledger.entries().size(), 1u);
  value(rig.sessions.clear("veth0", test_peer()));
  EXPECT_FALSE(rig.backend.offloads_off(5));
}

TEST(Lanes, RequestsNamingAMissingLaneSayWhichLanesExist) {
  DaemonRig rig;
  rig.apply_ok(rig.request("veth0", profile()));
  Target t("veth0");
  t.direction = Direction::kIngress;
  const auto o = rig.sessions.switch_phase(t, "b", std::nullopt, test_peer());
  ASSERT_FALSE(o);
  const auto& e = o.error();
  EXPECT_EQ(e.code, "not-found");
  EXPECT_EQ(e.message, "veth0 ingress has no jitterd session");
  EXPECT_EQ(e.hint, "sessions on veth0: veth0");
}

}  // namespace
}  // namespace jitterd::testing
