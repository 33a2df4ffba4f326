// ping captures (iputils, busybox, macOS/BSD), golden: every value below was read off the fixture
// text by hand (tests/fixtures/traces/README.md says how each capture was made).
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <variant>

#include "shaper/compiler.hpp"
#include "shaper/trace.hpp"
#include "trace_test_support.hpp"

using namespace shaper;
using namespace std::chrono_literals;
using trace_test::diagnostics_of;
using trace_test::lost_indices;
using trace_test::parse_fixture;
using trace_test::rtts_us;

namespace {

// Seconds since the epoch as printed ("1796057956.042663"), in ns.
constexpr Nanoseconds epoch(std::int64_t seconds, std::int64_t microseconds) {
  return Nanoseconds{seconds * 1'000'000'000 + microseconds * 1'000};
}

}  // namespace

TEST(PingTrace, IputilsWithTimestamps) {
  // [1796057956.042663] 64 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.593 ms ... 20 replies
  const Trace t = parse_fixture("ping_D_loopback.txt");
  EXPECT_EQ(t.format, TraceFormat::kPing);
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(t.lines, 25u);
  EXPECT_EQ(t.unrecognised_lines, 0u);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
  ASSERT_EQ(t.samples.size(), 20u);
  EXPECT_TRUE(trace_test::dense(t));
  EXPECT_TRUE(lost_indices(t).empty());
  EXPECT_EQ(t.samples[0].rtt, 593us);
  // -D stamps the reply's arrival: the probe left one RTT earlier.
  EXPECT_EQ(t.samples[0].send_time, epoch(1796057956, 42663) - 593us);
  EXPECT_FALSE(t.samples[0].send_time_inferred);
  EXPECT_EQ(t.samples[19].rtt, 67us);
  EXPECT_EQ(t.samples[19].send_time, epoch(1796057959, 919776) - 67us);
  EXPECT_FALSE(t.send_times_inferred);
  EXPECT_EQ(t.interval_source, IntervalSource::kTimestamps);
  // ping -i 0.2 on a loaded VM: the printed spacing is 0.2 s plus a few ms of scheduling.
  EXPECT_GE(t.interval, 200ms);
  EXPECT_LE(t.interval, 210ms);
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_EQ(t.session_starts, std::vector<std::size_t>{0});
}

TEST(PingTrace, IputilsWithoutTimestampsInfersSendTimesFromTheSummary) {
  // "10 packets transmitted, 10 received, 0% packet loss, time 1837ms": 1837 ms / 9 gaps.
  const Trace t = parse_fixture("ping_loopback.txt");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{38, 38, 42, 45, 40, 43, 42, 42, 47, 39}));
  EXPECT_TRUE(t.send_times_inferred);
  EXPECT_EQ(t.interval_source, IntervalSource::kSummary);
  EXPECT_EQ(t.interval, 204111111ns);
  EXPECT_EQ(t.samples[0].send_time, 0ns);
  EXPECT_EQ(t.samples[3].send_time, 3 * 204111111ns);
  EXPECT_TRUE(t.samples[3].send_time_inferred);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(PingTrace, Ipv6StartsAtOne) {
  // "PING ::1(::1) 56 data bytes": iputils, so icmp_seq=1 is the first probe.
  const Trace t = parse_fixture("ping6_loopback.txt");
  EXPECT_EQ(t.host, "::1");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{127, 41, 45, 38, 48}));
  EXPECT_EQ(t.interval, Nanoseconds{819ms} / 4);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(PingTrace, Ipv6WithTimestamps) {
  const Trace t = parse_fixture("ping_D_ipv6_loopback.txt");
  ASSERT_EQ(t.samples.size(), 5u);
  EXPECT_EQ(t.samples[0].send_time, epoch(1796057962, 593824) - 37us);
  EXPECT_EQ(t.samples[4].send_time, epoch(1796057963, 411779) - 52us);
  EXPECT_FALSE(t.send_times_inferred);
}

TEST(PingTrace, HostNameInReplies) {
  // "64 bytes from localhost (127.0.0.1): icmp_seq=1 ..."
  const Trace t = parse_fixture("ping_hostname.txt");
  EXPECT_EQ(t.host, "localhost");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{33, 41, 43}));
}

