// fping captures, golden (provenance: tests/fixtures/traces/README.md).
#include <gtest/gtest.h>

#include "shaper/trace.hpp"
#include "trace_test_support.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using trace_test::diagnostics_of;
using trace_test::lost_indices;
using trace_test::parse_fixture;
using trace_test::rtts_us;

TEST(FpingTrace, PerProbeLinesWithTimestampsAndTheirCList) {
  // fping -e -D -C 5 -p 200 127.0.0.1: five "[stamp] 127.0.0.1 : [n], 64 bytes, x ms (...)" lines,
  // then the -C list repeating them ("127.0.0.1 : 0.036 0.034 ...").
  const Trace t = parse_fixture("fping_e_D_C5.txt");
  EXPECT_EQ(t.format, TraceFormat::kFping);
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{36, 34, 33, 45, 45}));  // not twice
  EXPECT_EQ(t.samples[0].send_time, Nanoseconds{1796058037298730000} - 36us);
  EXPECT_EQ(t.samples[4].send_time, Nanoseconds{1796058038098990000} - 45us);
  EXPECT_FALSE(t.send_times_inferred);
  EXPECT_EQ(t.lines, 7u);
  EXPECT_EQ(t.unrecognised_lines, 0u);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(FpingTrace, OneTargetIsKeptAndTheOthersAreNamed) {
  const Trace first = parse_fixture("fping_two_targets.txt");
  EXPECT_EQ(first.host, "127.0.0.1");
  EXPECT_EQ(rtts_us(first), (std::vector<long long>{45, 42, 38, 36, 37}));
  EXPECT_EQ(
      diagnostics_of(first),
      (std::vector<std::string>{"fping_two_targets.txt: fping output for several targets: kept "
                                "127.0.0.1; ignored ::1 (6 lines); choose the target with "
                                "jitterctl compile --host"}));
  EXPECT_EQ(first.unrecognised_lines, 0u);

  ParseOptions options;
  options.host = "::1";
  const Trace second = parse_fixture("fping_two_targets.txt", options);
  EXPECT_EQ(second.host, "::1");
  EXPECT_EQ(rtts_us(second), (std::vector<long long>{39, 49, 36, 36, 47}));
}

TEST(FpingTrace, TimedOutProbes) {
  // The far end's route was removed for 0.6 s: "[3], timed out (...)" .. "[5], timed out".
  const Trace t = parse_fixture("fping_D_outage.txt");
  ASSERT_EQ(t.samples.size(), 10u);
  EXPECT_EQ(lost_indices(t), (std::vector<std::size_t>{3, 4, 5}));
  // Lost probes are placed from the last reply's send time, not from their "timed out" stamp
  // (printed when fping gave up, -t later).
  EXPECT_TRUE(t.samples[3].send_time_inferred);
  EXPECT_EQ(t.samples[3].send_time, *t.samples[2].send_time + t.interval);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(FpingTrace, QuietCListOnly) {
  // fping -q -C 4 to three targets: only the lists, on stderr; the unreachable one is all "-".
  const Trace t = parse_fixture("fping_q_C4.txt");
  EXPECT_EQ(t.host, "10.99.2.2");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{75, 73, 61, 58}));
  EXPECT_TRUE(t.send_times_inferred);
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{"fping_q_C4.txt: fping output for several targets: kept "
                                      "10.99.2.2; ignored 10.99.1.3 (1 line), 10.99.1.77 (1 line); "
                                      "choose the target with jitterctl compile --host"}));
  ParseOptions options;
  options.host = "10.99.1.77";
  EXPECT_EQ(lost_indices(parse_fixture("fping_q_C4.txt", options)),
            (std::vector<std::size_t>{0, 1, 2, 3}));
}

