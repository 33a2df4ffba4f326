// Classful trees (HTB + netem leaves + u32) and ingress shaping (IFB + ingress + mirred) on a real
// kernel, judged by real packets (ping RTTs) and read back with tc/ip, which are independent of our
// netlink code.
//
// Timing bounds: netem never releases a packet early, so a shaped RTT is at least the configured
// delay (exact lower bound). Unshaped RTTs are ~0.05-0.3 ms in User-Mode Linux and ~0.1-2 ms in
// qemu TCG (the second bed, where the same tests run); 15 ms separates them from the smallest delay
// used here (20 ms) with a wide margin in both, and medians of 20 probes ignore the odd late
// release of a loaded host. The bound that matters, shaped >= the configured delay, is exact.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "shaper/errors.hpp"
#include "shaper/ifb.hpp"
#include "shaper/netem_engine.hpp"
#include "shaper/tc_tree.hpp"
#include "test_network.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using jitterd_test::VethPair;
using json = nlohmann::json;

namespace {

// A field of tc's or ip's JSON, or `fallback` when absent or of another type. (json::value() with a
// literal default trips GCC 12's -Wnull-dereference inside nlohmann's headers.)
std::string text_field(const json& object, const char* key, const std::string& fallback = "?") {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

int int_field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int>() : 0;
}

constexpr const char* kAddrB2 = "198.18.0.3";  // a second address on jtb (test-only)
constexpr double kUnshapedMs = 15.0;

std::string in_ns(const std::string& ns, const std::string& command) {
  return jitterd_test::run("ip netns exec " + ns + " " + command);
}

// Median RTT of `count` pings from `ns` to `addr`, 50 ms apart. Fails the test if fewer than half
// come back.
double median_rtt_ms(const std::string& ns, const std::string& addr, int count = 20) {
  std::string out;
  try {
    out = in_ns(ns, "ping -n -c " + std::to_string(count) + " -i 0.05 -W 2 " + addr);
  } catch (const std::runtime_error& e) {
    out = e.what();  // some probes lost: exit 1, output still useful
  }
  static const std::regex reply(R"(time=([0-9.]+) ms)");
  std::vector<double> rtts;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (line.find("DUP!") == std::string::npos && std::regex_search(line, m, reply))
      rtts.push_back(std::stod(m[1]));
  }
  EXPECT_GE(rtts.size(), static_cast<std::size_t>(count / 2)) << out;
  if (rtts.empty()) return -1;
  std::sort(rtts.begin(), rtts.end());
  return rtts[rtts.size() / 2];
}

json tc_json_of(const std::string& ns, const std::string& args) {
  const std::string out = in_ns(ns, "tc -j " + args);
  if (out.find_first_not_of(" \n\t") == std::string::npos) return json::array();
  return json::parse(out);
}