TEST(PingTrace, DuplicatesAreKeptApart) {
  // Broadcast ping answered by two hosts: every second reply is "(DUP!)".
  const Trace t = parse_fixture("ping_broadcast_dup.txt");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{82, 64, 61}));
  ASSERT_EQ(t.duplicates.size(), 2u);
  EXPECT_EQ(t.duplicates[0].seq, 0u);
  EXPECT_EQ(t.duplicates[0].rtt, 95us);
  EXPECT_TRUE(t.duplicates[0].duplicate);
  EXPECT_EQ(t.duplicates[0].send_time, t.samples[0].send_time);
  EXPECT_EQ(t.duplicates[1].seq, 1u);
  EXPECT_EQ(t.duplicates[1].rtt, 77us);
  // "ping: sock4.fd: ...", "ai->ai_family: ..." and "WARNING: pinging broadcast address" are
  // ping's.
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(PingTrace, OutstandingProbesDuringAnOutage) {
  // ping -O -D while the far end's route was removed: icmp_seq 6..10 "no answer yet".
  const Trace t = parse_fixture("ping_O_D_outage.txt");
  ASSERT_EQ(t.samples.size(), 15u);
  EXPECT_EQ(lost_indices(t), (std::vector<std::size_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(t.samples[4].send_time, epoch(1796057988, 484295) - 78us);
  // Lost probes have no stamp of their own: one interval after the last probe that has one.
  EXPECT_TRUE(t.samples[5].send_time_inferred);
  EXPECT_EQ(t.samples[5].send_time, *t.samples[4].send_time + t.interval);
  EXPECT_EQ(t.samples[9].send_time, *t.samples[4].send_time + 5 * t.interval);
  EXPECT_EQ(t.samples[11].rtt, 1180us);  // "time=1.18 ms"
  EXPECT_FALSE(t.samples[10].send_time_inferred);
}

TEST(PingTrace, TimeToLiveExceeded) {
  // "[1796057980.015214] From 10.99.1.2 icmp_seq=1 Time to live exceeded" x4, no reply at all.
  const Trace t = parse_fixture("ping_D_ttl_exceeded.txt");
  ASSERT_EQ(t.samples.size(), 4u);
  EXPECT_EQ(t.icmp_errors, 4u);
  for (const auto& sample : t.samples) {
    EXPECT_TRUE(sample.lost());
    EXPECT_TRUE(sample.icmp_error);
    EXPECT_TRUE(sample.send_time_inferred);
  }
  // No reply has a stamp, so the error lines' stamps place the probes (wall clock, not 0-based).
  EXPECT_EQ(t.samples[0].send_time, epoch(1796057980, 15214));
  EXPECT_EQ(t.samples[3].send_time, epoch(1796057980, 627809));
  EXPECT_FALSE(t.send_times_inferred);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(PingTrace, DestinationHostUnreachable) {
  // "From 10.99.1.1 icmp_seq=1 Destination Host Unreachable" and a summary ending in "pipe 4".
  const Trace t = parse_fixture("ping_unreachable.txt");
  EXPECT_EQ(lost_indices(t), (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_EQ(t.icmp_errors, 4u);
  EXPECT_TRUE(t.samples[2].icmp_error);
  EXPECT_EQ(t.interval, Nanoseconds{1558ms} / 3);
  EXPECT_TRUE(t.send_times_inferred);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(PingTrace, ConcatenatedRunsWithHeaders) {
  // Three runs appended: 4 + 3 replies over IPv4, then 3 over IPv6; each restarts at icmp_seq=1.
  const Trace t = parse_fixture("ping_sessions.txt");
  EXPECT_EQ(t.sessions, 3u);
  EXPECT_EQ(t.session_starts, (std::vector<std::size_t>{0, 4, 7}));
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{39, 45, 41, 43, 28, 42, 42, 37, 47, 49}));
  EXPECT_TRUE(trace_test::dense(t));
  // Interval from the three summaries together: (616 + 413 + 405) ms over (3 + 2 + 2) gaps.
  EXPECT_EQ(t.interval, Nanoseconds{1434ms} / 7);
}

TEST(PingTrace, ConcatenatedRunsWithoutHeaders) {
  // icmp_seq 1 2 4 | 1 2 3: the repeated 1 (already answered) starts a new session; 3 is lost.
  const Trace t = parse_fixture("ping_sessions_no_header.txt");
  EXPECT_EQ(t.session_starts, (std::vector<std::size_t>{0, 4}));
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{10100, 10200, -1, 10400, 20100, 20200, 20300}));
  EXPECT_TRUE(t.send_times_inferred);
  EXPECT_EQ(t.interval_source, IntervalSource::kDefault);
  EXPECT_EQ(t.interval, 1s);
  EXPECT_EQ(t.samples[6].send_time, 6s);
}

TEST(PingTrace, SequenceWrapsAt65535) {
  // ping -i 0 -c 65545 -D, cut to icmp_seq 65525 .. 65535, 0 .. 9: one run, nothing lost.
  const Trace t = parse_fixture("ping_D_wrap.txt");
  ASSERT_EQ(t.samples.size(), 21u);
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_TRUE(lost_indices(t).empty());
  EXPECT_EQ(t.samples[10].send_time, epoch(1796058245, 712639) - 3us);  // icmp_seq=65535
  EXPECT_EQ(t.samples[11].send_time, epoch(1796058245, 712646) - 3us);  // icmp_seq=0
  EXPECT_EQ(t.samples[20].send_time, epoch(1796058245, 712721) - 3us);  // icmp_seq=9
}

TEST(PingTrace, WholeSecondLineStamps) {
  // moreutils ts '%Y-%m-%d %H:%M:%S |' format: "2026-11-30 17:04:12 | 64 bytes from ...".
  const Trace t = parse_fixture("ping_ts_prefix.txt");
  ASSERT_EQ(t.samples.size(), 5u);
  const Nanoseconds at_12 = 1796058252s;  // 2026-11-30 17:04:12 UTC
  EXPECT_EQ(t.samples[0].send_time, at_12 - 31us);
  EXPECT_EQ(t.samples[4].send_time, at_12 + 1s - 47us);
  // Spacings of whole-second stamps are 0 or 1 s: the interval comes from the span instead.
  EXPECT_EQ(t.interval_source, IntervalSource::kTimestamps);
  EXPECT_EQ(t.interval, (1s - 47us + 31us) / 4);
  EXPECT_EQ(t.unrecognised_lines, 0u);

  // The same stamps written by a clock one hour ahead of UTC.
  ParseOptions options;
  options.utc_offset = std::chrono::minutes{60};
  const Trace shifted = parse_fixture("ping_ts_prefix.txt", options);
  EXPECT_EQ(shifted.samples[0].send_time, at_12 - 1h - 31us);
}

TEST(PingTrace, EpochColonPrefix) {
  // "1796059098.105171: 64 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.029 ms"
  const Trace t = parse_fixture("ping_epoch_prefix.txt");
  ASSERT_EQ(t.samples.size(), 5u);
  EXPECT_EQ(t.samples[0].send_time, epoch(1796059098, 105171) - 29us);
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(PingTrace, BracketedDateTimePrefix) {
  // "[2026-11-30 17:18:18.940723] 64 bytes from ..."
  const Trace t = parse_fixture("ping_bracket_datetime_prefix.txt");
  ASSERT_EQ(t.samples.size(), 5u);
  EXPECT_EQ(t.samples[0].send_time, 1796059098s + 940723us - 41us);
  EXPECT_FALSE(t.send_times_inferred);
}

TEST(PingTrace, PingsOwnStampWinsOverAnOuterOne) {
  // "2026-11-30 17:18:19.786 | [1796059099.778702] 64 bytes from ...": -D is finer and exact.
  const Trace t = parse_fixture("ping_ts_fraction_D.txt");
  ASSERT_EQ(t.samples.size(), 5u);
  EXPECT_EQ(t.samples[0].send_time, epoch(1796059099, 778702) - 20us);
}

TEST(PingTrace, Busybox) {
  // "64 bytes from 127.0.0.1: seq=0 ttl=64 time=0.040 ms": busybox counts from 0.
  const Trace t = parse_fixture("busybox_ping.txt");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{40, 59, 68, 58, 61}));
  EXPECT_EQ(t.interval_source, IntervalSource::kDefault);  // its summary has no time
  EXPECT_EQ(t.unrecognised_lines, 0u);
  const Trace v6 = parse_fixture("busybox_ping6.txt");
  EXPECT_EQ(rtts_us(v6), (std::vector<long long>{57, 63, 54}));
}

TEST(PingTrace, BusyboxLossesAreGaps) {
  // busybox prints nothing for a lost probe: seq=2 and seq=12 are missing (netem, 10 % loss).
  const Trace t = parse_fixture("busybox_netem_ping.txt");
  ASSERT_EQ(t.samples.size(), 20u);
  EXPECT_EQ(lost_indices(t), (std::vector<std::size_t>{2, 12}));
  EXPECT_EQ(t.samples[0].rtt, 215673us);
}

TEST(PingTrace, BusyboxWithNoReplyAtAllCountsFromTheSummary) {
  // Header, then "4 packets transmitted, 0 packets received": four lost probes.
  const Trace t = parse_fixture("busybox_ping_unreachable.txt");
  EXPECT_EQ(lost_indices(t), (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_EQ(t.sessions, 1u);
}

TEST(PingTrace, MacOs) {
  const Trace t = parse_fixture("macos_ping.txt");
  // icmp_seq 0..7; "Request timeout for icmp_seq 2" then its reply arrives late (1012 ms): not
  // lost. 4 timed out and drew an ICMP error (its header dump is recognised); 7 is lost at the end,
  // which only the summary's "8 packets transmitted" shows.
  EXPECT_EQ(rtts_us(t),
            (std::vector<long long>{12345, 11802, 1012447, 13010, -1, 12901, 100250, -1}));
  EXPECT_EQ(t.icmp_errors, 1u);
  EXPECT_EQ(t.unrecognised_lines, 0u);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(PingTrace, MacOsPing6) {
  // "16 bytes from 2001:db8::2, icmp_seq=0 hlim=64 time=0.071 ms"
  const Trace t = parse_fixture("macos_ping6.txt");
  EXPECT_EQ(t.host, "2001:db8::2");
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{71, 102, 89}));
  EXPECT_EQ(t.unrecognised_lines, 0u);
}

TEST(PingTrace, ReorderedLateAndDuplicatedRepliesThroughNetem) {
  // netem delay 150ms 60ms loss 10% duplicate 5%, ping -D -O -i 0.05: replies overtake each other,
  // most arrive after their "no answer yet" line, RTTs >= 100 ms are printed as integers.
  const Trace t = parse_fixture("netem_ping_D_O.txt");
  ASSERT_EQ(t.samples.size(), 60u);
  // The summary says 60 transmitted, 56 received, +1 duplicate.
  EXPECT_EQ(lost_indices(t), (std::vector<std::size_t>{18, 31, 40, 57}));
  EXPECT_EQ(t.samples[0].rtt, 185ms);    // after "no answer yet for icmp_seq=1"
  EXPECT_EQ(t.samples[9].rtt, 94700us);  // icmp_seq=10 arrived before 9
  EXPECT_EQ(t.samples[8].rtt, 161ms);
  EXPECT_EQ(t.samples[0].send_time, epoch(1796058188, 994450) - 185ms);
  ASSERT_EQ(t.duplicates.size(), 1u);
  EXPECT_EQ(t.duplicates[0].seq, 47u);  // icmp_seq=48
  EXPECT_EQ(t.duplicates[0].rtt, 157ms);
  EXPECT_EQ(t.duplicates[0].send_time, epoch(1796058191, 809666) - 157ms);
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(PingTrace, ReorderedRepliesWithoutTimestamps) {
  // The same netem, plain ping: the first reply printed is icmp_seq=2; the header says the run
  // started at 1, whose reply comes third.
  const Trace t = parse_fixture("netem_ping.txt");
  ASSERT_EQ(t.samples.size(), 60u);
  EXPECT_EQ(t.samples[0].rtt, 215ms);
  EXPECT_EQ(t.samples[1].rtt, 121ms);
  EXPECT_EQ(t.lost(), 9u);  // 60 transmitted, 51 received
  EXPECT_EQ(t.duplicates.size(), 4u);
  EXPECT_EQ(t.interval, Nanoseconds{3274ms} / 59);
}

TEST(PingTrace, RepliesLaterThanTheNextProbesAreNotLosses) {
  // netem delay 1100ms, ping -i 0.2 -O: every reply arrives after five "no answer yet" lines.
  const Trace t = parse_fixture("netem_ping_D_O_late.txt");
  ASSERT_EQ(t.samples.size(), 12u);
  EXPECT_TRUE(lost_indices(t).empty());
  for (const auto& sample : t.samples) EXPECT_EQ(sample.rtt, 1101ms);
}

TEST(PingTrace, MalformedLinesAreReportedWithLineAndColumn) {
  const Trace t = parse_fixture("ping_malformed.txt");
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "ping_malformed.txt:3:44: expected \"time=<ms> ms\" with an RTT up to 24 h; this "
                "probe is left out: neither delivered nor lost",
                "ping_malformed.txt:4:43: expected \"time=<ms> ms\" with an RTT up to 24 h; this "
                "probe is left out: neither delivered nor lost",
                "ping_malformed.txt:5:35: expected \"icmp_seq=<n>\" with n from 0 to 65535; this "
                "probe is left out: neither delivered nor lost",
                "ping_malformed.txt:6:26: expected \"icmp_seq=<n>\"; this probe is left out: "
                "neither delivered nor lost",
                "ping_malformed.txt:7:1: unrecognised ping line: \"this line is not ping output\"",
                "ping_malformed.txt: 4 replies could not be read; left out of the samples: neither "
                "delivered nor lost",
            }));
  EXPECT_EQ(t.unrecognised_lines, 5u);
  EXPECT_EQ(t.unreadable_records, 4u);
  EXPECT_EQ(t.lines, 8u);
  // icmp_seq 2 and 3 are replies whose RTT could not be read: left out, not lost. The replies
  // without a readable icmp_seq (lines 5 and 6) name no missing probe: icmp_seq 4 follows 3.
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12300, 12400}));
  EXPECT_EQ(t.samples[0].seq, 0u);
  EXPECT_EQ(t.samples[1].seq, 3u);
  EXPECT_EQ(t.lost(), 0u);
}

