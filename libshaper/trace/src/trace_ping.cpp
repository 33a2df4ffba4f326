// ping output: iputils (Linux, with or without -D and -O, IPv4 and IPv6), macOS/BSD and busybox,
// optionally behind a line-stamping prefix. One pass, one line at a time; every line is either
// used, recognised as part of the tool's furniture (header, summary, warnings), or reported.
//
//   [1732971234.123456] 64 bytes from 1.2.3.4: icmp_seq=1 ttl=57 time=12.3 ms     reply (-D)
//   64 bytes from 1.2.3.4: icmp_seq=1 ttl=57 time=123 ms (DUP!)                     duplicate
//   64 bytes from 127.0.0.1: seq=0 ttl=64 time=0.061 ms                             busybox
//   no answer yet for icmp_seq=6                                                    -O
//   Request timeout for icmp_seq 5                                                  macOS
//   From 10.0.0.1 icmp_seq=3 Destination Host Unreachable                           ICMP error
//   36 bytes from 10.0.0.1: Time to live exceeded                                   macOS error
#include <string>

#include "trace_parser.hpp"
#include "trace_scan.hpp"
#include "trace_series.hpp"

namespace shaper::trace_detail {

namespace {

constexpr std::uint64_t kIcmpSeqModulus = 65536;  // icmp_seq is the 16-bit ICMP sequence field
constexpr std::size_t kTypicalPingLineBytes = 50;

bool contains(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}

// ICMP error texts that macOS/BSD print without the probe's sequence number.
bool is_icmp_error_text(std::string_view text) {
  for (const std::string_view error :
       {"Unreachable", "unreachable", "Time to live exceeded", "Time exceeded", "Packet too big",
        "Parameter problem", "Frag needed", "Source Quench", "Redirect"}) {
    if (contains(text, error)) return true;
  }
  return false;
}

// The first sequence number of a run, from its header: iputils counts from 1, BSD and busybox
// from 0.
//   PING 1.2.3.4 (1.2.3.4) 56(84) bytes of data.      iputils, IPv4
//   PING ::1(::1) 56 data bytes                        iputils, IPv6
//   PING 1.2.3.4 (1.2.3.4): 56 data bytes              macOS, FreeBSD, busybox
//   PING6(56=40+8+8 bytes) ::1 --> ::1                 macOS ping6
std::uint64_t first_seq_from_header(std::string_view header) {
  if (contains(header, "bytes of data")) return 1;
  if (starts_with(header, "PING6(") || contains(header, "): ")) return 0;
  return 1;
}

std::string host_from_header(std::string_view header) {
  if (starts_with(header, "PING6(")) {
    const auto arrow = header.find("--> ");
    return arrow == std::string_view::npos ? std::string{}
                                           : std::string(trim(header.substr(arrow + 4)));
  }
  std::string_view rest = header.substr(5);
  const auto end = rest.find_first_of(" (");
  return std::string(rest.substr(0, end));
}

class PingParser final : public LineParser {
 public:
  explicit PingParser(ParseContext& context)
      : context_(context),
        series_(context,
                SeriesRules{kIcmpSeqModulus, std::chrono::seconds{1}, kTypicalPingLineBytes}) {}

  void line(std::string_view text, std::uint64_t number) override;
  void finish() override { series_.finish(); }

 private:
  void reply(std::string_view text, std::size_t at, const StampedLine& stamped,
             std::uint64_t number);
  void icmp_error(std::string_view text, std::size_t at, const StampedLine& stamped,
                  std::uint64_t number);
  void no_answer(std::string_view text, std::size_t seq_at, const StampedLine& stamped,
                 std::uint64_t number);
  void transmitted(std::string_view body, std::uint64_t number);
  // The sequence number at text[at...]: 0..65535, else a diagnostic and nullopt.
  std::optional<std::uint64_t> sequence(std::string_view text, std::size_t at, std::uint64_t number,
                                        std::string_view expected);

