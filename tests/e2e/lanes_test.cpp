// Lanes through jitterd and jitterctl on a real veth in the VM: ingress alone (an IFB jitterd
// owns), both directions (the RTT is the sum), a rule set that shapes one destination while another
// passes unshaped, commit-confirmed rollback, and clear leaving no IFB, filter or qdisc. iproute2,
// ping and the ledger are the independent readers.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>

#include "e2e_support.hpp"

using namespace std::chrono_literals;
using jitterd_e2e::Json;

namespace {

constexpr auto kEventTimeout = 10s;
// Unshaped round trips on the emulated machine stay well below this; shaped ones are at least the
// profile's delay (netem never releases early), so the two bands cannot be confused.
constexpr double kUnshapedMs = 15;
constexpr double kHighMs = 50;  // jitterd_e2e::kHighDelay

// The smallest RTT of `count` pings (ms), from ping's own summary line.
double min_rtt(const std::string& output) {
  static const std::regex summary(R"(= ([0-9.]+)/([0-9.]+)/([0-9.]+))");
  std::smatch m;
  if (!std::regex_search(output, m, summary))
    throw std::runtime_error("no ping summary in: " + output);
  return std::stod(m[1].str());
}

class E2eLanes : public jitterd_e2e::E2eTest {
 protected:
  double ping_from_a(const std::string& address) {
    return min_rtt(bed().in_ns_a("ping -n -q -c 5 -i 0.2 -W 2 " + address));
  }
  double ping_from_b(const std::string& address) {
    return min_rtt(jitterd_test::run("ip netns exec " + bed().net.ns_b() +
                                     " ping -n -q -c 5 -i 0.2 -W 2 " + address));
  }
  // Nothing of jitterd's on jta or in namespace a: default root, no ingress qdisc, no filter, no
  // IFB.
  void expect_nothing_left() {
    EXPECT_NE(bed().root_qdisc_by_tc().value("handle", ""), "1a7e:");
    const std::string qdiscs = bed().in_ns_a("tc qdisc show dev jta");
    EXPECT_EQ(qdiscs.find("ingress"), std::string::npos) << qdiscs;
    EXPECT_EQ(qdiscs.find("htb"), std::string::npos) << qdiscs;
    EXPECT_EQ(bed().in_ns_a("tc filter show dev jta ingress"), "");
    EXPECT_EQ(bed().in_ns_a("ip -o link show type ifb"), "");
  }
};

TEST_F(E2eLanes, IngressAloneShapesWhatArrivesThroughAnIfbAndClearRemovesIt) {
  auto events = bed().subscribe();
  const auto applied = bed().ctl(
      {"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--direction", "ingress"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  ASSERT_TRUE(events.wait_for("applied", kEventTimeout)) << events.describe();
  EXPECT_NE(bed().root_qdisc_by_tc().value("kind", ""), "netem") << "egress stays unshaped";
  EXPECT_NE(bed().in_ns_a("ip -o link show type ifb").find("jdifb"), std::string::npos);
  // b -> a: the request arrives on jta and waits in the IFB's netem.
  EXPECT_GE(ping_from_b(jitterd_test::VethPair::kAddrA), kHighMs);

  const auto cleared = bed().ctl({"clear", "jta"});
  ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
  expect_nothing_left();
  EXPECT_LT(ping_from_b(jitterd_test::VethPair::kAddrA), kUnshapedMs);
}

TEST_F(E2eLanes, BothDirectionsAddUpInTheRoundTrip) {
  const auto applied = bed().ctl(
      {"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--direction", "both"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_GE(ping_from_a(jitterd_test::VethPair::kAddrB), 2 * kHighMs);
  // One switch changes both lanes: low is 5 ms each way.
  const Json switched = bed().ctl_json({"switch", "jta", "low"});
  ASSERT_EQ(switched.at("sessions").size(), 2u) << switched.dump();
  const double low = ping_from_a(jitterd_test::VethPair::kAddrB);
  EXPECT_GE(low, 10);
  EXPECT_LT(low, kHighMs);
  ASSERT_EQ(bed().ctl({"clear", "jta"}).exit_code, 0);
  expect_nothing_left();
}

TEST_F(E2eLanes, ARuleSetShapesOnlyTheMatchedDestination) {
  jitterd_test::run("ip netns exec " + bed().net.ns_b() + " ip addr add 198.18.0.3/24 dev jtb");
  bed().in_ns_a("ip neigh replace 198.18.0.3 lladdr $(ip netns exec " + bed().net.ns_b() +
                " cat /sys/class/net/jtb/address) dev jta nud permanent");
  const auto applied = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high",
                                  "--set", "far", "--match", "dst=198.18.0.3"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_EQ(bed().root_qdisc_by_tc().value("kind", ""), "htb");
  EXPECT_GE(ping_from_a("198.18.0.3"), kHighMs);
  EXPECT_LT(ping_from_a(jitterd_test::VethPair::kAddrB), kUnshapedMs)
      << "unmatched traffic passes unshaped";
  const Json status = bed().ctl_json({"status", "jta", "--set", "far"});
  ASSERT_EQ(status.at("sessions").size(), 1u);
  EXPECT_EQ(status.at("sessions")[0].at("match")[0], "dst=198.18.0.3/32");
  ASSERT_EQ(bed().ctl({"clear", "jta"}).exit_code, 0);
  expect_nothing_left();
}

TEST_F(E2eLanes, AnUnconfirmedApplyRollsBackByItself) {
  auto events = bed().subscribe();
  const auto applied =
      bed().ctl({"apply", "jta", jitterd_e2e::kProfileName, "--phase", "high", "--confirm", "2s"});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  const auto applied_event = events.wait_for("applied", kEventTimeout);
  ASSERT_TRUE(applied_event) << events.describe();
  const auto confirm_by = jitterd_e2e::monotonic_point(applied_event->at("deadline")) + 2s;
  // Shaped until then, and tc must look before the deadline (in the UML bed a tc process starts in
  // ~10 ms, against 2 s).
  const Json root = bed().root_qdisc_by_tc();
  ASSERT_LT(jitterd_e2e::Clock::now(), confirm_by)
      << "tc took until the confirmation deadline to look";
  EXPECT_EQ(root.value("handle", ""), "1a7e:");
  const auto rolled = events.wait_for("rolled-back", kEventTimeout);
  ASSERT_TRUE(rolled) << events.describe();
  EXPECT_EQ(rolled->at("reason"), "not-confirmed");
  EXPECT_GE(jitterd_e2e::monotonic_point(rolled->at("at")), confirm_by) << "rolled back early";
  expect_nothing_left();
  EXPECT_TRUE(bed().ledger().at("interfaces").empty()) << bed().ledger().dump();
}

}  // namespace