// --- replies that cannot be read (issue 21 §7) ---------------------------------------------------

namespace {

// One iputils reply to 192.0.2.7, as printed: the fields the tests vary are the sequence number and
// what follows time=.
std::string reply(std::string_view seq, std::string_view time, std::string_view suffix = "") {
  return "64 bytes from 192.0.2.7: icmp_seq=" + std::string(seq) +
         " ttl=57 time=" + std::string(time) + " ms" + std::string(suffix) + "\n";
}

}  // namespace

TEST(PingTrace, UnreadableRepliesAreReportedAndNeverLost) {
  // No probe of this run was lost (the summary says so): the values of two replies cannot be read.
  const Trace t = parse_trace_text(
      "PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n" + reply("1", "12.3") +
          reply("2", "9999999999999.5") + reply("3", "1.234,5") + reply("4", "12.5") +
          "--- 192.0.2.7 ping statistics ---\n"
          "4 packets transmitted, 4 received, 0% packet loss, time 3004ms\n",
      "capture.txt");
  EXPECT_EQ(t.lost(), 0u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12300, 12500}));
  ASSERT_EQ(t.samples.size(), 2u);
  EXPECT_EQ(t.samples[1].seq, 3u);  // the probe numbers of the left-out replies are skipped
  EXPECT_EQ(t.unreadable_records, 2u);
  EXPECT_EQ(t.unrecognised_lines, 2u);
  EXPECT_EQ(diagnostics_of(t),
            (std::vector<std::string>{
                "capture.txt:3:44: expected \"time=<ms> ms\" with an RTT up to 24 h; this probe is "
                "left out: neither delivered nor lost",
                "capture.txt:4:44: expected \"time=<ms> ms\" with an RTT up to 24 h; this probe is "
                "left out: neither delivered nor lost",
                "capture.txt: 2 replies could not be read; left out of the samples: neither "
                "delivered nor lost",
            }));
  EXPECT_EQ(t.sessions, 1u);
  EXPECT_EQ(t.session_starts, std::vector<std::size_t>{0});
}

