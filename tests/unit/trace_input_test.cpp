// What every format shares: detection and names, reading files in chunks, environment failures,
// and input that is not a capture at all (binary, NULs, endless lines), which must never crash,
// throw or be dropped silently.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "shaper/errors.hpp"
#include "shaper/trace.hpp"
#include "trace_test_support.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using trace_test::diagnostics_of;
using trace_test::rtts_us;

namespace {

constexpr TraceFormat kAllFormats[] = {TraceFormat::kAuto,     TraceFormat::kPing,
                                       TraceFormat::kFping,    TraceFormat::kMtrReport,
                                       TraceFormat::kMtrJson,  TraceFormat::kIperf3Json,
                                       TraceFormat::kEpochRtt, TraceFormat::kCsv};

// A file under the test's temporary directory, removed when the test ends.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& content)
      : path_(testing::TempDir() + "jitterd_trace_" + name) {
    std::ofstream out(path_, std::ios::binary);
    out << content;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ping -D text of `count` replies (every 7th lost), like the captures in the fixtures.
std::string ping_text(int count) {
  std::string text = "PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n";
  for (int i = 1; i <= count; ++i) {
    if (i % 7 == 0) continue;
    text += "[" + std::to_string(1700000000 + i / 10) + "." +
            std::to_string(100000 + (i % 10) * 10000) +
            "] 64 bytes from 192.0.2.7: icmp_seq=" + std::to_string(i % 65536) +
            " ttl=57 time=" + std::to_string(10 + i % 50) + ".5 ms\n";
  }
  return text;
}

}  // namespace

TEST(TraceInput, DetectsEveryFixture) {
  const std::vector<std::pair<std::string, TraceFormat>> fixtures{
      {"ping_D_loopback.txt", TraceFormat::kPing},
      {"ping_ts_prefix.txt", TraceFormat::kPing},
      {"ping_D_ttl_exceeded.txt", TraceFormat::kPing},
      {"ping_unreachable.txt", TraceFormat::kPing},
      {"macos_ping6.txt", TraceFormat::kPing},
      {"busybox_ping_unreachable.txt", TraceFormat::kPing},
      {"netem_ping_D_O.txt", TraceFormat::kPing},
      {"fping_e_D_C5.txt", TraceFormat::kFping},
      {"fping_q_C4.txt", TraceFormat::kFping},
      {"fping_D_unreachable.txt", TraceFormat::kFping},
      {"mtr_report.txt", TraceFormat::kMtrReport},
      {"mtr_report_old.txt", TraceFormat::kMtrReport},
      {"mtr_report_asn.txt", TraceFormat::kMtrReport},
      {"mtr.json", TraceFormat::kMtrJson},
      {"iperf3_client_reverse.json", TraceFormat::kIperf3Json},
      {"iperf3_error.json", TraceFormat::kIperf3Json},
      {"epoch_rtt.txt", TraceFormat::kEpochRtt},
      {"rtt.csv", TraceFormat::kCsv},
      {"rtt.tsv", TraceFormat::kCsv},
      {"rtt_headerless.csv", TraceFormat::kCsv},
  };
  for (const auto& [name, format] : fixtures) {
    EXPECT_EQ(trace_test::parse_fixture(name).format, format) << name;
  }
  EXPECT_EQ(detect_trace_format("hello\nworld\n"), std::nullopt);
  EXPECT_EQ(detect_trace_format("{\"a\": 1}"), std::nullopt);
  EXPECT_EQ(detect_trace_format(""), std::nullopt);
}

TEST(TraceInput, FormatNames) {
  for (const TraceFormat format : kAllFormats) {
    EXPECT_EQ(trace_format_from_name(to_string(format)), format) << to_string(format);
  }
  EXPECT_EQ(to_string(TraceFormat::kMtrReport), "mtr-report");
  EXPECT_EQ(to_string(TraceFormat::kIperf3Json), "iperf3-json");
  EXPECT_EQ(trace_format_from_name("tsv"), TraceFormat::kCsv);
  EXPECT_EQ(trace_format_from_name("pong"), std::nullopt);
  EXPECT_EQ(trace_format_from_name("PING"), std::nullopt);
}

TEST(TraceInput, AnExplicitFormatIsNotSecondGuessed) {
  ParseOptions options;
  options.format = TraceFormat::kEpochRtt;
  const Trace t = trace_test::parse_fixture("ping_D_loopback.txt", options);
  EXPECT_EQ(t.format, TraceFormat::kEpochRtt);
  EXPECT_TRUE(t.samples.empty());
  EXPECT_EQ(t.unrecognised_lines, 23u);  // all but the first line (taken as a header) and blanks
}

TEST(TraceInput, EmptyAndUnknownCaptures) {
  const Trace empty = parse_trace_text("", "empty.txt");
  EXPECT_EQ(diagnostics_of(empty), (std::vector<std::string>{"empty.txt: the capture is empty"}));
  const Trace unknown = parse_trace_text("hello\nworld", "what.txt");
  EXPECT_EQ(unknown.format, TraceFormat::kAuto);
  EXPECT_EQ(diagnostics_of(unknown),
            (std::vector<std::string>{"what.txt:1:1: cannot tell the capture format from its first "
                                      "8192 bytes; name it: ping, fping, mtr-report, mtr-json, "
                                      "iperf3-json, epoch-rtt or csv"}));
  EXPECT_EQ(unknown.lines, 2u);
  EXPECT_EQ(unknown.unrecognised_lines, 2u);
}

TEST(TraceInput, EnvironmentFailuresThrowSystemError) {
  try {
    parse_trace_file("/nonexistent/jitterd/capture.txt");
    FAIL() << "no exception";
  } catch (const SystemError& error) {
    EXPECT_STREQ(error.what(),
                 "open (/nonexistent/jitterd/capture.txt): No such file or directory");
  }
  EXPECT_THROW(parse_trace_file(testing::TempDir()), SystemError);  // read(2) of a directory
}

TEST(TraceInput, FileAndTextGiveTheSameTraceAcrossChunkBoundaries) {
  // 20000 lines, ~1.3 MB: several 256 KiB reads, with lines cut at each boundary.
  const std::string text = ping_text(20000);
  ASSERT_GT(text.size(), 1'000'000u);
  const TempFile file("chunks.txt", text);
  const Trace from_file = parse_trace_file(file.path());
  const Trace from_text = parse_trace_text(text, file.path());
  EXPECT_EQ(from_file.samples, from_text.samples);
  EXPECT_EQ(from_file.lines, from_text.lines);
  EXPECT_EQ(from_file.samples.size(), 20000u);
  EXPECT_EQ(from_file.lost(), 20000u / 7);
  EXPECT_EQ(from_file.unrecognised_lines, 0u);
}

TEST(TraceInput, LineEndingsAndByteOrderMark) {
  const Trace t = parse_trace_text(
      "\xEF\xBB\xBFPING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\r\n"
      "64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 time=10.5 ms\r\n"
      "64 bytes from 192.0.2.7: icmp_seq=2 ttl=57 time=11.5 ms",  // no final newline
      "crlf.txt");
  EXPECT_EQ(t.format, TraceFormat::kPing);
  EXPECT_EQ(t.host, "192.0.2.7");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{10500, 11500}));
  EXPECT_EQ(t.lines, 3u);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(TraceInput, EndlessLinesAreSkippedWithADiagnostic) {
  const std::string huge(300 * 1024, 'x');  // longer than a read chunk, too
  const std::string text = "64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 time=10.5 ms\n" + huge +
                           "\n64 bytes from 192.0.2.7: icmp_seq=2 ttl=57 time=11.5 ms\n" + huge;
  const TempFile file("huge.txt", text);
  for (const Trace& t :
       {parse_trace_text(text, "huge.txt", trace_test::with_format(TraceFormat::kPing)),
        parse_trace_file(file.path(), trace_test::with_format(TraceFormat::kPing))}) {
    EXPECT_EQ(rtts_us(t), (std::vector<long long>{10500, 11500}));
    EXPECT_EQ(t.lines, 4u);
    EXPECT_EQ(t.unrecognised_lines, 2u);
    ASSERT_EQ(t.diagnostics.size(), 2u);
    EXPECT_EQ(t.diagnostics[0].where.substr(t.diagnostics[0].where.size() - 8), ":2:65537");
    EXPECT_EQ(t.diagnostics[0].message,
              "line longer than 65536 bytes; skipped (no capture format has lines this long)");
    EXPECT_EQ(t.diagnostics[1].where.substr(t.diagnostics[1].where.size() - 8), ":4:65537");
  }
}