// Kinds of every qdisc on jta, as tc reports them ("htb 1a7e:", "netem 2001:").
std::vector<std::string> qdiscs_by_tc(const VethPair& net,
                                      const std::string& dev = VethPair::kDevA) {
  std::vector<std::string> out;
  for (const auto& q : tc_json_of(net.ns_a(), "qdisc show dev " + dev)) {
    out.push_back(text_field(q, "kind") + " " + text_field(q, "handle"));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t count_kind(const std::vector<std::string>& qdiscs, const std::string& kind) {
  return static_cast<std::size_t>(
      std::count_if(qdiscs.begin(), qdiscs.end(),
                    [&](const std::string& q) { return q.rfind(kind + " ", 0) == 0; }));
}

// Adds 198.18.0.3 on jtb, with a permanent neighbour entry in a (as VethPair does for .2).
void add_second_address(const VethPair& net) {
  jitterd_test::run("ip -n " + net.ns_b() + " addr add " + kAddrB2 + "/24 dev " + VethPair::kDevB);
  const std::string link =
      jitterd_test::run("ip -n " + net.ns_b() + " -o link show dev " + VethPair::kDevB);
  std::smatch m;
  static const std::regex mac("link/ether ([0-9a-f:]{17})");
  ASSERT_TRUE(std::regex_search(link, m, mac)) << link;
  jitterd_test::run("ip -n " + net.ns_a() + " neigh replace " + kAddrB2 + " lladdr " + m[1].str() +
                    " dev " + VethPair::kDevA + " nud permanent");
}

std::uint32_t ipv4(const char* dotted) {
  in_addr addr{};
  EXPECT_EQ(inet_pton(AF_INET, dotted, &addr), 1);
  return addr.s_addr;  // network order already
}

// IPv4 destination /32: the address is the header's word at offset 16.
U32Selector to_host(const char* dotted) {
  return U32Selector{0x0800, {U32Key{0xffffffffu, ipv4(dotted), 16}}};
}
// IPv4 source /32: offset 12.
U32Selector from_host(const char* dotted) {
  return U32Selector{0x0800, {U32Key{0xffffffffu, ipv4(dotted), 12}}};
}

NetemSpec delay(std::chrono::milliseconds d) {
  NetemSpec spec;
  spec.delay.latency = d;
  return spec;
}

}  // namespace

TEST(NetemTree, ShapesOnlyTheMatchingDestinationAndPassesUnmatchedUnshaped) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(40ms), {to_host(VethPair::kAddrB)}});
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);

  const auto qdiscs = qdiscs_by_tc(bed.net);
  EXPECT_EQ(count_kind(qdiscs, "htb"), 1u);
  EXPECT_EQ(std::count(qdiscs.begin(), qdiscs.end(), "htb 1a7e:"), 1);
  EXPECT_EQ(std::count(qdiscs.begin(), qdiscs.end(), "netem 2001:"), 1);
  const double shaped = median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB);
  const double unmatched = median_rtt_ms(bed.net.ns_a(), kAddrB2);
  EXPECT_GE(shaped, 40.0);
  EXPECT_LT(shaped, 70.0);
  EXPECT_GE(unmatched, 0.0);
  EXPECT_LT(unmatched, kUnshapedMs) << "unmatched traffic must pass unshaped (HTB direct)";
}

TEST(NetemTree, UnmatchedSpecShapesTrafficThatMatchesNoLeaf) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(40ms), {to_host(VethPair::kAddrB)}});
  spec.unmatched = delay(20ms);
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);

  const auto qdiscs = qdiscs_by_tc(bed.net);
  EXPECT_EQ(std::count(qdiscs.begin(), qdiscs.end(), "netem 3000:"), 1)
      << "the default class's leaf";
  const double leaf = median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB);
  const double unmatched = median_rtt_ms(bed.net.ns_a(), kAddrB2);
  EXPECT_GE(leaf, 40.0);
  EXPECT_LT(leaf, 70.0);
  EXPECT_GE(unmatched, 20.0);
  EXPECT_LT(unmatched, 40.0) << "unmatched traffic went through the 40 ms leaf, or twice";
}

TEST(NetemTree, BypassWinsOverAMatchingLeaf) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  TreeSpec spec;
  // The leaf matches every IPv4 packet; the bypass takes .3 out of it.
  spec.leaves.push_back(TreeLeaf{1, delay(40ms), {U32Selector{0x0800, {}}}});
  spec.bypass.push_back(to_host(kAddrB2));
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);

  EXPECT_GE(median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB), 40.0);
  EXPECT_LT(median_rtt_ms(bed.net.ns_a(), kAddrB2), kUnshapedMs);
  // tc sees the bypass first pointing at the HTB itself, and the leaf's filter after it.
  const json filters = tc_json_of(bed.net.ns_a(), "filter show dev jta parent 1a7e:");
  std::vector<std::pair<int, std::string>> flows;
  for (const auto& f : filters) {
    if (f.contains("options") && f["options"].contains("flowid")) {
      flows.emplace_back(int_field(f, "pref"), f["options"]["flowid"].get<std::string>());
    }
  }
  std::sort(flows.begin(), flows.end());
  ASSERT_EQ(flows.size(), 2u) << filters.dump();
  // Prios 0x100 and 0x200: kFilterPrioSlack free prios before each group (tc_tree.hpp).
  EXPECT_EQ(flows[0], (std::pair<int, std::string>{0x100, "1a7e:"}));
  EXPECT_EQ(flows[1], (std::pair<int, std::string>{0x200, "1a7e:1"}));
}

TEST(NetemTree, EarlierLeafWinsWhenSelectorsOverlap) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{7, delay(20ms), {to_host(VethPair::kAddrB)}});
  spec.leaves.push_back(TreeLeaf{3, delay(60ms), {U32Selector{0x0800, {}}}});
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
  const double rtt = median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB);
  EXPECT_GE(rtt, 20.0);
  EXPECT_LT(rtt, 60.0) << "the later leaf (60 ms) took the packet, or both did";
}

