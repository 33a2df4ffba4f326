// mtr reports (--report, --report-wide, -o, older layouts, --json): per-hop summaries, golden.
#include <gtest/gtest.h>

#include "shaper/trace.hpp"
#include "trace_test_support.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using trace_test::diagnostics_of;
using trace_test::parse_fixture;

namespace {

Probability percent(double value) {
  return *Probability::make(value / 100.0);
}

}  // namespace

TEST(MtrReport, CurrentLayout) {
  // "  1.|-- 10.99.1.2                 40.0%     5    0.1   0.1   0.1   0.1   0.0"
  const Trace t = parse_fixture("mtr_report.txt");
  EXPECT_EQ(t.format, TraceFormat::kMtrReport);
  EXPECT_TRUE(t.samples.empty());  // summaries, not a series
  ASSERT_EQ(t.hops.size(), 2u);
  const HopSummary& first = t.hops[0];
  EXPECT_EQ(first.hop, 1u);
  EXPECT_EQ(first.host, "10.99.1.2");
  EXPECT_EQ(first.loss, percent(40.0));
  EXPECT_EQ(first.sent, 5u);
  EXPECT_EQ(first.last, 100us);
  EXPECT_EQ(first.avg, 100us);
  EXPECT_EQ(first.best, 100us);
  EXPECT_EQ(first.worst, 100us);
  EXPECT_EQ(first.stdev, 0us);
  EXPECT_FALSE(first.received.has_value());  // not a column of this report
  EXPECT_EQ(t.hops[1].host, "10.99.2.2");
  EXPECT_EQ(t.hops[1].loss, Probability::zero());
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_EQ(t.unrecognised_lines, 0u);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(MtrReport, WideLayout) {
  const Trace t = parse_fixture("mtr_report_wide.txt");
  ASSERT_EQ(t.hops.size(), 2u);
  EXPECT_EQ(t.hops[0].host, "10.99.1.2");
  EXPECT_EQ(t.hops[1].sent, 5u);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(MtrReport, EveryColumn) {
  // mtr -o LDRSNBAWVGJMXI: the HOST: line names the columns, in that order.
  const Trace t = parse_fixture("mtr_report_all_fields.txt");
  ASSERT_EQ(t.hops.size(), 2u);
  const HopSummary& hop = t.hops[1];
  EXPECT_EQ(hop.loss, Probability::zero());
  EXPECT_EQ(hop.dropped, 0u);
  EXPECT_EQ(hop.received, 3u);
  EXPECT_EQ(hop.sent, 3u);
  EXPECT_EQ(hop.last, 100us);
  EXPECT_EQ(hop.geometric_mean, 100us);
  EXPECT_EQ(hop.jitter, 0us);
  EXPECT_EQ(hop.jitter_avg, 0us);
  EXPECT_EQ(hop.jitter_max, 0us);
  EXPECT_EQ(hop.jitter_interarrival, 0us);
}

TEST(MtrReport, ThroughNetem) {
  // "  1.|-- 10.98.0.2                 10.0%    20  108.1 158.7 103.0 210.0  36.6"
  const Trace t = parse_fixture("mtr_netem_report.txt");
  ASSERT_EQ(t.hops.size(), 1u);
  EXPECT_EQ(t.hops[0].loss, percent(10.0));
  EXPECT_EQ(t.hops[0].sent, 20u);
  EXPECT_EQ(t.hops[0].last, 108100us);
  EXPECT_EQ(t.hops[0].avg, 158700us);
  EXPECT_EQ(t.hops[0].best, 103ms);
  EXPECT_EQ(t.hops[0].worst, 210ms);
  EXPECT_EQ(t.hops[0].stdev, 36600us);
}

TEST(MtrReport, ValuesCutByTheColumnWidth) {
  // A 3 s ARP timeout: " 3055.1" does not fit mtr's 6-character column and loses its last digit.
  const Trace t = parse_fixture("mtr_report_unreachable.txt");
  ASSERT_EQ(t.hops.size(), 2u);
  EXPECT_EQ(t.hops[1].loss, percent(66.7));
  EXPECT_EQ(t.hops[1].avg, 3055ms);
  EXPECT_EQ(t.hops[1].stdev, 0us);
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "mtr_report_unreachable.txt:4:48: Last \"3055.\" lost its decimal to mtr's column "
                "width; read as whole ms",
                "mtr_report_unreachable.txt:4:54: Avg \"3055.\" lost its decimal to mtr's column "
                "width; read as whole ms",
                "mtr_report_unreachable.txt:4:60: Best \"3055.\" lost its decimal to mtr's column "
                "width; read as whole ms",
                "mtr_report_unreachable.txt:4:66: Wrst \"3055.\" lost its decimal to mtr's column "
                "width; read as whole ms",
            }));
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(MtrReport, OldLayoutLoadBalancingAndTruncation) {
  const Trace t = parse_fixture("mtr_report_old.txt");
  ASSERT_EQ(t.hops.size(), 5u);
  EXPECT_EQ(t.hops[0].host, "192.168.1.1");
  EXPECT_EQ(t.hops[0].avg, 500us);
  EXPECT_EQ(t.hops[1].other_hosts, (std::vector<std::string>{"100.64.0.5", "100.64.0.9"}));
  EXPECT_EQ(t.hops[2].host, "???");                          // no reply at this TTL
  EXPECT_EQ(t.hops[2].loss, Probability::one());             // "100.0": the '%' was overwritten
  EXPECT_EQ(t.hops[3].host, "core1.fra.example-transit.n");  // cut by mtr at 25 characters
  EXPECT_EQ(t.hops[4].last, 1234ms);
  EXPECT_EQ(t.hops[4].avg, 987600us);
  EXPECT_FALSE(t.hops[4].worst.has_value());  // "12345": digits lost, value unknown
  EXPECT_EQ(t.hops[4].stdev, 900us);          // the last column is never cut
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "mtr_report_old.txt:9:48: Last \"1234.\" lost its decimal to mtr's column width; "
                "read as whole ms",
                "mtr_report_old.txt:9:67: Wrst \"12345\" is wider than mtr's column and was cut by "
                "the next one; left out (mtr --json has the whole value)",
            }));
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(MtrReport, AsNumbers) {
  const Trace t = parse_fixture("mtr_report_asn.txt");
  ASSERT_EQ(t.hops.size(), 4u);
  EXPECT_EQ(t.hops[0].asn, "AS???");
  EXPECT_EQ(t.hops[0].host, "192.168.1.1");
  EXPECT_EQ(t.hops[1].asn, "AS64500");
  EXPECT_EQ(t.hops[1].other_hosts, (std::vector<std::string>{"203.0.113.5"}));
  EXPECT_EQ(t.hops[3].host, "dns.google (8.8.8.8)");
  EXPECT_EQ(t.hops[3].worst, 17300us);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(MtrReport, ConcatenatedReportsAndBadLines) {
  const Trace t = parse_trace_text(
      "Start: 2024-11-30T12:00:00+0000\n"
      "HOST: a                           Loss%   Snt   Last   Avg  Best  Wrst StDev\n"
      "  1.|-- 10.0.0.1                   0.0%    10    0.4   0.5   0.3   0.9   0.2\n"
      "  2.|-- 10.0.0.2                   abc%    10    0.4   0.5   0.3   0.9   0.2\n"
      "  3.|-- 10.0.0.3                   0.0%    10    0.4   0.5\n"
      "Start: 2024-11-30T12:05:00+0000\n"
      "HOST: a                           Loss%   Snt   Avg\n"
      "  1.|-- 10.0.0.1                   5.0%    20    0.7\n"
      "what is this\n",
      "mtr.txt", trace_test::with_format(TraceFormat::kMtrReport));
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "mtr.txt:4:36: expected Loss% from 0 to 100; left out of this hop",
                "mtr.txt:5:59: expected a host and 7 values (Loss% Snt Last Avg Best Wrst StDev)",
                "mtr.txt:9:1: unrecognised mtr report line: \"what is this\"",
                "mtr.txt: 1 hop has values that could not be read; they are left out of the hop",
            }));
  // Hop 2's Loss% is unreadable: the hop stays, without a loss (not 100 %), its other values read.
  ASSERT_EQ(t.hops.size(), 3u);
  EXPECT_EQ(t.hops[0].report, 0u);
  EXPECT_EQ(t.hops[1].hop, 2u);
  EXPECT_FALSE(t.hops[1].loss.has_value());
  EXPECT_EQ(t.hops[1].sent, 10u);
  EXPECT_EQ(t.hops[1].worst, 900us);
  EXPECT_EQ(t.hops[2].report, 1u);
  EXPECT_EQ(t.hops[2].avg, 700us);
  EXPECT_FALSE(t.hops[2].last.has_value());
  EXPECT_EQ(t.sessions, 2u);
  EXPECT_EQ(t.unrecognised_lines, 2u);
  EXPECT_EQ(t.unreadable_records, 1u);
}

