// Match rules compiled by libshaper (compile_match) and installed as a netem tree, judged by probes
// that run side by side: the probes a rule matches see the leaf's delay, the others, sent in the
// same rounds, pass unshaped. Ports need UDP and TCP probes (port_probes.hpp); IPv6 prefixes get
// addresses of their own on the veth pair.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "port_probes.hpp"
#include "shaper/match_rules.hpp"
#include "shaper/tc_tree.hpp"
#include "test_network.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using jitterd_test::EchoServer;
using jitterd_test::ProbeTarget;
using jitterd_test::Transport;
using jitterd_test::VethPair;

namespace {

constexpr double kShapedMs = 40.0;
constexpr double kUnshapedMs = 15.0;  // unshaped RTTs of the emulated machine stay well below this

MatchRule rule(const std::string& text) {
  auto parsed = parse_match_rule_text(text);
  if (!parsed.rule)
    throw std::runtime_error("bad rule in the test: " + text + ": " +
                             to_string(parsed.diagnostics));
  return *parsed.rule;
}

// A tree with one 40 ms leaf for the packets of `rules`.
NetemTree install_leaf(jitterd_test::NetemBed& bed, const std::vector<std::string>& rules) {
  TreeLeaf leaf;
  leaf.minor = 1;
  leaf.spec.delay.latency = std::chrono::milliseconds(static_cast<int>(kShapedMs));
  for (const auto& text : rules) {
    for (auto& selector : compile_match(rule(text))) leaf.selectors.push_back(std::move(selector));
  }
  TreeSpec spec;
  spec.leaves.push_back(std::move(leaf));
  return NetemTree::install(bed.engine, bed.dev, spec);
}

// Probes from namespace a, 10 rounds 50 ms apart: the smallest RTT of each target, in order, and
// every RTT described for failure messages.
struct Probed {
  std::vector<double> min;
  std::string all;
};
Probed min_rtts(const VethPair& net, const std::vector<ProbeTarget>& targets) {
  const auto series = jitterd_test::probe_side_by_side(net.ns_a(), targets, 10, 50ms);
  Probed out{{}, jitterd_test::describe(targets, series)};
  for (std::size_t i = 0; i < targets.size(); ++i) {
    EXPECT_LE(jitterd_test::lost(series[i]), 2u) << targets[i].label();
    out.min.push_back(jitterd_test::min_rtt(series[i], targets[i].label()));
  }
  return out;
}

}  // namespace

TEST(MatchRulesInTheKernel, DestinationPortRangeShapesItsPortsOfItsProtocolOnly) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  const std::string b = bed.net.ns_b();
  EchoServer u6378(b, Transport::kUdp, 6378), u6379(b, Transport::kUdp, 6379),
      u6380(b, Transport::kUdp, 6380), u6381(b, Transport::kUdp, 6381),
      t6379(b, Transport::kTcp, 6379);
  NetemTree tree = install_leaf(bed, {"proto=udp,dport=6379-6380"});

  const std::vector<ProbeTarget> targets{{Transport::kUdp, VethPair::kAddrB, 6379, 0},
                                         {Transport::kUdp, VethPair::kAddrB, 6380, 0},
                                         {Transport::kUdp, VethPair::kAddrB, 6378, 0},
                                         {Transport::kUdp, VethPair::kAddrB, 6381, 0},
                                         {Transport::kTcp, VethPair::kAddrB, 6379, 0}};
  const auto [rtts, all] = min_rtts(bed.net, targets);
  EXPECT_GE(rtts[0], kShapedMs) << all;
  EXPECT_GE(rtts[1], kShapedMs) << all;
  EXPECT_LT(rtts[2], kUnshapedMs) << "the port just below the range\n" << all;
  EXPECT_LT(rtts[3], kUnshapedMs) << "the port just above the range\n" << all;
  EXPECT_LT(rtts[4], kUnshapedMs) << "TCP to a matched port: the rule says udp\n" << all;
}

TEST(MatchRulesInTheKernel, SourcePortRuleFollowsTheSendersPort) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  EchoServer server(bed.net.ns_b(), Transport::kTcp, 7000);
  // An unaligned range: two one-port blocks (5001, 5002), so both neighbours must stay unshaped.
  NetemTree tree = install_leaf(bed, {"proto=tcp,sport=5001-5002"});

  const std::vector<ProbeTarget> targets{{Transport::kTcp, VethPair::kAddrB, 7000, 5000},
                                         {Transport::kTcp, VethPair::kAddrB, 7000, 5001},
                                         {Transport::kTcp, VethPair::kAddrB, 7000, 5002},
                                         {Transport::kTcp, VethPair::kAddrB, 7000, 5003}};
  const auto [rtts, described] = min_rtts(bed.net, targets);
  const std::string all = described + "(source ports 5000, 5001, 5002, 5003)";
  EXPECT_LT(rtts[0], kUnshapedMs) << all;
  EXPECT_GE(rtts[1], kShapedMs) << all;
  EXPECT_GE(rtts[2], kShapedMs) << all;
  EXPECT_LT(rtts[3], kUnshapedMs) << all;
}

TEST(MatchRulesInTheKernel, Ipv6PrefixShapesItsHalfOfTheSubnetAndLeavesIpv4Alone) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  const std::string a = bed.net.ns_a(), b = bed.net.ns_b();
  // VethPair turns IPv6 off (its chatter would upset packet counts); this test needs it on the
  // link.
  jitterd_test::run("ip netns exec " + a + " sysctl -qw net.ipv6.conf.jta.disable_ipv6=0");
  jitterd_test::run("ip netns exec " + b + " sysctl -qw net.ipv6.conf.jtb.disable_ipv6=0");
  // fd00:198:18::/64 on the link; the rule takes its lower half (/65) only. nodad: usable at once.
  jitterd_test::run("ip -n " + a + " addr add fd00:198:18::1/64 dev jta nodad");
  jitterd_test::run("ip -n " + b + " addr add fd00:198:18::2/64 dev jtb nodad");
  jitterd_test::run("ip -n " + b + " addr add fd00:198:18:0:8000::2/64 dev jtb nodad");
  // Neighbour discovery goes to solicited-node multicast addresses, outside the prefix: unshaped.
  EchoServer lower(b, Transport::kUdp, 9000, "fd00:198:18::2"),
      upper(b, Transport::kUdp, 9000, "fd00:198:18:0:8000::2"),
      v4(b, Transport::kUdp, 9000, VethPair::kAddrB);
  NetemTree tree = install_leaf(bed, {"dst=fd00:198:18::/65"});

  const std::vector<ProbeTarget> targets{{Transport::kUdp, "fd00:198:18::2", 9000, 0},
                                         {Transport::kUdp, "fd00:198:18:0:8000::2", 9000, 0},
                                         {Transport::kUdp, VethPair::kAddrB, 9000, 0}};
  const auto [rtts, all] = min_rtts(bed.net, targets);
  EXPECT_GE(rtts[0], kShapedMs) << all;
  EXPECT_LT(rtts[1], kUnshapedMs) << "the upper half of the /64\n" << all;
  EXPECT_LT(rtts[2], kUnshapedMs) << "IPv4\n" << all;
}
