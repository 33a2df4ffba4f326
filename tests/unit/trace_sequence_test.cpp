// The rules that turn printed sequence numbers into a probe-ordered series: gaps are losses, late
// replies fill their slot, 16-bit wrap continues, restarts open sessions; and send-time inference.
// Inputs are written inline so that each rule is visible next to its expectation.
#include <gtest/gtest.h>

#include <string>

#include "shaper/trace.hpp"
#include "trace_test_support.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using trace_test::diagnostics_of;
using trace_test::lost_indices;
using trace_test::rtts_us;

namespace {

// An iputils reply line without a stamp.
std::string reply(unsigned seq, const std::string& ms = "10.0") {
  return "64 bytes from 192.0.2.7: icmp_seq=" + std::to_string(seq) + " ttl=57 time=" + ms +
         " ms\n";
}

Trace ping(const std::string& text, ParseOptions options = {}) {
  options.format = TraceFormat::kPing;
  return parse_trace_text(text, "seq.txt", options);
}

}  // namespace

TEST(TraceSequence, WrapWithoutHeaderContinuesTheRun) {
  const Trace t = ping(reply(65534) + reply(65535) + reply(0) + reply(2));
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{10000, 10000, 10000, -1, 10000}));
}

TEST(TraceSequence, LateReplyFillsItsSlotInsideTheWindow) {
  // 3 is declared lost when 4 arrives, then arrives itself.
  const Trace t = ping(reply(1) + reply(2) + reply(4) + reply(5) + reply(3, "1500"));
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{10000, 10000, 1500000, 10000, 10000}));
}

TEST(TraceSequence, AReplyFurtherBackThanTheWindowIsARestart) {
  // 1024 probes is the late window: icmp_seq=3 printed 1198 probes after its slot opened is a new
  // run (a tool started over), not a reply that late.
  std::string text;
  for (unsigned seq = 1; seq <= 1200; ++seq) {
    if (seq != 3) text += reply(seq);
  }
  text += reply(3);
  const Trace t = ping(text);
  EXPECT_EQ(t.sessions, 2u);
  EXPECT_EQ(t.session_starts, (std::vector<std::size_t>{0, 1200}));
  EXPECT_EQ(lost_indices(t), (std::vector<std::size_t>{2}));
}

TEST(TraceSequence, RepeatedNumberWithAReplyIsARestartButDupIsNot) {
  const Trace restart = ping(reply(1) + reply(2) + reply(1) + reply(2));
  EXPECT_EQ(restart.session_starts, (std::vector<std::size_t>{0, 2}));
  const Trace duplicate = ping(reply(1) + reply(2) +
                               "64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 "
                               "time=11.0 ms (DUP!)\n");
  EXPECT_EQ(duplicate.sessions, 1u);
  ASSERT_EQ(duplicate.duplicates.size(), 1u);
  EXPECT_EQ(duplicate.duplicates[0].seq, 0u);
  EXPECT_EQ(duplicate.duplicates[0].rtt, 11ms);
}

TEST(TraceSequence, EarlyReorderingWithoutHeaderWidensTheSession) {
  // busybox (no header here): seq 5 printed before 4, then 6.
  const Trace t = ping(
      "64 bytes from 192.0.2.7: seq=5 ttl=64 time=5.000 ms\n"
      "64 bytes from 192.0.2.7: seq=4 ttl=64 time=4.000 ms\n"
      "64 bytes from 192.0.2.7: seq=6 ttl=64 time=6.000 ms\n");
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{4000, 5000, 6000}));
  EXPECT_TRUE(trace_test::dense(t));
}

TEST(TraceSequence, HugeJumpIsANewSessionNotMillionsOfLosses) {
  const Trace t = parse_trace_text(
      "h : [0], 64 bytes, 1.0 ms (1.0 avg, 0% loss)\n"
      "h : [5000000], 64 bytes, 2.0 ms (1.5 avg, 0% loss)\n",
      "jump.txt", trace_test::with_format(TraceFormat::kFping));
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{1000, 2000}));
  EXPECT_EQ(t.sessions, 2u);
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{"jump.txt:2:1: sequence number jumps from 0 to 5000000 (more "
                                      "than 1048576 probes); read as a new session"}));
}

TEST(TraceSequence, SummaryPlacesLossesAtTheEndAndChecksTheCount) {
  const Trace tail =
      ping("PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n" + reply(1) + reply(2) +
           "\n--- 192.0.2.7 ping statistics ---\n"
           "5 packets transmitted, 2 received, 60% packet loss, time 4005ms\n");
  EXPECT_EQ(lost_indices(tail), (std::vector<std::size_t>{2, 3, 4}));
  EXPECT_EQ(tail.interval, Nanoseconds{4005ms} / 4);

  const Trace inconsistent =
      ping("PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n" + reply(1) + reply(2) + reply(3) +
           "2 packets transmitted, 3 received, 0% packet loss, time 1001ms\n");
  EXPECT_EQ(diagnostics_of(inconsistent),
            (std::vector<std::string>{"seq.txt:5:1: the summary counts 2 probes sent, but sequence "
                                      "numbers reach 3 probes; kept the sequence"}));
  EXPECT_EQ(inconsistent.samples.size(), 3u);

  // Without the header the first number is unknown: the summary cannot place tail losses.
  const Trace headless = ping(reply(1) + reply(2) + "5 packets transmitted, 2 received\n");
  EXPECT_EQ(headless.samples.size(), 2u);
}

TEST(TraceSequence, IntervalOptionOverridesEverything) {
  ParseOptions options;
  options.interval = 250ms;
  const Trace t = trace_test::parse_fixture("ping_loopback.txt", options);
  EXPECT_EQ(t.interval_source, IntervalSource::kOption);
  EXPECT_EQ(t.interval, 250ms);
  EXPECT_EQ(t.samples[3].send_time, 750ms);
}

TEST(TraceSequence, SessionWithoutStampsFollowsOneWithThem) {
  const Trace t = ping(
      "PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n"
      "[1700000000.010000] 64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 time=10.0 ms\n"
      "[1700000000.510000] 64 bytes from 192.0.2.7: icmp_seq=2 ttl=57 time=10.0 ms\n"
      "PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n" +
      reply(1) + reply(2));
  ASSERT_EQ(t.samples.size(), 4u);
  EXPECT_EQ(t.interval, 500ms);
  EXPECT_EQ(t.samples[1].send_time, 1700000000500ms);
  // The pause between the runs is unknown: the second run is chained one interval on.
  EXPECT_EQ(t.samples[2].send_time, 1700000001000ms);
  EXPECT_TRUE(t.samples[2].send_time_inferred);
  EXPECT_FALSE(t.send_times_inferred);
}

TEST(TraceSequence, ShortNumbersAreNotStamps) {
  // An epoch stamp has 9 or 10 integer digits; "[100.5]" is not one, so the line is not ping's.
  const Trace t = ping("[100.5] 64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 time=10.0 ms\n");
  EXPECT_TRUE(t.samples.empty());
  EXPECT_EQ(t.unrecognised_lines, 1u);
}

TEST(TraceSequence, ALossLineForAnAnsweredProbeChangesNothing) {
  // macOS names the timed-out probe by counting, so with reordering it can name one that was
  // answered: that must neither erase the reply nor start a new run.
  const Trace t =
      ping(reply(0) + reply(2) + reply(1) + "Request timeout for icmp_seq 1\n" + reply(3));
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{10000, 10000, 10000, 10000}));
}