TEST(NetemTree, ChangeOfTwoLeavesTakesEffectInPlace) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(50ms), {to_host(VethPair::kAddrB)}});
  spec.leaves.push_back(TreeLeaf{2, delay(20ms), {to_host(kAddrB2)}});
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
  EXPECT_GE(median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB), 50.0);
  const double before_b2 = median_rtt_ms(bed.net.ns_a(), kAddrB2);
  EXPECT_GE(before_b2, 20.0);
  EXPECT_LT(before_b2, 50.0);
  const auto qdiscs_before = qdiscs_by_tc(bed.net);

  tree.change({{1, delay(20ms)}, {2, delay(50ms)}});

  const double after_b = median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB);
  EXPECT_GE(after_b, 20.0);
  EXPECT_LT(after_b, 50.0);
  EXPECT_GE(median_rtt_ms(bed.net.ns_a(), kAddrB2), 50.0);
  // Same tree, same handles: changed in place, not rebuilt.
  EXPECT_EQ(qdiscs_by_tc(bed.net), qdiscs_before);
  // The kernel's own dump (decoded by us) has the new delays on the right leaves.
  int seen = 0;
  for (const auto& q : bed.engine.qdiscs(bed.dev)) {
    if (q.kind != "netem") continue;
    ASSERT_TRUE(q.netem);
    if (q.handle == tree_leaf_handle(1)) {
      EXPECT_EQ(q.netem->spec.delay.latency, 20ms);
      ++seen;
    }
    if (q.handle == tree_leaf_handle(2)) {
      EXPECT_EQ(q.netem->spec.delay.latency, 50ms);
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
  ASSERT_NE(tree.spec_of(2), nullptr);
  EXPECT_EQ(tree.spec_of(2)->delay.latency, 50ms);
  EXPECT_THROW(tree.change({{9, delay(1ms)}}), std::invalid_argument);
}

TEST(NetemTree, RemoveAndDestructorLeaveTheKernelDefault) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  const auto before = qdiscs_by_tc(bed.net);
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(30ms), {to_host(VethPair::kAddrB)}});
  spec.bypass.push_back(to_host(kAddrB2));
  spec.unmatched = delay(10ms);
  {
    NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
    EXPECT_EQ(count_kind(qdiscs_by_tc(bed.net), "netem"), 2u);
    tree.remove();
    EXPECT_FALSE(tree.owns());
  }
  EXPECT_EQ(qdiscs_by_tc(bed.net), before);
  EXPECT_TRUE(tc_json_of(bed.net.ns_a(), "filter show dev jta").empty());
  {
    NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
    NetemTree moved = std::move(tree);
    EXPECT_EQ(count_kind(qdiscs_by_tc(bed.net), "htb"), 1u);
  }  // destructor
  EXPECT_EQ(qdiscs_by_tc(bed.net), before);
  EXPECT_LT(median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB), kUnshapedMs);
}

TEST(NetemTree, RefusesAForeignRootUnlessForcedAndATreeOnATree) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  in_ns(bed.net.ns_a(), "tc qdisc add dev jta root handle 1: htb");
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(30ms), {to_host(VethPair::kAddrB)}});
  EXPECT_THROW(NetemTree::install(bed.engine, bed.dev, spec), OwnershipError);
  EXPECT_EQ(qdiscs_by_tc(bed.net), (std::vector<std::string>{"htb 1:"}))
      << "the foreign root was touched";
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec, InstallOptions{.force = true});
  EXPECT_GE(median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB), 30.0);
  EXPECT_THROW(NetemTree::install(bed.engine, bed.dev, spec), OwnershipError);
  EXPECT_THROW(bed.engine.install(bed.dev, NetemSpec{}), OwnershipError);
}

