// fping output, stdout and stderr alike (fping writes the -C lists and summaries to stderr; give
// the parser whatever was captured):
//
//   [1732971234.12345] 127.0.0.1 : [0], 64 bytes, 0.05 ms (0.05 avg, 0% loss)    -c/-C/-l, -D
//   127.0.0.1 : [3], timed out (0.05 avg, 25% loss)                               lost
//   127.0.0.1 : duplicate for [0], 64 bytes, 0.10 ms                              duplicate
//   127.0.0.1 : xmt/rcv/%loss = 5/5/0%, min/avg/max = 0.03/0.04/0.05              -c summary
//   127.0.0.1 : 0.05 0.06 - 0.05                                                  -C list, - lost
//   127.0.0.1 is alive (0.04 ms)                                                  default mode, -e
//
// One target is kept (ParseOptions::host, else the first seen); lines of the others are
// recognised, counted and named in one diagnostic.
#include <map>
#include <string>
#include <utility>

#include "trace_parser.hpp"
#include "trace_scan.hpp"
#include "trace_series.hpp"

namespace shaper::trace_detail {

namespace {

constexpr std::size_t kTypicalFpingLineBytes = 50;
// Ignored targets are listed by name up to this many; beyond, only counted (hostile input could
// name a new target on every line).
constexpr std::size_t kMaxNamedOtherTargets = 16;

// fping -l/-Q prints "[12:00:00]" time-of-day lines before each interim summary.
bool is_time_of_day_line(std::string_view body) {
  return body.size() >= 10 && body[0] == '[' && is_digit(body[1]) && is_digit(body[2]) &&
         body[3] == ':' && body[6] == ':' && body[9] == ']';
}

class FpingParser final : public LineParser {
 public:
  explicit FpingParser(ParseContext& context)
      : context_(context),
        series_(context, SeriesRules{0, std::chrono::seconds{1}, kTypicalFpingLineBytes}),
        host_(context.options.host) {
    series_.begin_session(0);  // fping numbers its probes [0], [1], ...
  }

  void line(std::string_view text, std::uint64_t number) override;
  void finish() override;

 private:
  bool keep(std::string_view host);
  void probe(std::string_view text, std::size_t at, const StampedLine& stamped,
             std::uint64_t number, bool duplicate);
  void list(std::string_view text, std::size_t at, std::uint64_t number);