TEST(PingTrace, TheCountOfUnreadableRepliesOutlivesTheDiagnosticsLimit) {
  std::string text = "PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n";
  for (int seq = 1; seq <= 30; ++seq) {
    text += reply(std::to_string(seq), "x");
  }
  ParseOptions options;
  options.max_diagnostics = 3;
  const Trace t = parse_trace_text(text, "capture.txt", options);
  EXPECT_TRUE(t.samples.empty());
  EXPECT_EQ(t.lost(), 0u);
  const std::vector<std::string> diagnostics = diagnostics_of(t);
  ASSERT_EQ(diagnostics.size(), 5u);
  EXPECT_EQ(diagnostics[3],
            "capture.txt: 30 replies could not be read; left out of the samples: neither "
            "delivered nor lost");
  EXPECT_EQ(diagnostics[4], "capture.txt: and 27 more");
}

TEST(PingTrace, DecimalCommaOfALocaleIsRead) {
  // ping under a locale whose decimal mark is a comma (de_DE): "time=1,5 ms".
  const Trace t = parse_trace_text(reply("1", "1,5") + reply("2", "12,25") + reply("3", "100"),
                                   "capture.txt", trace_test::with_format(TraceFormat::kPing));
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{1500, 12250, 100000}));
  EXPECT_TRUE(t.diagnostics.empty()) << to_string(t.diagnostics);
}