// CVE-2025-38553's check_netem_in_tree: a duplicating netem may not share a device with another
// netem. Kernels with the check refuse; the install must fail with our hint and leave nothing
// behind. Kernels without it accept; then the tree must work (recorded, so a run says which kernel
// it met).
TEST(NetemTree, DuplicatingLeafNextToAnotherNetemIsRefusedWithAHintOrWorks) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  const auto before = qdiscs_by_tc(bed.net);
  NetemSpec duplicating = delay(20ms);
  duplicating.duplicate.probability = Probability::checked(0.5);
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(30ms), {to_host(VethPair::kAddrB)}});
  spec.leaves.push_back(TreeLeaf{2, duplicating, {to_host(kAddrB2)}});
  try {
    NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
    RecordProperty("check_netem_in_tree",
                   "absent: the kernel accepted a duplicating netem in a tree");
    std::printf("note: this kernel has no check_netem_in_tree (accepted a duplicating leaf)\n");
    EXPECT_GE(median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB), 30.0);
    const double dup = median_rtt_ms(bed.net.ns_a(), kAddrB2);
    EXPECT_GE(dup, 20.0);
    EXPECT_LT(dup, 30.0);
  } catch (const NetlinkError& e) {
    RecordProperty("check_netem_in_tree", "present: refused");
    std::printf("note: this kernel refuses duplicating netems in trees: %s\n", e.what());
    EXPECT_EQ(e.error_number(), EINVAL);
    EXPECT_NE(e.kernel_message().find("cannot mix duplicating netems"), std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("CVE-2025-38553"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("single profile"), std::string::npos) << e.what();
    EXPECT_EQ(qdiscs_by_tc(bed.net), before) << "a half-built tree was left behind";
  }
  // The same duplicating spec alone on the device is accepted everywhere.
  NetemQdisc alone = bed.engine.install(bed.dev, duplicating);
  EXPECT_GE(median_rtt_ms(bed.net.ns_a(), kAddrB2), 20.0);
}

// --- ingress
// ------------------------------------------------------------------------------------------

namespace {

std::vector<std::string> ifbs_by_ip(const std::string& ns) {
  std::vector<std::string> out;
  for (const auto& l : json::parse(in_ns(ns, "ip -j link show type ifb")))
    out.push_back(text_field(l, "ifname"));
  return out;
}

json ingress_filters_by_tc(const VethPair& net) {
  try {
    return tc_json_of(net.ns_a(), "filter show dev jta ingress");
  } catch (const std::runtime_error&) {
    return json::array();  // no ingress hook at all: tc refuses to list it
  }
}

}  // namespace

TEST(IngressRedirect, NetemOnTheIfbDelaysArrivalsOnlyAndRemoveLeavesNothing) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  const auto before = qdiscs_by_tc(bed.net);
  ASSERT_EQ(count_kind(before, "ingress"), 0u);
  const std::string ifb_name = "jdifb" + std::to_string(bed.dev.index);

  IngressRedirect redirect = IngressRedirect::install(bed.engine, bed.dev);
  EXPECT_TRUE(redirect.created_ingress_qdisc());
  EXPECT_EQ(redirect.ifb().name, ifb_name);
  EXPECT_EQ(ifbs_by_ip(bed.net.ns_a()), std::vector<std::string>{ifb_name});
  const std::string state = in_ns(bed.net.ns_a(), "ip -j link show dev " + ifb_name);
  EXPECT_NE(state.find("\"UP\""), std::string::npos) << state;
  NetemQdisc netem = bed.engine.install(redirect.ifb(), delay(30ms));

  // Ping from b: the request arrives on jta, goes through the IFB's netem; the reply leaves
  // unshaped.
  const double rtt = median_rtt_ms(bed.net.ns_b(), VethPair::kAddrA);
  EXPECT_GE(rtt, 30.0);
  EXPECT_LT(rtt, 60.0) << "delayed twice?";
  // The egress side is untouched: jta's root is still the default, and an ingress qdisc is there.
  const auto during = qdiscs_by_tc(bed.net);
  EXPECT_EQ(count_kind(during, "ingress"), 1u);
  EXPECT_EQ(count_kind(during, "netem"), 0u) << "netem must be on the IFB, not on jta";
  const json filters = ingress_filters_by_tc(bed.net);
  std::set<int> prefs;
  for (const auto& f : filters) prefs.insert(int_field(f, "pref"));
  EXPECT_EQ(prefs, (std::set<int>{0x1a7d, 0x1a7e, 0x1a7f})) << filters.dump();
  EXPECT_NE(filters.dump().find("mirred"), std::string::npos) << filters.dump();

  netem.remove();
  redirect.remove();
  EXPECT_EQ(qdiscs_by_tc(bed.net), before);
  EXPECT_TRUE(ifbs_by_ip(bed.net.ns_a()).empty());
  EXPECT_TRUE(ingress_filters_by_tc(bed.net).empty());
  EXPECT_LT(median_rtt_ms(bed.net.ns_b(), VethPair::kAddrA), kUnshapedMs);
}