TEST(FpingTrace, EveryProbeTimedOut) {
  // "[1796058055.57020] 10.99.2.77 : [0], timed out (NaN avg, 100% loss)" x3 and the -c summary.
  const Trace t = parse_fixture("fping_D_unreachable.txt");
  EXPECT_EQ(lost_indices(t), (std::vector<std::size_t>{0, 1, 2}));
  // No reply to place them by: the "timed out" stamps do, and their spacing is the interval.
  EXPECT_EQ(t.samples[0].send_time, Nanoseconds{1796058055570200000});
  EXPECT_TRUE(t.samples[0].send_time_inferred);
  EXPECT_EQ(t.interval_source, IntervalSource::kTimestamps);
  EXPECT_EQ(t.interval, 300210us);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(FpingTrace, ReorderedAndTimedOutThroughNetem) {
  // netem delay 150ms 60ms, fping -p 50: [4] prints before [3], [2] times out (printed after [7]).
  const Trace t = parse_fixture("fping_netem.txt");
  EXPECT_EQ(rtts_us(t),
            (std::vector<long long>{151000, 128000, -1,     187000, 123000, 200000, 187000,
                                    173000, 201000, 130000, 190000, 150000, 197000, 208000,
                                    134000, 202000, 94900,  103000, 199000, 181000}));
  EXPECT_EQ(t.samples[4].send_time, Nanoseconds{1796058198862100000} - 123ms);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(FpingTrace, DefaultModeAndMalformedLines) {
  const Trace t = parse_trace_text(
      "127.0.0.1 is alive (0.041 ms)\n"
      "127.0.0.1 is alive (0.050 ms)\n"
      "127.0.0.1 : [2], 64 bytes, 0.0x ms (0.05 avg, 0% loss)\n"
      "127.0.0.1 : 0.05 zero 0.06\n"
      "fping: not a valid host\n",
      "fping.txt", trace_test::with_format(TraceFormat::kFping));
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{41, 50}));
  EXPECT_EQ(diagnostics_of(t), (std::vector<std::string>{
                                   "fping.txt:3:28: expected \"<ms> ms\" with an RTT up to 24 h; "
                                   "this probe is left out: neither delivered nor lost",
                                   "fping.txt:4:18: expected \"<ms>\" up to 24 h or \"-\" (fping "
                                   "-C list)",
                                   "fping.txt: 1 reply could not be read; left out of the "
                                   "samples: neither delivered nor lost"}));
  EXPECT_EQ(t.unrecognised_lines, 2u);
  EXPECT_EQ(t.unreadable_records, 1u);  // the -C list repeats probe lines: not read
}

TEST(FpingTrace, StatisticsBlockIsRecognised) {
  // fping -s -e -c 3: per-probe lines, the -c summary, then the indented -s statistics.
  const Trace t = parse_fixture("fping_s_c3.txt");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{43, 72, 54}));
  EXPECT_EQ(t.lines, 21u);
  EXPECT_EQ(t.unrecognised_lines, 0u);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(FpingTrace, SummariesOnlyHaveNoSeries) {
  // fping -l -Q 1: "[17:32:11]" and an interim "xmt/rcv/%loss" line per second, no probe lines.
  const Trace t = parse_fixture("fping_l_Q1.txt");
  EXPECT_TRUE(t.samples.empty());
  EXPECT_EQ(t.unrecognised_lines, 0u);
  EXPECT_EQ(diagnostics_of(t), (std::vector<std::string>{
                                   "fping_l_Q1.txt: only fping summaries (-q or -Q): no "
                                   "per-probe RTTs; capture with -C <count> or -c/-l without -q"}));
}

TEST(FpingTrace, UnreadableRepliesAreNeverLost) {
  // fping -c 4 -D; probe 1's RTT is out of range, probe 2's in a decimal-comma locale: none lost.
  const Trace t = parse_trace_text(
      "[1732971234.10000] 192.0.2.7 : [0], 64 bytes, 12.1 ms (12.1 avg, 0% loss)\n"
      "[1732971235.10000] 192.0.2.7 : [1], 64 bytes, 99999999999 ms (12.1 avg, 0% loss)\n"
      "[1732971236.10000] 192.0.2.7 : [2], 64 bytes, 12,3 ms (12.2 avg, 0% loss)\n"
      "[1732971237.10000] 192.0.2.7 : [3], 64 bytes, 12.4 ms (12.3 avg, 0% loss)\n"
      "192.0.2.7 : xmt/rcv/%loss = 4/4/0%, min/avg/max = 12.1/12.3/12.4\n",
      "fping.txt", trace_test::with_format(TraceFormat::kFping));
  EXPECT_EQ(t.lost(), 0u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12100, 12300, 12400}));
  EXPECT_EQ(t.unreadable_records, 1u);
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "fping.txt:2:47: expected \"<ms> ms\" with an RTT up to 24 h; this probe is left "
                "out: neither delivered nor lost",
                "fping.txt: 1 reply could not be read; left out of the samples: neither delivered "
                "nor lost"}));
}

TEST(FpingTrace, AnUnreadableEntryOfACountListKeepsTheOthersInPlace) {
  // fping -C 4 -q: the third entry is garbled; the fourth is still probe 3, and nothing is lost.
  const Trace t = parse_trace_text("192.0.2.7 : 12.1 12.2 1.2.3 12.4\n", "fping.txt",
                                   trace_test::with_format(TraceFormat::kFping));
  EXPECT_EQ(t.lost(), 0u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12100, 12200, 12400}));
  ASSERT_EQ(t.samples.size(), 3u);
  EXPECT_EQ(t.samples[2].seq, 3u);
  EXPECT_EQ(t.unreadable_records, 1u);
}
