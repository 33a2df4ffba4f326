// Change in place under traffic: 100 changes between two delays while a steady probe stream runs.
// No probe may be lost and none may see the unshaped link (or a doubled delay).
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "shaper/netem_engine.hpp"
#include "test_network.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using jitterd_test::VethPair;

TEST(NetemChange, HundredInPlaceChangesUnderTrafficLoseNothingAndNeverUnshape) {
  JITTERD_REQUIRE_NETEM_KERNEL();
  jitterd_test::NetemBed bed;
  auto& net = bed.net;
  auto& engine = bed.engine;
  NetemSpec low, high;
  low.delay.latency = 10ms;
  high.delay.latency = 30ms;
  NetemQdisc qdisc = engine.install(engine.resolve(std::string(VethPair::kDevA)), low);

  // 800 probes at 10 ms take 8 s; the 100 changes, one every 50 ms, take 5 s in the middle of it.
  auto probes = std::async(std::launch::async, [&] { return jitterd_test::ping(net, 800, 10ms); });
  std::this_thread::sleep_for(1s);
  int changes = 0;
  for (int i = 0; i < 100; ++i) {
    qdisc.change(i % 2 == 0 ? high : low);
    ++changes;
    std::this_thread::sleep_for(50ms);
  }
  const auto result = probes.get();
  EXPECT_EQ(changes, 100);
  ASSERT_EQ(result.transmitted, 800);
  EXPECT_EQ(result.received_seq.size(), 800u) << "probes were lost across in-place changes";
  int at_low = 0, at_high = 0, above_both = 0;
  for (double rtt : result.rtt_ms) {
    // Each probe's delay is fixed when it is enqueued: exactly one of the two, never zero, never
    // both. Emulation only ever makes a packet late, never early, so the lower bound is exact.
    EXPECT_GE(rtt, 10.0) << "a probe saw the unshaped link";
    // Delayed twice would be at least 10 + 30 ms. A loaded host can release a 30 ms packet ten and
    // more ms late, so a few may pass 40 ms; twice the high delay (60 ms) none may reach.
    EXPECT_LT(rtt, 60.0) << "a probe was delayed twice";
    above_both += rtt >= 40.0;
    (rtt < 20.0 ? at_low : at_high)++;
  }
  EXPECT_LE(above_both, 16) << "more than 2 % of the probes at or above 10 + 30 ms";
  // Both delays really were in force for a good share of the stream.
  EXPECT_GT(at_high, 100);
  EXPECT_GT(at_low, 100);
}