TEST(IngressRedirect, UsesAnExistingClsactAndLeavesIt) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  in_ns(bed.net.ns_a(), "tc qdisc add dev jta clsact");
  {
    IngressRedirect redirect = IngressRedirect::install(bed.engine, bed.dev);
    EXPECT_FALSE(redirect.created_ingress_qdisc());
    NetemQdisc netem = bed.engine.install(redirect.ifb(), delay(25ms));
    EXPECT_GE(median_rtt_ms(bed.net.ns_b(), VethPair::kAddrA), 25.0);
    netem.release();  // the IFB's deletion takes it along
  }                   // destructor removes filters and IFB, not the clsact
  EXPECT_EQ(count_kind(qdiscs_by_tc(bed.net), "clsact"), 1u);
  EXPECT_TRUE(ingress_filters_by_tc(bed.net).empty());
  EXPECT_TRUE(ifbs_by_ip(bed.net.ns_a()).empty());
  EXPECT_LT(median_rtt_ms(bed.net.ns_b(), VethPair::kAddrA), kUnshapedMs);
}

TEST(IngressRedirect, PerSourceTreeOnTheIfb) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  IngressRedirect redirect = IngressRedirect::install(bed.engine, bed.dev);
  // Inbound: match the source address. Replies from .2 are delayed 40 ms, from .3 not at all.
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(40ms), {from_host(VethPair::kAddrB)}});
  NetemTree tree = NetemTree::install(bed.engine, redirect.ifb(), spec);
  const double shaped = median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB);
  EXPECT_GE(shaped, 40.0);
  EXPECT_LT(shaped, 70.0);
  EXPECT_LT(median_rtt_ms(bed.net.ns_a(), kAddrB2), kUnshapedMs);
  tree.remove();
  redirect.remove();
}

TEST(IngressRedirect, RemoveLeftoverCleansUpAfterACrash) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  const auto before = qdiscs_by_tc(bed.net);
  const std::string ifb_name = "jdifb" + std::to_string(bed.dev.index);
  {
    IngressRedirect redirect = IngressRedirect::install(bed.engine, bed.dev);
    NetemQdisc netem = bed.engine.install(redirect.ifb(), delay(30ms));
    netem.release();
    redirect.release();  // simulated crash: the owners go away, the kernel objects stay
  }
  ASSERT_GE(median_rtt_ms(bed.net.ns_b(), VethPair::kAddrA), 30.0)
      << "the leftovers should still shape";
  const auto leftovers = IngressRedirect::leftover_ifbs(bed.engine);
  ASSERT_EQ(leftovers.size(), 1u);
  EXPECT_EQ(leftovers[0].name, ifb_name);
  // A restarted daemon refuses to install over the leftovers.
  EXPECT_THROW(IngressRedirect::install(bed.engine, bed.dev), OwnershipError);

  EXPECT_TRUE(IngressRedirect::remove_leftover(bed.engine, bed.dev));
  EXPECT_EQ(qdiscs_by_tc(bed.net), before);
  EXPECT_TRUE(ifbs_by_ip(bed.net.ns_a()).empty());
  EXPECT_TRUE(ingress_filters_by_tc(bed.net).empty());
  EXPECT_TRUE(IngressRedirect::leftover_ifbs(bed.engine).empty());
  EXPECT_FALSE(IngressRedirect::remove_leftover(bed.engine, bed.dev)) << "nothing left to remove";
  EXPECT_LT(median_rtt_ms(bed.net.ns_b(), VethPair::kAddrA), kUnshapedMs);
}

TEST(IngressRedirect, RemoveLeftoverKeepsSomeoneElsesIngressFilters) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  {
    IngressRedirect redirect = IngressRedirect::install(bed.engine, bed.dev);
    redirect.release();
  }
  // Someone else adds a filter to the same ingress qdisc.
  in_ns(bed.net.ns_a(),
        "tc filter add dev jta ingress prio 5 protocol arp u32 match u32 0 0 action pass");
  EXPECT_TRUE(IngressRedirect::remove_leftover(bed.engine, bed.dev));
  const json filters = ingress_filters_by_tc(bed.net);
  std::set<int> prefs;
  for (const auto& f : filters) prefs.insert(int_field(f, "pref"));
  EXPECT_EQ(prefs, std::set<int>{5}) << filters.dump();
  EXPECT_EQ(count_kind(qdiscs_by_tc(bed.net), "ingress"), 1u)
      << "the ingress qdisc still has a filter";
  EXPECT_TRUE(ifbs_by_ip(bed.net.ns_a()).empty());
}

