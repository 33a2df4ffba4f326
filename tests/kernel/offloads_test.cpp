// Offloads through the ethtool ioctl, checked against `ethtool -k` (an independent reader) on a
// veth (whose driver lets TSO, GSO and GRO be toggled), and default_route_interfaces against routes
// added with `ip route`. Neither needs netem: these run wherever there is root and network
// namespaces (the VM test bed, or a root shell on the host), and skip elsewhere with the reason.
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ostream>
#include <thread>

#include "shaper/errors.hpp"
#include "shaper/netlink.hpp"
#include "shaper/offloads.hpp"
#include "shaper/route_facts.hpp"
#include "test_network.hpp"

using namespace shaper;
using jitterd_test::NetnsGuard;
using jitterd_test::run;
using jitterd_test::VethPair;

namespace {

std::optional<std::string> probe_netns() {
  if (geteuid() != 0) return "needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for namespaces)";
  std::optional<std::string> reason;
  std::thread probe([&] {
    if (unshare(CLONE_NEWNET) != 0)
      reason = std::string("cannot create a network namespace: ") + std::strerror(errno);
  });
  probe.join();
  return reason;
}

std::optional<std::string> netns_unavailable_reason() {
  static const std::optional<std::string> reason =
      probe_netns();  // cannot change while the binary runs
  return reason;
}

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto reason = netns_unavailable_reason()) GTEST_SKIP() << *reason;
  }
};

class OffloadsKernel : public NetnsTest {
 protected:
  void SetUp() override {
    NetnsTest::SetUp();
    if (IsSkipped()) return;
    try {
      run("command -v ethtool");
    } catch (const std::exception&) {
      GTEST_SKIP()
          << "ethtool (the independent reader) is not installed; scripts/setup installs it";
    }
  }

  // `ethtool -k jta` in namespace a: "tcp-segmentation-offload: on" (maybe followed by "[fixed]").
  bool ethtool_says(const std::string& feature) {
    const std::string out = run("ip netns exec " + net.ns_a() + " ethtool -k " + VethPair::kDevA);
    const std::string key = "\n" + feature + ": ";
    const auto at = ("\n" + out).find(key);
    if (at == std::string::npos)
      throw std::runtime_error("no " + feature + " in ethtool -k output:\n" + out);
    return out.compare(at + key.size() - 1, 2, "on") == 0;
  }

  Offloads ethtool_offloads() {
    return Offloads{ethtool_says("tcp-segmentation-offload"),
                    ethtool_says("generic-segmentation-offload"),
                    ethtool_says("generic-receive-offload")};
  }

  void ethtool_set(const std::string& settings) {
    run("ip netns exec " + net.ns_a() + " ethtool -K " + VethPair::kDevA + " " + settings);
  }

  VethPair net;
  NetnsGuard in_a{net.ns_a()};
};

}  // namespace

namespace shaper {
// gtest prints values with PrintTo found by argument-dependent lookup, hence in shaper.
void PrintTo(const Offloads& o, std::ostream* os);
void PrintTo(const Offloads& o, std::ostream* os) {
  *os << "{tso " << o.tso << ", gso " << o.gso << ", gro " << o.gro << "}";
}
}  // namespace shaper

TEST_F(OffloadsKernel, ReadAgreesWithEthtool) {
  for (const char* settings :
       {"tso on gso on gro on", "tso off gso on gro off", "tso on gso off gro on"}) {
    ethtool_set(settings);
    const Offloads expected = ethtool_offloads();
    EXPECT_EQ(read_offloads(VethPair::kDevA), expected) << settings;
  }
  // The three settings above differ, so a reader stuck on one value would have failed.
}

