// Shaping in another network namespace (issue 23, part 2): the test thread stays in its own
// namespace; the engine's socket is created inside namespace a by NetworkNamespace::create_inside.
// Ping (from a to b) and `tc` (run in a) are the independent readers.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "shaper/netem_engine.hpp"
#include "shaper/network_namespace.hpp"
#include "test_network.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using jitterd_test::VethPair;

TEST(NetemTargetNamespace, AnEngineOnASocketCreatedInsideShapesThatNamespace) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  VethPair net;
  const NetworkNamespace target = NetworkNamespace::named(net.ns_a());
  ASSERT_FALSE(target.is_current());
  RouteSocket socket = target.create_inside([] { return RouteSocket(); });
  NetemEngine engine(socket);
  // jta exists only in namespace a: resolving it proves the socket talks there.
  const Interface dev = engine.resolve(std::string(VethPair::kDevA));

  NetemSpec spec;
  spec.delay.latency = 30ms;
  {
    NetemQdisc qdisc = engine.install(dev, spec);
    const std::string shown =
        jitterd_test::run("ip netns exec " + net.ns_a() + " tc qdisc show dev jta");
    EXPECT_NE(shown.find("netem 1a7e: root"), std::string::npos) << shown;
    EXPECT_NE(shown.find("delay 30ms"), std::string::npos) << shown;

    const auto result = jitterd_test::ping(net, 20, 20ms);
    ASSERT_EQ(result.received_seq.size(), 20u);
    EXPECT_GE(*std::min_element(result.rtt_ms.begin(), result.rtt_ms.end()), 30.0);
  }
  // The owner's destructor removed it, through the same socket.
  const std::string after =
      jitterd_test::run("ip netns exec " + net.ns_a() + " tc qdisc show dev jta");
  EXPECT_EQ(after.find("netem"), std::string::npos) << after;
}