// --- updates in place ---------------------------------------------------------------------------

namespace {

std::vector<double> rtts_of(const std::string& out) {
  static const std::regex reply(R"(time=([0-9.]+) ms)");
  std::vector<double> rtts;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (line.find("DUP!") == std::string::npos && std::regex_search(line, m, reply))
      rtts.push_back(std::stod(m[1]));
  }
  return rtts;
}

// `count` pings from `ns` to `addr`, 10 ms apart, in a thread of their own while the test thread
// updates the tree; rtts() waits for them.
class BackgroundPing {
 public:
  BackgroundPing(const std::string& ns, const std::string& addr, int count)
      : count_(count), thread_([this, ns, addr] {
          try {
            out_ = in_ns(ns, "ping -n -c " + std::to_string(count_) + " -i 0.01 -W 2 " + addr);
          } catch (const std::runtime_error& e) {
            out_ = e.what();
          }
        }) {
    std::this_thread::sleep_for(500ms);  // the updates happen while it runs
  }
  ~BackgroundPing() {
    if (thread_.joinable()) thread_.join();
  }
  std::vector<double> rtts() {
    thread_.join();
    return rtts_of(out_);
  }
  const std::string& output() const { return out_; }
  int count() const { return count_; }

 private:
  int count_;
  std::string out_;
  std::thread thread_;
};

// Every reply of the background ping went through the leaf of `delay_ms` (netem never releases
// early), and no more than 2% went missing (a lost packet would hide an unshaped one).
void expect_all_shaped(BackgroundPing& ping, double delay_ms) {
  const std::vector<double> rtts = ping.rtts();
  EXPECT_GE(rtts.size(), static_cast<std::size_t>(ping.count() * 98 / 100)) << ping.output();
  ASSERT_FALSE(rtts.empty());
  EXPECT_GE(*std::min_element(rtts.begin(), rtts.end()), delay_ms)
      << "a packet of the unchanged lane passed unshaped during the update\n"
      << ping.output();
  EXPECT_LT(*std::max_element(rtts.begin(), rtts.end()), 2 * delay_ms + 40)
      << "a packet went through two leaves?";
}

// Filters under 1a7e: as tc shows them: (pref, flowid), one per u32 rule, sorted by pref.
std::vector<std::pair<int, std::string>> filter_flows_by_tc(const VethPair& net) {
  std::vector<std::pair<int, std::string>> flows;
  for (const auto& f : tc_json_of(net.ns_a(), "filter show dev jta parent 1a7e:")) {
    if (f.contains("options") && f["options"].contains("flowid")) {
      flows.emplace_back(int_field(f, "pref"), f["options"]["flowid"].get<std::string>());
    }
  }
  std::sort(flows.begin(), flows.end());
  return flows;
}

}  // namespace

// HTB has no qdisc change operation: the default class cannot be moved after install, which is why
// the tree's defcls is always kDefaultClassMinor (tc_tree.hpp). If a kernel ever accepts this, the
// design still works; the test records which kernel it met.
TEST(NetemTreeUpdate, HtbRootRefusesAChangeOfItsDefaultClass) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(30ms), {to_host(VethPair::kAddrB)}});
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
  NlMsgPtr change = build_htb_root_message(bed.dev.index, 5, 0);
  try {
    bed.socket.request(change.get(), "htb change", "jta 1a7e:");
    RecordProperty("htb_change", "accepted");
    std::printf("note: this kernel accepted an HTB root change\n");
  } catch (const NetlinkError& e) {
    RecordProperty("htb_change", "refused");
    std::printf("note: HTB root change refused: %s\n", e.what());
    EXPECT_EQ(e.error_number(), EINVAL);
    EXPECT_NE(e.kernel_message().find("Change operation not supported"), std::string::npos)
        << e.what();
  }
  const auto qdiscs = qdiscs_by_tc(bed.net);
  EXPECT_EQ(std::count(qdiscs.begin(), qdiscs.end(), "htb 1a7e:"), 1);
  EXPECT_GE(median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB), 30.0);
}