TEST(PingTrace, AReplyWithoutTimeIsNotALoss) {
  // ping -s 8: a payload too small for the send time, so iputils prints no time=.
  const Trace t = parse_trace_text(
      "PING 127.0.0.1 (127.0.0.1) 8(36) bytes of data.\n"
      "16 bytes from 127.0.0.1: icmp_seq=1 ttl=64\n"
      "16 bytes from 127.0.0.1: icmp_seq=2 ttl=64\n"
      "64 bytes from 127.0.0.1: icmp_seq=3 ttl=64 time=0.050 ms\n",
      "capture.txt");
  EXPECT_EQ(t.lost(), 0u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{50}));
  EXPECT_EQ(t.samples[0].seq, 2u);
  EXPECT_EQ(t.unreadable_records, 2u);
}

TEST(PingTrace, AReplyWithoutAReadableSequenceTakesTheNextMissingProbe) {
  // The line after icmp_seq=1 is a reply whose number is garbled; then 3 follows: 2 was that reply.
  const Trace first =
      parse_trace_text(reply("1", "12.3") + reply("??", "12.4") + reply("3", "12.5"), "capture.txt",
                       trace_test::with_format(TraceFormat::kPing));
  EXPECT_EQ(first.lost(), 0u);
  EXPECT_EQ(rtts_us(first), (std::vector<long long>{12300, 12500}));
  EXPECT_EQ(first.samples[1].seq, 2u);
  // When the next reply leaves no gap the garbled one named no missing probe, and a later gap is
  // a loss as usual.
  const Trace second = parse_trace_text(
      reply("1", "12.3") + reply("??", "12.4") + reply("2", "12.5") + reply("4", "12.6"),
      "capture.txt", trace_test::with_format(TraceFormat::kPing));
  EXPECT_EQ(rtts_us(second), (std::vector<long long>{12300, 12500, -1, 12600}));
  EXPECT_EQ(second.unreadable_records, 1u);
}