  ParseContext& context_;
  SeriesBuilder series_;
  bool expect_header_dump_ = false;  // macOS follows an ICMP error with "Vr HL TOS ..." and values
  bool in_data_dump_ = false;        // iputils follows "wrong data byte" with "#n\t..." lines
};

void PingParser::line(std::string_view text, std::uint64_t number) {
  const StampedLine stamped = strip_timestamp_prefixes(text, context_.options.utc_offset);
  const std::size_t at = stamped.body_offset;
  const std::string_view body = text.substr(at);
  const bool dump_expected = expect_header_dump_;
  expect_header_dump_ = false;
  const bool data_dump = in_data_dump_;
  in_data_dump_ = false;
  if (trim(body).empty()) return;

  if (is_digit(body.front())) {
    if (const auto bytes = scan_unsigned(body);
        bytes && starts_with(body.substr(bytes->length), " bytes from ")) {
      reply(text, at + bytes->length + 12, stamped, number);
      return;
    }
    if (contains(body, " packets transmitted")) {
      transmitted(body, number);
      return;
    }
  }
  if (starts_with(body, "From ")) {
    icmp_error(text, at, stamped, number);
    return;
  }
  if (starts_with(body, "no answer yet for icmp_seq=")) {
    no_answer(text, at + 27, stamped, number);
    return;
  }
  if (starts_with(body, "Request timeout for icmp_seq ")) {
    no_answer(text, at + 29, stamped, number);
    return;
  }
  if (starts_with(body, "PING ") || starts_with(body, "PING6(")) {
    series_.begin_session(first_seq_from_header(body));
    if (context_.trace.host.empty()) context_.trace.host = host_from_header(body);
    return;
  }
  // Summary block and the tool's own messages: recognised, nothing to take.
  if ((starts_with(body, "--- ") && contains(body, " statistics ---")) ||
      starts_with(body, "rtt ") || starts_with(body, "round-trip ") || starts_with(body, "pipe ") ||
      starts_with(body, "ping: ") || starts_with(body, "ping6: ") || starts_with(body, "PING: ") ||
      starts_with(body, "WARNING: ") || starts_with(body, "Warning: ") ||
      starts_with(body, "ai->")) {
    return;
  }
  if (starts_with(body, "Vr HL TOS")) {
    expect_header_dump_ = true;
    return;
  }
  if (dump_expected && is_blank(body.front())) return;  // " 4  5  00 5400 0e8a ... 10.0.0.9"
  if (starts_with(body, "wrong data byte #") || (data_dump && body.front() == '#')) {
    in_data_dump_ = true;
    return;
  }
  context_.unrecognised(number, text, "ping line");
}

std::optional<std::uint64_t> PingParser::sequence(std::string_view text, std::size_t at,
                                                  std::uint64_t number, std::string_view expected) {
  const auto seq = scan_unsigned(text.substr(at));
  if (!seq || static_cast<std::uint64_t>(seq->value) >= kIcmpSeqModulus) {
    context_.malformed(
        number, at + 1,
        std::string("expected ") + std::string(expected) + " with n from 0 to 65535");
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(seq->value);
}

void PingParser::reply(std::string_view text, std::size_t from, const StampedLine& stamped,
                       std::uint64_t number) {
  // iputils and BSD print "icmp_seq=", busybox "seq=": find "seq=" and accept either before it.
  const std::size_t seq_key = text.find("seq=", from);
  if (seq_key == std::string_view::npos) {
    if (is_icmp_error_text(text.substr(from))) {
      // macOS: "36 bytes from 10.0.0.1: Time to live exceeded", then the offending IP header.
      // No sequence number: the probe shows up as a gap.
      ++context_.trace.icmp_errors;
      return;
    }
    const std::size_t colon = text.find(": ", from);
    const std::size_t column = colon == std::string_view::npos ? text.size() + 1 : colon + 3;
    context_.unreadable(number, column,
                        std::string("expected \"icmp_seq=<n>\"") + std::string(kReplyLeftOut));
    series_.unplaced_reply();
    return;
  }
  // From here on the line is a reply: a value that cannot be read makes it an unreadable reply
  // (reported, neither delivered nor lost), never a gap in the sequence, which would be a loss.
  const auto seq = scan_unsigned(text.substr(seq_key + 4));
  if (!seq || static_cast<std::uint64_t>(seq->value) >= kIcmpSeqModulus) {
    context_.unreadable(number, seq_key + 5,
                        std::string("expected \"icmp_seq=<n>\" with n from 0 to 65535") +
                            std::string(kReplyLeftOut));
    series_.unplaced_reply();
    return;
  }
  Observation observation;
  observation.seq = static_cast<std::uint64_t>(seq->value);
  observation.duplicate = text.find("DUP!", seq_key) != std::string_view::npos;

  const std::size_t time_key = text.find("time=", seq_key + 4);
  const auto rtt =
      time_key == std::string_view::npos ? std::nullopt : scan_rtt_ms(text.substr(time_key + 5));
  const std::size_t unit = time_key + 5 + (rtt ? rtt->length : 0);
  if (!rtt || !starts_with(text.substr(unit), " ms")) {
    // No time= at all: ping -s below 16 bytes has no room for the send time in the packet.
    context_.unreadable(number, time_key == std::string_view::npos ? text.size() + 1 : time_key + 1,
                        std::string("expected \"time=<ms> ms\" with an RTT up to 24 h") +
                            std::string(kReplyLeftOut));
    observation.unreadable = true;
    series_.observe(observation, number);
    return;
  }
  observation.rtt = Nanoseconds{rtt->value};
  // A -D or prefix stamp is when the reply was printed, i.e. received: the probe left one RTT
  // earlier.
  if (stamped.stamp) {
    observation.send_time = *stamped.stamp - *observation.rtt;
    observation.time_resolution = stamped.resolution;
  }
  series_.observe(observation, number);
}

void PingParser::icmp_error(std::string_view text, std::size_t at, const StampedLine& stamped,
                            std::uint64_t number) {
  // "From 10.0.0.1 icmp_seq=3 Destination Host Unreachable" (iputils, from the error queue) or
  // "From 10.0.0.1: icmp_seq=3 ..." (iputils, raw socket). Without icmp_seq (verbose redirects)
  // it concerns no probe.
  const std::size_t seq_key = text.find("icmp_seq=", at);
  if (seq_key == std::string_view::npos) return;
  const auto seq = sequence(text, seq_key + 9, number, "\"icmp_seq=<n>\"");
  if (!seq) return;
  const std::string_view what = text.substr(seq_key + 9);
  if (contains(what, "Redirect") || contains(what, "Source Quench")) return;  // not a failure
  ++context_.trace.icmp_errors;
  Observation observation;
  observation.seq = *seq;
  observation.icmp_error = true;
  observation.hint = stamped.stamp;  // the error arrives about as soon as the probe is sent
  series_.observe(observation, number);
}

void PingParser::no_answer(std::string_view text, std::size_t seq_at, const StampedLine& stamped,
                           std::uint64_t number) {
  const auto seq = sequence(text, seq_at, number, "\"icmp_seq=<n>\"");
  if (!seq) return;
  Observation observation;
  observation.seq = *seq;
  // Both are printed when the next probe is sent, one interval after this one.
  observation.hint = stamped.stamp;
  observation.hint_intervals = 1;
  series_.observe(observation, number);
}

void PingParser::transmitted(std::string_view body, std::uint64_t number) {
  // "20 packets transmitted, 20 received, 0% packet loss, time 3880ms"      iputils
  // "10 packets transmitted, 9 packets received, 10.0% packet loss"         BSD, busybox
  const auto sent = scan_unsigned(body);
  const std::optional<std::uint64_t> count =
      sent ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(sent->value)) : std::nullopt;
  if (const std::size_t time_key = body.find(", time ");
      count && time_key != std::string_view::npos) {
    if (const auto ms = scan_fixed(body.substr(time_key + 7), 6);
        ms && starts_with(body.substr(time_key + 7 + ms->length), "ms")) {
      series_.summary_duration(*count, Nanoseconds{ms->value});
    }
  }
  series_.end_session(count, number);
}

}  // namespace

std::unique_ptr<LineParser> make_ping_parser(ParseContext& context) {
  return std::make_unique<PingParser>(context);
}

}  // namespace shaper::trace_detail