TEST(NetemTreeUpdate, AddedLeafShapesItsDestinationAndTheRunningLeafNeverBlinks) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(40ms), {to_host(VethPair::kAddrB)}});
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
  const auto netem_before = qdiscs_by_tc(bed.net);
  ASSERT_LT(median_rtt_ms(bed.net.ns_a(), kAddrB2), kUnshapedMs);

  spec.leaves.push_back(TreeLeaf{2, delay(20ms), {to_host(kAddrB2)}});
  {
    BackgroundPing ping(bed.net.ns_a(), VethPair::kAddrB, 300);
    tree.update(spec);
    expect_all_shaped(ping, 40.0);
  }
  const double added = median_rtt_ms(bed.net.ns_a(), kAddrB2);
  EXPECT_GE(added, 20.0);
  EXPECT_LT(added, 40.0);
  const auto qdiscs = qdiscs_by_tc(bed.net);
  EXPECT_EQ(std::count(qdiscs.begin(), qdiscs.end(), "netem 2001:"), 1) << "leaf 1 was rebuilt?";
  EXPECT_EQ(std::count(qdiscs.begin(), qdiscs.end(), "netem 2002:"), 1);
  ASSERT_NE(tree.spec_of(2), nullptr);
}

TEST(NetemTreeUpdate, RemovedLeafUnshapesItsDestinationAndTheOtherLeafNeverBlinks) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(40ms), {to_host(VethPair::kAddrB)}});
  spec.leaves.push_back(TreeLeaf{2, delay(20ms), {to_host(kAddrB2)}});
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
  ASSERT_GE(median_rtt_ms(bed.net.ns_a(), kAddrB2), 20.0);

  spec.leaves.pop_back();
  {
    BackgroundPing ping(bed.net.ns_a(), VethPair::kAddrB, 300);
    tree.update(spec);
    expect_all_shaped(ping, 40.0);
  }
  EXPECT_LT(median_rtt_ms(bed.net.ns_a(), kAddrB2), kUnshapedMs);
  EXPECT_EQ(count_kind(qdiscs_by_tc(bed.net), "netem"), 1u);
  EXPECT_EQ(tree.spec_of(2), nullptr);
  EXPECT_EQ(filter_flows_by_tc(bed.net).size(), 1u);
}

TEST(NetemTreeUpdate, BypassListChangeNeverShapesADestinationBypassedBeforeAndAfter) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(40ms), {U32Selector{0x0800, {}}}});  // every IPv4
  spec.bypass.push_back(to_host(kAddrB2));
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);

  // .3 stays bypassed; the list around it changes (the whole bypass group is replaced).
  spec.bypass = {to_host("198.18.0.9"), to_host(kAddrB2)};
  {
    BackgroundPing ping(bed.net.ns_a(), kAddrB2, 300);
    tree.update(spec);
    const std::vector<double> rtts = ping.rtts();
    EXPECT_GE(rtts.size(), 294u) << ping.output();
    ASSERT_FALSE(rtts.empty());
    EXPECT_LT(*std::max_element(rtts.begin(), rtts.end()), 40.0)
        << "a bypassed packet went through the 40 ms leaf during the update\n"
        << ping.output();
  }
  // Now the bypass moves from .3 to .2.
  spec.bypass = {to_host(VethPair::kAddrB)};
  tree.update(spec);
  EXPECT_LT(median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB), kUnshapedMs);
  EXPECT_GE(median_rtt_ms(bed.net.ns_a(), kAddrB2), 40.0);
  const auto flows = filter_flows_by_tc(bed.net);
  ASSERT_EQ(flows.size(), 2u);
  EXPECT_EQ(flows[0].second, "1a7e:") << "the bypass comes first";
  EXPECT_EQ(flows[1].second, "1a7e:1");
}

