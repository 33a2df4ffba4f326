// iperf3 --json UDP runs: per-interval sums, golden.
#include <gtest/gtest.h>

#include <string>

#include "shaper/trace.hpp"
#include "trace_test_support.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using trace_test::diagnostics_of;
using trace_test::parse_fixture;

TEST(Iperf3Trace, ReceiverIntervals) {
  // iperf3 -u -b 2M -l 1200 -t 3 -R --json: the client receives, so it measures jitter and loss.
  const Trace t = parse_fixture("iperf3_client_reverse.json");
  EXPECT_EQ(t.format, TraceFormat::kIperf3Json);
  EXPECT_EQ(t.host, "127.0.0.1");
  ASSERT_EQ(t.intervals.size(), 3u);
  const IntervalSummary& first = t.intervals[0];
  EXPECT_EQ(first.start, 0ns);
  EXPECT_EQ(first.end, 1000078us);
  EXPECT_EQ(first.bytes, 250800u);
  EXPECT_EQ(first.jitter, 10675ns);  // "jitter_ms": 0.010675425111800557
  EXPECT_EQ(first.lost_packets, 0u);
  EXPECT_EQ(first.packets, 209u);
  EXPECT_EQ(first.lost, Probability::zero());
  EXPECT_FALSE(first.sender);
  EXPECT_FALSE(first.omitted);
  EXPECT_EQ(t.intervals[2].start, 2000082us);
  EXPECT_EQ(t.intervals[2].jitter, 30098ns);
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(Iperf3Trace, ReceiverIntervalsWithLoss) {
  // Through netem delay 150ms 60ms loss 10% duplicate 5%.
  const Trace t = parse_fixture("iperf3_netem_reverse.json");
  EXPECT_EQ(t.host, "10.98.0.2");
  ASSERT_EQ(t.intervals.size(), 4u);
  EXPECT_EQ(t.intervals[0].lost_packets, 27u);
  EXPECT_EQ(t.intervals[0].packets, 222u);
  EXPECT_EQ(t.intervals[0].lost, Probability::make(12.162162162162161 / 100.0));
  EXPECT_EQ(t.intervals[0].jitter, 45291053ns);  // 45.29105268998681 ms
  EXPECT_EQ(t.intervals[3].end, 4004162us);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(Iperf3Trace, SenderIntervalsHaveNoJitter) {
  const Trace t = parse_fixture("iperf3_client_sender.json");
  ASSERT_EQ(t.intervals.size(), 3u);
  EXPECT_TRUE(t.intervals[0].sender);
  EXPECT_FALSE(t.intervals[0].jitter.has_value());
  EXPECT_FALSE(t.intervals[0].lost.has_value());
  EXPECT_EQ(t.intervals[0].packets, 209u);
  EXPECT_EQ(
      diagnostics_of(t),
      (std::vector<std::string>{
          "iperf3_client_sender.json: these are the sender's intervals: they carry no jitter "
          "or loss; capture the receiver (iperf3 -R on the client, or the server's --json)"}));
}

TEST(Iperf3Trace, ErrorReportedByIperf3) {
  const Trace t = parse_fixture("iperf3_error.json");
  EXPECT_EQ(t.format, TraceFormat::kIperf3Json);
  EXPECT_TRUE(t.intervals.empty());
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "iperf3_error.json#/error: iperf3 reported: unable to connect to server: "
                "Connection refused",
                "iperf3_error.json: no intervals: \"intervals\" is missing or empty"}));
}

TEST(Iperf3Trace, TcpTestAndBadFields) {
  const Trace t = parse_trace_text(
      R"({"start": {"test_start": {"protocol": "TCP"}},
          "intervals": [{"sum": {"start": 0, "end": 1.5, "bytes": 1000}},
                        {"sum": {"start": "soon", "bytes": -4, "lost_percent": 120}}]})",
      "tcp.json");
  ASSERT_EQ(t.intervals.size(), 2u);
  EXPECT_EQ(t.intervals[0].end, 1500ms);
  EXPECT_EQ(t.intervals[0].bytes, 1000u);
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "tcp.json#/intervals/1/sum/start: expected seconds since the start; left out of "
                "this interval",
                "tcp.json#/intervals/1/sum/bytes: expected a byte count; left out of this interval",
                "tcp.json#/intervals/1/sum/lost_percent: expected a loss percentage from 0 to 100; "
                "left out of this interval",
                "tcp.json#/intervals/1/sum: expected \"start\" and \"end\" (seconds)",
                "tcp.json#/start/test_start/protocol: a TCP test: its intervals have no jitter or "
                "loss (run iperf3 with -u)",
                "tcp.json: 1 interval has values that could not be read; they are left out of the "
                "interval"}));
  EXPECT_EQ(t.unreadable_records, 1u);  // one interval, however many of its values
}

TEST(Iperf3Trace, HostileJsonIsADiagnostic) {
  // Nesting far beyond any iperf3 document: refused at the limit, not by exhausting the stack.
  const std::string deep = "{\"intervals\": " + std::string(100000, '[');
  const Trace t = parse_trace_text(deep, "deep.json");
  EXPECT_EQ(t.format, TraceFormat::kIperf3Json);
  ASSERT_FALSE(t.diagnostics.empty());
  EXPECT_EQ(t.diagnostics[0].to_string(),
            "deep.json:1:1: JSON nested deeper than 64 levels; not an mtr or iperf3 document");
  // Truncated and binary input.
  const Trace cut = parse_trace_text("{\"intervals\": [{\"sum\": {\"start\": 0", "cut.json");
  ASSERT_FALSE(cut.diagnostics.empty());
  EXPECT_EQ(cut.diagnostics[0].where, "cut.json:1:35");
  const Trace binary =
      parse_trace_text(std::string_view("{\"intervals\"\0\xff\xfe", 15), "bin.json",
                       trace_test::with_format(TraceFormat::kIperf3Json));
  ASSERT_FALSE(binary.diagnostics.empty());
  EXPECT_EQ(binary.diagnostics[0].where, "bin.json:1:13");
}

TEST(Iperf3Trace, IntervalsAreBoundedByTheLongestRun) {
  // issue 21 §8: a 1 GB "intervals" array cost 3.25 GB of RSS. More than 2^20 intervals is not an
  // iperf3 run (870 000 at most): the first 2^20 are read, then the parse stops.
  constexpr std::size_t kLimit = std::size_t{1} << 20;
  std::string json = "{\"intervals\": [";
  json.reserve((kLimit + 10) * 20);
  for (std::size_t i = 0; i < kLimit + 10; ++i) json += "{\"sum\":{\"end\":1}},";
  json += "{}]}";
  const Trace t = parse_trace_text(json, "run.json");
  EXPECT_EQ(t.intervals.size(), kLimit);
  ASSERT_FALSE(t.diagnostics.empty());
  EXPECT_EQ(t.diagnostics[0].to_string(),
            "run.json#/intervals/1048576: more than 1048576 intervals (iperf3 runs at most 86400 s "
            "at 0.1 s intervals); read the first 1048576");
}

TEST(Iperf3Trace, ALongErrorIsQuotedInPart) {
  const Trace t = parse_trace_text("{\"error\": \"" + std::string(4000, 'e') + "\"}", "run.json",
                                   trace_test::with_format(TraceFormat::kIperf3Json));
  ASSERT_FALSE(t.diagnostics.empty());
  EXPECT_EQ(t.diagnostics[0].to_string(),
            "run.json#/error: iperf3 reported: " + std::string(512, 'e') + "...");
}
