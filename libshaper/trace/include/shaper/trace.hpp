#pragma once
// Network-latency captures (ping, fping, mtr, iperf3, epoch/CSV columns) read into typed values.
// The parsers stream: a file is read in fixed-size chunks and never held whole, so memory follows
// the number of samples, not the size of the text. Bad or unknown lines become diagnostics with
// file:line:column and are counted, never silently dropped; only environment failures (the file
// cannot be opened or read) throw. Formats, units and what is inferred: docs/capture-formats.md.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shaper/diagnostics.hpp"
#include "shaper/quantities.hpp"

namespace shaper {

enum class TraceFormat { kAuto, kPing, kFping, kMtrReport, kMtrJson, kIperf3Json, kEpochRtt, kCsv };

// "auto", "ping", "fping", "mtr-report", "mtr-json", "iperf3-json", "epoch-rtt", "csv": the names
// the CLI accepts. trace_format_from_name also takes "tsv" for kCsv.
std::string_view to_string(TraceFormat format);
std::optional<TraceFormat> trace_format_from_name(std::string_view name);

// One probe of an RTT series, in probe order (not arrival order: a late reply fills its own slot).
struct RttSample {
  // 0-based index of the probe in the trace (samples[i].seq == i, except that a probe whose reply
  // line could not be read is left out, so its number is skipped). The tool's own sequence numbers
  // (icmp_seq, fping's [n], a seq column) are unwrapped across 65535 -> 0 and stitched across
  // sessions, so that a probe missing from the sequence is a lost sample at its own index.
  std::uint64_t seq = 0;
  // When the probe was sent. Since the Unix epoch when the capture has wall-clock time (ping -D,
  // fping -D, a timestamp prefix, an epoch/time column); since the first probe otherwise. Always
  // set by these parsers: where the capture does not say, it is inferred (send_time_inferred).
  std::optional<Nanoseconds> send_time;
  std::optional<Nanoseconds> rtt;  // nullopt: lost (no reply, or an ICMP error instead of one)
  // Only in Trace::duplicates: a reply to a probe that already had one (ping's "DUP!").
  bool duplicate = false;
  // send_time was not printed for this probe: it comes from a neighbour's time and the interval.
  bool send_time_inferred = false;
  // The network answered with an ICMP error (unreachable, TTL exceeded...) instead of a reply.
  bool icmp_error = false;

  bool lost() const { return !rtt.has_value(); }
  friend bool operator==(const RttSample&, const RttSample&) = default;
};

// One hop of an mtr report (--report or --json). mtr prints per-hop summaries, not samples; a
// column the report did not have (mtr -o selects them) is nullopt. Times are mtr's milliseconds.
struct HopSummary {
  std::size_t hop = 0;  // 1-based TTL ("count" in the JSON)
  std::string host;     // as printed: "10.0.0.1", "router (10.0.0.1)"; "???" = no reply
  std::string asn;      // "AS15169" when mtr ran with -z, else empty
  std::vector<std::string> other_hosts;  // further addresses seen at this TTL (load balancing)
  std::size_t report = 0;  // 0-based index of the report when several are concatenated