TEST(NetemTreeUpdate, UnmatchedClassAddedThenRemovedWhileALeafRuns) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(40ms), {to_host(VethPair::kAddrB)}});
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
  ASSERT_LT(median_rtt_ms(bed.net.ns_a(), kAddrB2), kUnshapedMs);

  spec.unmatched = delay(20ms);
  {
    BackgroundPing ping(bed.net.ns_a(), VethPair::kAddrB, 300);
    tree.update(spec);
    expect_all_shaped(ping, 40.0);
  }
  auto qdiscs = qdiscs_by_tc(bed.net);
  EXPECT_EQ(std::count(qdiscs.begin(), qdiscs.end(), "netem 3000:"), 1);
  const double unmatched = median_rtt_ms(bed.net.ns_a(), kAddrB2);
  EXPECT_GE(unmatched, 20.0);
  EXPECT_LT(unmatched, 40.0);

  spec.unmatched.reset();
  {
    BackgroundPing ping(bed.net.ns_a(), VethPair::kAddrB, 300);
    tree.update(spec);
    expect_all_shaped(ping, 40.0);
  }
  qdiscs = qdiscs_by_tc(bed.net);
  EXPECT_EQ(std::count(qdiscs.begin(), qdiscs.end(), "netem 3000:"), 0);
  EXPECT_LT(median_rtt_ms(bed.net.ns_a(), kAddrB2), kUnshapedMs);
}

TEST(NetemTreeUpdate, SequenceOfUpdatesKeepsTheDocumentedOrderAndRemoveLeavesNothing) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  add_second_address(bed.net);
  const auto before = qdiscs_by_tc(bed.net);
  auto expect_kernel_matches = [&](const NetemTree& tree, const TreeSpec& spec) {
    // Expected lane order: bypass (1a7e:), then the leaves with selectors in spec order.
    std::vector<std::string> expected_lanes;
    if (!spec.bypass.empty()) expected_lanes.push_back("1a7e:");
    for (const auto& leaf : spec.leaves) {
      if (leaf.selectors.empty()) continue;
      char flowid[16];
      std::snprintf(flowid, sizeof flowid, "1a7e:%x", leaf.minor);
      expected_lanes.push_back(flowid);
    }
    const auto flows = filter_flows_by_tc(bed.net);
    std::vector<std::string> lanes;
    std::vector<int> prios;
    for (const auto& [pref, flowid] : flows) {
      if (lanes.empty() || lanes.back() != flowid) lanes.push_back(flowid);
      prios.push_back(pref);
    }
    EXPECT_EQ(lanes, expected_lanes);
    std::vector<int> recorded;
    for (const auto& f : tree.state().filters) recorded.push_back(f.prio);
    EXPECT_EQ(prios, recorded) << "state() disagrees with the kernel";
    std::size_t selectors = spec.bypass.size();
    for (const auto& leaf : spec.leaves) selectors += leaf.selectors.size();
    EXPECT_EQ(flows.size(), selectors);
  };
  TreeSpec spec;
  spec.leaves.push_back(TreeLeaf{1, delay(40ms), {to_host(VethPair::kAddrB)}});
  spec.leaves.push_back(TreeLeaf{2, delay(20ms), {U32Selector{0x0800, {}}}});
  NetemTree tree = NetemTree::install(bed.engine, bed.dev, spec);
  expect_kernel_matches(tree, spec);
  // Insert a leaf in front, add a bypass, swap two leaves, change selectors, drop one.
  spec.leaves.insert(spec.leaves.begin(), TreeLeaf{3, delay(60ms), {to_host(kAddrB2)}});
  tree.update(spec);
  expect_kernel_matches(tree, spec);
  EXPECT_GE(median_rtt_ms(bed.net.ns_a(), kAddrB2), 60.0);
  spec.bypass = {to_host("198.18.0.9"), U32Selector{0x86dd, {}}};
  tree.update(spec);
  expect_kernel_matches(tree, spec);
  std::swap(spec.leaves[0], spec.leaves[2]);  // 2 (every IPv4) first now: it takes .2 and .3
  tree.update(spec);
  expect_kernel_matches(tree, spec);
  const double all = median_rtt_ms(bed.net.ns_a(), kAddrB2);
  EXPECT_GE(all, 20.0);
  EXPECT_LT(all, 40.0);
  spec.leaves[0].selectors = {to_host("198.18.0.7")};
  spec.leaves.pop_back();
  tree.update(spec);
  expect_kernel_matches(tree, spec);
  EXPECT_GE(median_rtt_ms(bed.net.ns_a(), VethPair::kAddrB), 40.0);
  EXPECT_LT(median_rtt_ms(bed.net.ns_a(), kAddrB2), kUnshapedMs);

  tree.remove();
  EXPECT_EQ(qdiscs_by_tc(bed.net), before);
  EXPECT_TRUE(tc_json_of(bed.net.ns_a(), "filter show dev jta").empty());
}