TEST(PingTrace, UnreadableRepliesDoNotBecomeALossModel) {
  // The symptom of issue 21 §7: 1 reply in 10 unreadable, none lost, compiled to "loss gilbert".
  std::string text = "PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n";
  for (int seq = 1; seq <= 400; ++seq) {
    const std::string time = seq % 10 == 0 ? "9999999999999.5" : std::to_string(20 + seq % 7);
    text += "[" + std::to_string(1732971234 + seq) +
            ".000000] 64 bytes from 192.0.2.7: icmp_seq=" + std::to_string(seq) +
            " ttl=57 time=" + time + " ms\n";
  }
  CaptureInput capture{"capture.txt", "", parse_trace_text(text, "capture.txt")};
  EXPECT_EQ(capture.trace.lost(), 0u);
  const CompileResult result = compile_profile({capture}, CompileOptions{});
  ASSERT_TRUE(result.profile) << to_string(result.diagnostics);
  EXPECT_EQ(result.report.probes, 360u);
  EXPECT_EQ(result.report.delivered, 360u);
  for (const auto& phase : result.profile->phases) {
    EXPECT_TRUE(std::holds_alternative<std::monostate>(phase.spec.loss)) << phase.name;
  }
}

TEST(PingTrace, AnUnreadableDuplicateOfAnUnansweredProbeIsNotALoss) {
  // Found by the fuzz oracle's reasoning: DUP! on a reply whose RTT cannot be read, for a probe
  // with no other reply, left that probe lost.
  const Trace t =
      parse_trace_text(reply("1", "12.3") + reply("2", "x", " (DUP!)") + reply("3", "12.5"),
                       "capture.txt", trace_test::with_format(TraceFormat::kPing));
  EXPECT_EQ(t.lost(), 0u);
  EXPECT_EQ(rtts_us(t), (std::vector<long long>{12300, 12500}));
}