  std::optional<Probability> loss;                 // Loss%
  std::optional<std::uint64_t> sent;               // Snt
  std::optional<std::uint64_t> received;           // Rcv
  std::optional<std::uint64_t> dropped;            // Drop
  std::optional<Nanoseconds> last;                 // Last
  std::optional<Nanoseconds> avg;                  // Avg
  std::optional<Nanoseconds> best;                 // Best
  std::optional<Nanoseconds> worst;                // Wrst
  std::optional<Nanoseconds> stdev;                // StDev
  std::optional<Nanoseconds> geometric_mean;       // Gmean
  std::optional<Nanoseconds> jitter;               // Jttr: difference of the last two RTTs
  std::optional<Nanoseconds> jitter_avg;           // Javg
  std::optional<Nanoseconds> jitter_max;           // Jmax
  std::optional<Nanoseconds> jitter_interarrival;  // Jint
  friend bool operator==(const HopSummary&, const HopSummary&) = default;
};

// One reporting interval of an iperf3 --json run (intervals[].sum). Jitter and loss exist only on
// the receiving side (iperf3 -R on the client, or the server's JSON); the sender's are nullopt.
struct IntervalSummary {
  Nanoseconds start{0};  // since the start of the test
  Nanoseconds end{0};
  std::uint64_t bytes = 0;
  std::optional<Nanoseconds> jitter;  // jitter_ms (RFC 3550 smoothed jitter)
  std::optional<std::uint64_t> lost_packets;
  std::optional<std::uint64_t> packets;
  std::optional<Probability> lost;  // lost_percent / 100
  bool omitted = false;             // inside iperf3's -O warm-up: not measurement
  bool sender = false;
  friend bool operator==(const IntervalSummary&, const IntervalSummary&) = default;
};

// Where Trace::interval came from, so that a consumer can tell a measured interval from a guess.
enum class IntervalSource {
  kOption,      // ParseOptions::interval
  kTimestamps,  // median spacing of the printed send times
  kSummary,     // ping's summary line: "N packets transmitted, ..., time T ms" -> T / (N - 1)
  kDefault,     // the tool's default (1 s for ping and fping): nothing in the capture says
};

struct Trace {
  TraceFormat format = TraceFormat::kAuto;  // the format parsed (detected, or the one asked for)
  std::string source_name;
  std::string host;                        // probed host when the capture names it
  std::vector<RttSample> samples;          // RTT series: ping, fping, epoch-rtt, csv
  std::vector<RttSample> duplicates;       // DUP! replies: kept out of `samples` so that a probe
                                           // counts once; seq names the probe they duplicate
  std::vector<HopSummary> hops;            // mtr: summaries, NOT sample series
  std::vector<IntervalSummary> intervals;  // iperf3
  // True when the capture has no time at all: every send_time is seq * interval since the first
  // probe (and every sample has send_time_inferred).
  bool send_times_inferred = false;
  Nanoseconds interval{0};  // probe interval used for inference
  IntervalSource interval_source = IntervalSource::kDefault;
  std::size_t sessions = 0;                 // runs found (headers, restarted sequences, reports)
  std::vector<std::size_t> session_starts;  // index in `samples` of each session's first probe
  std::size_t icmp_errors = 0;              // ICMP error lines (unreachable, TTL exceeded...)
  std::size_t lines = 0;                    // lines read (JSON: lines of the document)
  std::size_t unrecognised_lines = 0;       // lines not used: unknown or malformed; reported
  // Records shaped like a reply, hop or interval with a value that could not be read or is out of
  // range ("time=1.2.3 ms", "time=9999999999999.5 ms", a reply without time=). Each is a
  // diagnostic and counted here (and in unrecognised_lines when its line is not used); a probe
  // whose reply could not be read is left out of `samples`: neither delivered nor lost.
  std::size_t unreadable_records = 0;
  // "capture.txt:812:17: expected \"time=<ms> ms\"": the first ParseOptions::max_diagnostics, then
  // one "and K more" line.
  Diagnostics diagnostics;

  std::size_t lost() const;  // samples without a reply
};

struct ParseOptions {
  TraceFormat format = TraceFormat::kAuto;  // kAuto: detected from the first kDetectionBytes
  std::optional<Nanoseconds> interval;      // probe interval, for captures that do not show it
  std::size_t max_diagnostics = 20;
  std::string host;  // fping with several targets: which one (default: first)
  // Offset of the clock that wrote zone-less wall-clock stamps ("2024-11-30 12:00:01 | ...") from
  // UTC; they are read as UTC + offset. Stamps with Z or +hh:mm carry their own.
  std::chrono::minutes utc_offset{0};
};

// How much of the text format detection looks at, and the longest line a parser accepts (longer
// lines are skipped with a diagnostic; no capture format has lines near this).
inline constexpr std::size_t kDetectionBytes = 8192;
inline constexpr std::size_t kMaxLineBytes = 64 * 1024;

// Reads `path` in fixed-size chunks. Throws SystemError when the file cannot be opened or read;
// everything wrong inside the file is a diagnostic.
Trace parse_trace_file(const std::string& path, const ParseOptions& options = {});

// The same parsers over text in memory (tests, fuzzers, stdin already read). Never throws for any
// input.
Trace parse_trace_text(std::string_view text, std::string_view source_name,
                       const ParseOptions& options = {});

// The format a capture's first bytes look like; nullopt when none fits.
std::optional<TraceFormat> detect_trace_format(std::string_view head);

}  // namespace shaper