TEST_F(OffloadsKernel, WriteEachCombinationAndEthtoolSeesIt) {
  for (int bits = 0; bits < 8; ++bits) {
    const Offloads wanted{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
    write_offloads(VethPair::kDevA, wanted);
    EXPECT_EQ(ethtool_offloads(), wanted) << "combination " << bits;
  }
}

TEST_F(OffloadsKernel, GuardTurnsOffAndRestoresWhatItFound) {
  ethtool_set("tso on gso on gro off");
  const Offloads before = ethtool_offloads();
  ASSERT_EQ(before, (Offloads{true, true, false}));
  {
    OffloadGuard guard(VethPair::kDevA);
    EXPECT_TRUE(guard.active());
    EXPECT_EQ(guard.saved(), before);
    EXPECT_EQ(ethtool_offloads(), (Offloads{false, false, false}));
    OffloadGuard moved(std::move(guard));  // the moved-from guard must not restore early
    EXPECT_FALSE(guard.active());
    EXPECT_EQ(ethtool_offloads(), (Offloads{false, false, false}));
  }
  EXPECT_EQ(ethtool_offloads(), before);
}

TEST_F(OffloadsKernel, RestoreNowAndRelease) {
  ethtool_set("tso off gso on gro on");
  const Offloads before = ethtool_offloads();
  {
    OffloadGuard guard(VethPair::kDevA);
    guard.restore();
    EXPECT_EQ(ethtool_offloads(), before);
    EXPECT_FALSE(guard.active());
    ethtool_set("gso off");  // after restore() the guard must not touch anything
  }
  EXPECT_FALSE(ethtool_says("generic-segmentation-offload"));
  {
    OffloadGuard guard(VethPair::kDevA);
    guard.release();
  }
  EXPECT_EQ(ethtool_offloads(), (Offloads{false, false, false}));
}

// With scatter-gather off the kernel cannot segment (6.1 drops TSO in netdev_fix_features; 6.18
// keeps GSO off too): the request is accepted by the ioctl and silently not applied, which
// write_offloads must notice, and the state it leaves must still read the same through both
// readers.
TEST_F(OffloadsKernel, ValueThatDoesNotTakeIsAnError) {
  ethtool_set("sg off tso off gso off");
  try {
    write_offloads(VethPair::kDevA, Offloads{true, true, true});
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    EXPECT_EQ(e.error_number(), EOPNOTSUPP);
    EXPECT_TRUE(e.operation() == "ethtool set tso on" || e.operation() == "ethtool set gso on")
        << e.operation();
    EXPECT_NE(std::string(e.what()).find("(dev jta; the driver cannot change it"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_offloads(VethPair::kDevA), ethtool_offloads());
}

TEST_F(OffloadsKernel, UnknownInterfaceNamesTheOperationAndDevice) {
  try {
    read_offloads("jtnosuch0");
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    EXPECT_EQ(e.error_number(), ENODEV);
    EXPECT_EQ(std::string(e.what()), "ethtool get feature count (dev jtnosuch0): No such device");
  }
  EXPECT_THROW(OffloadGuard("jtnosuch0"), SystemError);
}

// --- default routes
// ---------------------------------------------------------------------------------

class DefaultRoutesKernel : public NetnsTest {
 protected:
  void ip(const std::string& args) { run("ip -n " + net.ns_a() + " " + args); }

  VethPair net;
};

TEST_F(DefaultRoutesKernel, ReportsTheInterfaceOnlyWhileItCarriesADefaultRoute) {
  NetnsGuard in_a(net.ns_a());
  RouteSocket socket;
  const int jta = static_cast<int>(if_nametoindex(VethPair::kDevA));
  ASSERT_GT(jta, 0);
  EXPECT_EQ(default_route_interfaces(socket), std::vector<int>{});  // only the /24 on-link route

  ip("route add default via 198.18.0.2 dev jta");
  EXPECT_EQ(default_route_interfaces(socket), std::vector<int>{jta});

  ip("route del default");
  ip("route add default via 198.18.0.2 dev jta table 100");  // not the main table
  EXPECT_EQ(default_route_interfaces(socket), std::vector<int>{});
}

TEST_F(DefaultRoutesKernel, MultipathAndIpv6NexthopsCount) {
  // A second link in namespace a (both ends there), with IPv6 allowed on it only.
  ip("link add jtc type veth peer name jtd");
  run("ip netns exec " + net.ns_a() + " sysctl -qw net.ipv6.conf.jtc.disable_ipv6=0");
  ip("addr add 198.19.0.1/24 dev jtc");
  ip("link set jtc up");
  ip("link set jtd up");
  NetnsGuard in_a(net.ns_a());
  RouteSocket socket;
  const int jta = static_cast<int>(if_nametoindex(VethPair::kDevA));
  const int jtc = static_cast<int>(if_nametoindex("jtc"));
  ASSERT_GT(jta, 0);
  ASSERT_GT(jtc, 0);
  std::vector<int> both{jta, jtc};
  std::sort(both.begin(), both.end());

  ip("route add default nexthop via 198.18.0.2 dev jta nexthop via 198.19.0.2 dev jtc");
  EXPECT_EQ(default_route_interfaces(socket), both);

  ip("route del default");
  ip("-6 route add default dev jtc");
  EXPECT_EQ(default_route_interfaces(socket), std::vector<int>{jtc});

  ip("route add default via 198.18.0.2 dev jta");
  EXPECT_EQ(default_route_interfaces(socket), both);
}