  ParseContext& context_;
  SeriesBuilder series_;
  std::string host_;
  bool probe_lines_ = false;  // the kept target had per-probe lines (then its -C list repeats them)
  bool summaries_only_ = false;  // xmt/rcv/%loss lines without per-probe lines (-q, -Q)
  std::map<std::string, std::size_t, std::less<>> other_targets_;
  std::size_t other_lines_ = 0;
};

void FpingParser::line(std::string_view text, std::uint64_t number) {
  const StampedLine stamped = strip_timestamp_prefixes(text, context_.options.utc_offset);
  const std::size_t at = stamped.body_offset;
  const std::string_view body = text.substr(at);
  const std::string_view trimmed = trim(body);
  if (trimmed.empty()) return;
  if (starts_with(body, "fping: ") || is_time_of_day_line(body) || starts_with(trimmed, "ICMP ")) {
    // fping's own messages; ICMP errors ("ICMP Host Unreachable from 10.0.0.1 for ICMP Echo sent
    // to 10.0.0.9") name no probe index: the probe times out later and is counted then.
    if (starts_with(trimmed, "ICMP ")) ++context_.trace.icmp_errors;
    return;
  }
  const std::size_t separator = body.find(" : ");
  if (separator == std::string_view::npos) {
    // -s statistics, indented ("       5 ICMP Echos sent", " 0.05 ms (min round trip time)"),
    // and the default mode's verdicts ("127.0.0.1 is alive (0.05 ms)").
    if (is_blank(body.front()) && is_digit(trimmed.front())) return;
    if (const std::size_t alive = body.find(" is alive"); alive != std::string_view::npos) {
      if (!keep(trim(body.substr(0, alive)))) return;
      const std::size_t open = body.find('(', alive);
      if (open == std::string_view::npos) return;  // without -e fping prints no time
      const auto rtt = scan_rtt_ms(body.substr(open + 1));
      Observation observation;
      if (!rtt || !starts_with(body.substr(open + 1 + rtt->length), " ms)")) {
        context_.unreadable(
            number, at + open + 1,
            "expected \"(<ms> ms)\" with an RTT up to 24 h" + std::string(kReplyLeftOut));
        observation.unreadable = true;
        series_.observe(observation, number);
        return;
      }
      observation.rtt = Nanoseconds{rtt->value};
      if (stamped.stamp) {
        observation.send_time = *stamped.stamp - *observation.rtt;
        observation.time_resolution = stamped.resolution;
      }
      series_.observe(observation, number);
      return;
    }
    if (const std::size_t unreachable = body.find(" is unreachable");
        unreachable != std::string_view::npos) {
      if (!keep(trim(body.substr(0, unreachable)))) return;
      Observation observation;
      observation.hint = stamped.stamp;
      series_.observe(observation, number);
      return;
    }
    if (body.find(" address not found") != std::string_view::npos) return;
    context_.unrecognised(number, text, "fping line");
    return;
  }
  if (!keep(trim(body.substr(0, separator)))) return;
  const std::size_t rest_at = at + separator + 3;
  const std::string_view rest = text.substr(rest_at);
  if (starts_with(rest, "[")) {
    probe(text, rest_at + 1, stamped, number, false);
  } else if (starts_with(rest, "duplicate for [")) {
    probe(text, rest_at + 15, stamped, number, true);
  } else if (starts_with(rest, "xmt/rcv/%loss = ")) {
    const auto sent = scan_unsigned(rest.substr(16));
    if (!sent) {
      context_.malformed(number, rest_at + 17,
                         "expected \"xmt/rcv/%loss = <sent>/<received>/<loss>%\"");
      return;
    }
    // The final -c summary places the probes lost at the end; -Q/-q print only summaries (every
    // -Q seconds, of that period): no probe to place.
    if (probe_lines_) {
      series_.end_session(static_cast<std::uint64_t>(sent->value), number);
    } else {
      summaries_only_ = true;
    }
  } else {
    list(text, rest_at, number);
  }
}

bool FpingParser::keep(std::string_view host) {
  if (host_.empty()) host_ = std::string(host);
  if (host == host_) {
    if (context_.trace.host.empty()) context_.trace.host = host_;
    return true;
  }
  ++other_lines_;
  if (const auto found = other_targets_.find(host); found != other_targets_.end()) {
    ++found->second;
  } else if (other_targets_.size() < kMaxNamedOtherTargets) {
    other_targets_.emplace(std::string(host), 1);
  }
  return false;
}

void FpingParser::probe(std::string_view text, std::size_t index_at, const StampedLine& stamped,
                        std::uint64_t number, bool duplicate) {
  // "[3], 64 bytes, 0.05 ms (...)" or "[3], timed out (...)"; index_at is just past '['.
  const auto index = scan_unsigned(text.substr(index_at));
  if (!index || !starts_with(text.substr(index_at + index->length), "], ")) {
    if (text.find("timed out", index_at) != std::string_view::npos) {
      context_.malformed(number, index_at + 1, "expected \"[<probe>], \"");
      return;  // a loss line whose probe cannot be told: its probe stays a gap, i.e. lost
    }
    context_.unreadable(number, index_at + 1,
                        "expected \"[<probe>], \"" + std::string(kReplyLeftOut));
    if (!duplicate) series_.unplaced_reply();
    return;
  }
  const std::size_t after = index_at + index->length + 3;
  Observation observation;
  observation.seq = static_cast<std::uint64_t>(index->value);
  observation.duplicate = duplicate;
  probe_lines_ = true;
  if (starts_with(text.substr(after), "timed out")) {
    observation.hint =
        stamped.stamp;  // printed when fping gave up (-t after the probe): a bound only
    series_.observe(observation, number);
    return;
  }
  // "<n> bytes, <ms> ms"
  // Not "timed out": a reply, whose values may still be unreadable (then neither delivered nor
  // lost).
  const auto bytes = scan_unsigned(text.substr(after));
  if (!bytes || !starts_with(text.substr(after + bytes->length), " bytes, ")) {
    context_.unreadable(
        number, after + 1,
        "expected \"<n> bytes, <ms> ms\" or \"timed out\"" + std::string(kReplyLeftOut));
    observation.unreadable = true;
    series_.observe(observation, number);
    return;
  }
  const std::size_t rtt_at = after + bytes->length + 8;
  const auto rtt = scan_rtt_ms(text.substr(rtt_at));
  if (!rtt || !starts_with(text.substr(rtt_at + rtt->length), " ms")) {
    context_.unreadable(number, rtt_at + 1,
                        "expected \"<ms> ms\" with an RTT up to 24 h" + std::string(kReplyLeftOut));
    observation.unreadable = true;
    series_.observe(observation, number);
    return;
  }
  observation.rtt = Nanoseconds{rtt->value};
  if (stamped.stamp) {
    observation.send_time = *stamped.stamp - *observation.rtt;
    observation.time_resolution = stamped.resolution;
  }  // stamped on reception
  series_.observe(observation, number);
}

void FpingParser::list(std::string_view text, std::size_t at, std::uint64_t number) {
  // -C: one RTT per probe in probe order, "-" for a lost one. When per-probe lines were read
  // already the list repeats them: recognised, not counted twice.
  std::size_t position = at;
  std::uint64_t probe = 0;
  const bool take = !probe_lines_;
  bool line_reported = false;
  while (position < text.size()) {
    while (position < text.size() && is_blank(text[position])) ++position;
    if (position >= text.size()) break;
    std::size_t end = position;
    while (end < text.size() && !is_blank(text[end])) ++end;
    const std::string_view token = text.substr(position, end - position);
    Observation observation;
    observation.seq = probe;
    if (token != "-") {
      const auto rtt = scan_rtt_ms(token);
      if (!rtt || rtt->length != token.size()) {
        // One unreadable entry: its probe is left out; the entries after it keep their places.
        // The line counts once in unrecognised_lines, each entry in unreadable_records.
        const std::string message = "expected \"<ms>\" up to 24 h or \"-\" (fping -C list)" +
                                    std::string(take ? kReplyLeftOut : "");
        if (std::exchange(line_reported, true)) {
          context_.diagnostics.at(number, position + 1, message);
        } else {
          context_.malformed(number, position + 1, message);
        }
        if (take) ++context_.trace.unreadable_records;
        observation.unreadable = true;
      } else {
        observation.rtt = Nanoseconds{rtt->value};
      }
    }
    if (take) series_.observe(observation, number);
    ++probe;
    position = end;
  }
}

void FpingParser::finish() {
  if (other_lines_ > 0) {
    std::string names;
    for (const auto& [name, lines] : other_targets_) {
      if (!names.empty()) names += ", ";
      names += name + " (" + std::to_string(lines) + (lines == 1 ? " line)" : " lines)");
    }
    if (other_targets_.size() == kMaxNamedOtherTargets) names += ", ...";
    context_.diagnostics.general("fping output for several targets: kept " + host_ + "; ignored " +
                                 names + "; choose the target with jitterctl compile --host");
  }
  if (summaries_only_ && context_.trace.samples.empty()) {
    context_.diagnostics.general(
        "only fping summaries (-q or -Q): no per-probe RTTs; capture with -C <count> or -c/-l "
        "without -q");
  }
  series_.finish();
}

}  // namespace

std::unique_ptr<LineParser> make_fping_parser(ParseContext& context) {
  return std::make_unique<FpingParser>(context);
}

}  // namespace shaper::trace_detail