TEST(TraceInput, NulBytesAreQuotedNotFatal) {
  using namespace std::string_literals;
  const Trace t = parse_trace_text(
      "64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 time=10.5 ms\n"
      "\x01garbage\0with nul\n"s,
      "nul.txt");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{10500}));
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "nul.txt:2:1: unrecognised ping line: \"\\x01garbage\\x00with nul\""}));
}

TEST(TraceInput, DiagnosticsAreCappedWithACount) {
  std::string text = "64 bytes from 192.0.2.7: icmp_seq=1 ttl=57 time=10.5 ms\n";
  for (int i = 0; i < 30; ++i) text += "noise " + std::to_string(i) + "\n";
  ParseOptions options;
  options.max_diagnostics = 5;
  const Trace t = parse_trace_text(text, "noisy.txt", options);
  EXPECT_EQ(t.unrecognised_lines, 30u);
  ASSERT_EQ(t.diagnostics.size(), 6u);
  EXPECT_EQ(t.diagnostics[0].to_string(), "noisy.txt:2:1: unrecognised ping line: \"noise 0\"");
  EXPECT_EQ(t.diagnostics[5].to_string(), "noisy.txt: and 25 more");
}

TEST(TraceInput, BinaryGarbageNeverCrashesAnyParser) {
  // Seeded, so that a failure reproduces: random bytes, then random lines made of the tools'
  // own fragments (which reach deeper into each parser than pure noise).
  std::mt19937_64 random(20241130);
  std::string noise(1 << 20, '\0');
  for (char& c : noise) c = static_cast<char>(random() & 0xff);
  const std::vector<std::string> fragments{"64 bytes from ",
                                           "icmp_seq=",
                                           "seq=",
                                           " time=",
                                           " ms",
                                           "(DUP!)",
                                           "[1732971234.5] ",
                                           "From ",
                                           "no answer yet for icmp_seq=",
                                           "PING ",
                                           " : [",
                                           "], ",
                                           " bytes, ",
                                           "timed out",
                                           " : ",
                                           "xmt/rcv/%loss = ",
                                           "HOST: x Loss% Snt Avg",
                                           "  1.|-- ",
                                           "100.0",
                                           "%",
                                           "-",
                                           ".",
                                           "|  `|-- ",
                                           "{\"intervals\":[{\"sum\":{",
                                           "\"hubs\":[",
                                           "\"start\":",
                                           "}",
                                           "]",
                                           ",",
                                           "\n",
                                           " ",
                                           "99999999999999999999",
                                           "2024-11-30 12:00:00 | ",
                                           "\r",
                                           "\t",
                                           ";",
                                           "\"",
                                           "\xff"};
  std::string soup;
  for (int i = 0; i < 200000; ++i) soup += fragments[random() % fragments.size()];
  for (const std::string* input : {&noise, &soup}) {
    for (const TraceFormat format : kAllFormats) {
      ParseOptions options;
      options.format = format;
      const Trace t = parse_trace_text(*input, "fuzz", options);
      EXPECT_LE(t.unrecognised_lines, t.lines) << to_string(format);
      // The first max_diagnostics, the count of unreadable records, "and K more".
      EXPECT_LE(t.diagnostics.size(), options.max_diagnostics + 2) << to_string(format);
      // Probe order; a probe whose reply could not be read is left out, so seq may skip.
      for (std::size_t i = 1; i < t.samples.size(); ++i)
        ASSERT_LT(t.samples[i - 1].seq, t.samples[i].seq);
    }
  }
}