TEST(MtrJson, Report) {
  const Trace t = parse_fixture("mtr.json");
  EXPECT_EQ(t.format, TraceFormat::kMtrJson);
  EXPECT_EQ(t.host, "10.99.2.2");
  ASSERT_EQ(t.hops.size(), 2u);
  EXPECT_EQ(t.hops[0].hop, 1u);
  EXPECT_EQ(t.hops[0].host, "10.99.1.2");
  EXPECT_EQ(t.hops[0].loss, Probability::zero());
  EXPECT_EQ(t.hops[0].sent, 5u);
  EXPECT_EQ(t.hops[0].last, 81us);
  EXPECT_EQ(t.hops[0].avg, 75us);
  EXPECT_EQ(t.hops[0].best, 68us);
  EXPECT_EQ(t.hops[0].worst, 85us);
  EXPECT_EQ(t.hops[0].stdev, 7us);
  EXPECT_EQ(t.hops[1].worst, 96us);
  EXPECT_EQ(t.lines, 36u);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(MtrJson, UnreachableHop) {
  const Trace t = parse_fixture("mtr_unreachable.json");
  ASSERT_EQ(t.hops.size(), 2u);
  EXPECT_EQ(t.hops[1].loss, percent(66.666));
  EXPECT_EQ(t.hops[1].avg, 3077600us);  // whole, where the text report cut it to "3055."
}

TEST(MtrJson, OlderStringValuesAndBadFields) {
  // mtr 0.8x printed "count" and "tests" as strings.
  const Trace t = parse_trace_text(
      R"({"report": {"mtr": {"dst": "192.0.2.1", "tests": "10"},
          "hubs": [{"count": "1", "host": "192.0.2.1", "Loss%": 10.00, "Snt": 10,
                    "Last": 1.50, "Avg": "2.25", "Best": -1, "Wrst": 3.00, "StDev": 0.50}]}})",
      "old.json");
  EXPECT_EQ(t.format, TraceFormat::kMtrJson);
  ASSERT_EQ(t.hops.size(), 1u);
  EXPECT_EQ(t.hops[0].hop, 1u);
  EXPECT_EQ(t.hops[0].loss, percent(10.0));
  EXPECT_EQ(t.hops[0].avg, 2250us);
  EXPECT_FALSE(t.hops[0].best.has_value());
  EXPECT_EQ(
      diagnostics_of(t),
      (std::vector<std::string>{
          "old.json#/report/hubs/0/Best: expected a time in ms up to 24 h; left out of this "
          "hop",
          "old.json: 1 hop has values that could not be read; they are left out of the hop"}));
}

