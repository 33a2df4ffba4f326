// Column captures: "epoch rtt" and CSV/TSV with a header, golden.
#include <gtest/gtest.h>

#include "shaper/trace.hpp"
#include "trace_test_support.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using trace_test::diagnostics_of;
using trace_test::lost_indices;
using trace_test::parse_fixture;
using trace_test::rtts_us;

TEST(EpochRttTrace, LostAsMinusOneEmptyOrNan) {
  const Trace t = parse_fixture("epoch_rtt.txt");
  EXPECT_EQ(t.format, TraceFormat::kEpochRtt);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12300, 12500, -1, -1, 123000, -1, 12250}));
  // The epoch column is the send time, exactly.
  EXPECT_EQ(t.samples[0].send_time, 1732971234s);
  EXPECT_EQ(t.samples[2].send_time, 1732971236s);
  EXPECT_FALSE(t.samples[2].send_time_inferred);
  EXPECT_EQ(t.interval, 1s);
  EXPECT_EQ(t.interval_source, IntervalSource::kTimestamps);
  EXPECT_EQ(t.lines, 8u);
  EXPECT_EQ(t.unrecognised_lines, 0u);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(EpochRttTrace, HeaderAndMalformedRows) {
  const Trace t = parse_trace_text(
      "epoch rtt_ms\n"
      "1732971234.5 12.5\n"
      "1732971235.5 12.5 extra\n"
      "1732971236.5 -3\n"
      "yesterday 12\n"
      "\t1732971237.5\t13\n",
      "rows.txt", trace_test::with_format(TraceFormat::kEpochRtt));
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12500, 13000}));
  EXPECT_EQ(t.samples[1].send_time, 1732971237500ms);
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "rows.txt:3:19: expected two columns, \"<epoch seconds> <rtt ms>\"",
                "rows.txt:4:14: expected an RTT in ms (0 to 24 h), or -1 for a lost probe; this "
                "probe is left out: neither delivered nor lost",
                "rows.txt:5:1: expected \"<epoch seconds> <rtt ms>\"; this probe is left out: "
                "neither delivered nor lost",
                "rows.txt: 2 rows could not be read; left out of the samples: neither delivered "
                "nor lost",
            }));
  EXPECT_EQ(t.unrecognised_lines, 3u);
  EXPECT_EQ(t.unreadable_records, 2u);
}

TEST(CsvTrace, HeaderNamesUnitsSequenceAndLostFlag) {
  // timestamp,seq,"RTT (ms)",lost,comment: ISO times, seq 0 1 2 5 3 (4 never came, 3 was late).
  const Trace t = parse_fixture("rtt.csv");
  EXPECT_EQ(t.format, TraceFormat::kCsv);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12300, 12500, -1, 19900, -1, 13100}));
  const Nanoseconds noon = 1732968000s;  // 2024-11-30T12:00:00Z
  EXPECT_EQ(t.samples[0].send_time, noon);
  EXPECT_EQ(t.samples[2].send_time, noon + 400ms);  // a lost row still has its time
  EXPECT_FALSE(t.samples[2].send_time_inferred);
  EXPECT_EQ(t.samples[3].send_time, noon + 600ms);
  EXPECT_EQ(t.samples[4].send_time, noon + 800ms);  // never printed: from the 200 ms interval
  EXPECT_TRUE(t.samples[4].send_time_inferred);
  EXPECT_EQ(t.samples[5].send_time, noon + 1s);
  EXPECT_EQ(t.interval, 200ms);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(CsvTrace, TabSeparatedWithOtherUnits) {
  // epoch_ms, rtt_us, seq
  const Trace t = parse_fixture("rtt.tsv");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12300, 12500, -1, 12250}));
  EXPECT_EQ(t.samples[1].send_time, 1732971234100ms);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(CsvTrace, WithoutHeaderTheColumnsAreAssumedAndSaidSo) {
  const Trace t = parse_fixture("rtt_headerless.csv");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12300, 12500, -1}));
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{"rtt_headerless.csv:1:1: no header: reading column 1 as the "
                                      "send time (epoch seconds) and column 2 as the RTT (ms)"}));
}

TEST(CsvTrace, SemicolonsQuotesAndBadValues) {
  const Trace t = parse_trace_text(
      "\"Latency (ms)\";time;note\n"
      "\"12,5\";1732971234;\"a;b\"\n"
      "12.5;1732971235;ok\n"
      "13.0;not a time;x\n"
      "-2;1732971237;x\n"
      ";1732971238;lost\n",
      "semi.csv");
  EXPECT_EQ(t.format, TraceFormat::kCsv);
  // "12,5" in a semicolon-separated file is a decimal comma (docs/capture-formats.md).
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12500, 12500, -1}));
  EXPECT_EQ(t.samples[2].send_time, 1732971238s);
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "semi.csv:4:6: expected time as seconds since the epoch or an ISO 8601 time; this "
                "probe is left out: neither delivered nor lost",
                "semi.csv:5:1: expected Latency (ms) as milliseconds (0 to 24 h), or empty or -1 "
                "for a lost probe; this probe is left out: neither delivered nor lost",
                "semi.csv: 2 rows could not be read; left out of the samples: neither delivered "
                "nor lost",
            }));
  EXPECT_EQ(t.unrecognised_lines, 2u);
  EXPECT_EQ(t.unreadable_records, 2u);
}

TEST(CsvTrace, HeaderWithoutAnRttColumn) {
  const Trace t = parse_trace_text("time,seq\n1,2\n3,4\n", "nortt.csv",
                                   trace_test::with_format(TraceFormat::kCsv));
  EXPECT_TRUE(t.samples.empty());
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{"nortt.csv:1:1: expected a column named rtt, rtt_ms, "
                                      "latency_ms or time_ms (RTT in ms); no row can be read"}));
  EXPECT_EQ(t.unrecognised_lines, 3u);
}

TEST(CsvTrace, SequenceColumnRestartsASession) {
  const Trace t = parse_trace_text("seq,rtt_ms\n0,10\n1,11\n3,13\n0,20\n1,21\n", "runs.csv");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{10000, 11000, -1, 13000, 20000, 21000}));
  EXPECT_EQ(t.session_starts, (std::vector<std::size_t>{0, 4}));
  EXPECT_EQ(lost_indices(t), (std::vector<std::size_t>{2}));
}

TEST(CsvTrace, UnreadableRowsWithASequenceAreNeverLost) {
  // With a seq column a row that cannot be read used to leave a gap, i.e. a loss (issue 21 §7).
  const Trace t = parse_trace_text(
      "seq,rtt_ms\n"
      "1,12.1\n"
      "2,abc\n"
      "3,99999999999999\n"
      "4,-7\n"
      "5,12.5\n"
      "x,12.6\n"
      "7,12.7\n",
      "rtt.csv");
  EXPECT_EQ(t.lost(), 0u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12100, 12500, 12700}));
  EXPECT_EQ(t.unreadable_records, 4u);
  EXPECT_EQ(t.unrecognised_lines, 4u);
}

TEST(CsvTrace, DecimalCommaInSemicolonAndTabSeparatedFiles) {
  const Trace semicolons =
      parse_trace_text("time;rtt_ms\n1732971234,5;12,5\n1732971235,5;13\n", "semi.csv");
  EXPECT_EQ(rtts_us(semicolons), (std::vector<long long>{12500, 13000}));
  EXPECT_EQ(semicolons.samples[0].send_time, 1732971234500ms);
  EXPECT_TRUE(semicolons.diagnostics.empty()) << to_string(semicolons.diagnostics);
  const Trace tabs = parse_trace_text("time\trtt_ms\n1732971234\t0,25\n", "tabs.tsv");
  EXPECT_EQ(rtts_us(tabs), (std::vector<long long>{250}));
}

TEST(EpochRttTrace, DecimalCommaAndOutOfRangeRtt) {
  const Trace t = parse_trace_text("1732971234,5 12,5\n1732971235,5 1e9999\n1732971236,5 -1\n",
                                   "rows.txt", trace_test::with_format(TraceFormat::kEpochRtt));
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12500, -1}));
  EXPECT_EQ(t.samples[0].send_time, 1732971234500ms);
  EXPECT_EQ(t.unreadable_records, 1u);
}