TEST(MtrJson, SyntaxErrorHasLineAndColumn) {
  const Trace t = parse_trace_text("{\"report\": {\"hubs\": [\n  {\"count\": 1,,}\n]}}\n",
                                   "bad.json", trace_test::with_format(TraceFormat::kMtrJson));
  ASSERT_EQ(t.diagnostics.size(), 1u) << to_string(t.diagnostics);
  EXPECT_EQ(t.diagnostics[0].where, "bad.json:2:15");
  EXPECT_EQ(t.diagnostics[0].message.rfind("invalid JSON: syntax error", 0), 0u)
      << t.diagnostics[0].message;
  EXPECT_EQ(t.lines, 3u);
}

TEST(MtrReport, DecimalCommaAndOutOfRangeValues) {
  // mtr under a decimal-comma locale; hop 2's Avg is beyond a day: left out, the hop kept.
  const Trace t = parse_trace_text(
      "HOST: a                           Loss%   Snt   Last   Avg  Best  Wrst StDev\n"
      "  1.|-- 10.0.0.1                   2,5%    40    0,4   0,5   0,3   0,9   0,2\n"
      "  2.|-- 10.0.0.2                   0,0%    40    0,4 99999999999 0,3 0,9 0,2\n",
      "mtr.txt", trace_test::with_format(TraceFormat::kMtrReport));
  ASSERT_EQ(t.hops.size(), 2u);
  ASSERT_TRUE(t.hops[0].loss.has_value());
  EXPECT_DOUBLE_EQ(t.hops[0].loss->value(), 0.025);
  EXPECT_EQ(t.hops[0].avg, 500us);
  EXPECT_EQ(t.hops[0].stdev, 200us);
  EXPECT_FALSE(t.hops[1].avg.has_value());
  EXPECT_EQ(t.hops[1].best, 300us);
  EXPECT_EQ(t.unreadable_records, 1u);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(MtrJson, AHugeStringIsRefusedInBoundedMemory) {
  // issue 21 §8: a 1.5 GiB host string cost 3.15 GB of RSS (nlohmann's lexer held it twice). Here
  // 512 MiB stream through a pipe: the parse stops 64 KiB into the string, with a diagnostic at
  // its start, and the child's peak RSS stays at its baseline plus a few chunks. The bound of
  // 96 MiB leaves room for an ASan build's shadow and allocator; the old code needed > 1 GiB.
  constexpr std::size_t kStringBytes = std::size_t{512} << 20;
  ParseOptions options;
  options.format = TraceFormat::kMtrJson;
  const auto outcome = trace_test::parse_streamed_in_child(
      "{\"report\": {\"mtr\": {\"dst\": \"10.0.0.9\"},\n \"hubs\": [{\"count\": 1, \"host\": \"",
      'a', kStringBytes, "\"}]}}\n", options, [](const Trace& t) {
        return t.diagnostics.size() == 1 &&
               t.diagnostics[0].to_string().ends_with(
                   ":2:32: a JSON string or number longer than 65536 bytes; not an mtr or iperf3 "
                   "document (read up to here)") &&
               t.host == "10.0.0.9";
      });
  EXPECT_TRUE(outcome.child_ok);
  RecordProperty("peak_rss_mib", std::to_string(outcome.peak_rss_mib));
  EXPECT_LT(outcome.peak_rss_mib, 96.0);
  EXPECT_LT(outcome.bytes_written, kStringBytes);  // the child stopped reading
}

TEST(MtrJson, LongNumbersAreRefusedToo) {
  const std::string json =
      "{\"report\": {\"hubs\": [{\"count\": " + std::string(70000, '7') + "}]}}";
  const Trace t = parse_trace_text(json, "long.json");
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{"long.json:1:32: a JSON string or number longer than 65536 "
                                      "bytes; not an mtr or iperf3 document (read up to here)"}));
  EXPECT_TRUE(t.hops.empty());
}

TEST(MtrJson, MoreHubsThanTtlsStopsTheParse) {
  std::string json = "{\"report\": {\"hubs\": [";
  for (int i = 0; i < 300; ++i) json += std::string(i ? "," : "") + "{\"Avg\": 1.5}";
  json += "]}}";
  const Trace t = parse_trace_text(json, "hubs.json");
  EXPECT_EQ(t.hops.size(), 256u);
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{"hubs.json#/report/hubs/256: more than 256 hubs (mtr probes "
                                      "at most 255 TTLs); read the first 256"}));
}
