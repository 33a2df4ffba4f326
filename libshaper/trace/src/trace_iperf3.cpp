// iperf3 --json: the per-interval sums of a UDP test.
//
//   "intervals": [ { "streams": [...], "sum": { "start": 0, "end": 1.0001, "seconds": 1.0001,
//       "bytes": 250800, "bits_per_second": 2006243.6, "jitter_ms": 0.0107, "lost_packets": 0,
//       "packets": 209, "lost_percent": 0, "omitted": false, "sender": false } }, ... ]
//
// Only the receiving side measures jitter and loss: the client's own JSON has them with -R, the
// server's always. "sum" adds up the parallel streams (-P); --bidir's "sum_bidir_reverse" is not
// read.
#include <cmath>
#include <string>
#include <vector>

#include "trace_json.hpp"
#include "trace_parser.hpp"

namespace shaper::trace_detail {

namespace {

// Bounds that keep seconds and milliseconds well inside Nanoseconds: a test of a year, a jitter of
// a day. Beyond them a value is not an iperf3 measurement.
constexpr double kMaxTestSeconds = 365.0 * 86400.0;
constexpr double kMaxJitterMs = 86400e3;

enum Field : unsigned { kStart = 1, kEnd = 2 };

// iperf3 runs at most 86400 s (MAX_TIME) plus 600 s of -O (MAX_OMIT_TIME) at intervals of at least
// 0.1 s (MIN_INTERVAL): 870 000 intervals. Beyond 2^20 a document is not an iperf3 run, and reading
// on would let a few GB of JSON hold that many IntervalSummary values (issue 21: 3.25 GB RSS).
constexpr std::size_t kMaxIntervals = std::size_t{1} << 20;

// iperf3's "error" is one sentence; a longer one is quoted up to here in the diagnostic.
constexpr std::size_t kMaxQuotedErrorBytes = 512;

class Iperf3Visitor final : public JsonVisitor {
 public:
  explicit Iperf3Visitor(ParseContext& context) : context_(context), unreadable_(context.trace) {}

  bool scalar(JsonPath path, const JsonScalar& value) override {
    if (path.size() == 1 && path[0].is("error") && value.kind == JsonScalar::Kind::kString) {
      std::string text(value.string.substr(0, kMaxQuotedErrorBytes));
      if (value.string.size() > kMaxQuotedErrorBytes) text += "...";
      context_.diagnostics.at_pointer("/error", "iperf3 reported: " + text);
      return true;
    }
    if (path.size() == 3 && path[0].is("start") && path[1].is("test_start") &&
        path[2].is("protocol") && value.kind == JsonScalar::Kind::kString) {
      protocol_ = std::string(value.string);
      return true;
    }
    if (path.size() == 3 && path[0].is("start") && path[1].is("connecting_to") &&
        path[2].is("host") && value.kind == JsonScalar::Kind::kString) {
      context_.trace.host = std::string(value.string);
      return true;
    }
    if (path.size() != 4 || !path[0].is("intervals") || !path[1].is_index || !path[2].is("sum") ||
        path[3].is_index) {
      return true;
    }
    auto& intervals = context_.trace.intervals;
    const std::size_t index = path[1].index;
    if (index > intervals.size()) return true;  // cannot happen in JSON: indices grow one at a time
    if (index == kMaxIntervals) {
      context_.diagnostics.at_pointer(json_pointer(path.first(2)),
                                      "more than " + std::to_string(kMaxIntervals) +
                                          " intervals (iperf3 runs at most 86400 s at 0.1 s "
                                          "intervals); read the first " +
                                          std::to_string(kMaxIntervals));
      return false;
    }
    if (index == intervals.size()) {
      intervals.emplace_back();
      seen_.push_back(0);
    }
    IntervalSummary& interval = intervals[index];
    const std::string_view key = path[3].key;
    const auto bad = [&](std::string_view expected) {
      context_.diagnostics.at_pointer(
          json_pointer(path), "expected " + std::string(expected) + "; left out of this interval");
      unreadable_.mark(index);
      return true;
    };
    const auto number = value.as_number();
    if (key == "start" || key == "end") {
      if (!number || *number < 0 || *number > kMaxTestSeconds)
        return bad("seconds since the start");
      (key == "start" ? interval.start : interval.end) = Nanoseconds{std::llround(*number * 1e9)};
      seen_[index] |= key == "start" ? kStart : kEnd;
    } else if (key == "bytes") {
      const auto count = value.as_count();
      if (!count) return bad("a byte count");
      interval.bytes = *count;
    } else if (key == "jitter_ms") {
      if (!number || *number < 0 || *number > kMaxJitterMs) return bad("a jitter in ms");
      interval.jitter = Nanoseconds{std::llround(*number * 1e6)};
    } else if (key == "lost_packets" || key == "packets") {
      const auto count = value.as_count();
      if (!count) return bad("a packet count");
      (key == "packets" ? interval.packets : interval.lost_packets) = count;
    } else if (key == "lost_percent") {
      const auto lost = number ? Probability::make(*number / 100.0) : std::nullopt;
      if (!lost) return bad("a loss percentage from 0 to 100");
      interval.lost = lost;
    } else if (key == "omitted" || key == "sender") {
      if (value.kind != JsonScalar::Kind::kBool) return bad("true or false");
      (key == "omitted" ? interval.omitted : interval.sender) = value.boolean;
    }
    return true;
  }

  void finish() {
    const auto& intervals = context_.trace.intervals;
    for (std::size_t i = 0; i < intervals.size(); ++i) {
      if ((seen_[i] & (kStart | kEnd)) != (kStart | kEnd)) {
        context_.diagnostics.at_pointer("/intervals/" + std::to_string(i) + "/sum",
                                        "expected \"start\" and \"end\" (seconds)");
      }
    }
    if (!protocol_.empty() && protocol_ != "UDP") {
      context_.diagnostics.at_pointer(
          "/start/test_start/protocol",
          "a " + protocol_ + " test: its intervals have no jitter or loss (run iperf3 with -u)");
    } else if (!intervals.empty()) {
      bool any_jitter = false;
      for (const auto& interval : intervals) any_jitter = any_jitter || interval.jitter.has_value();
      if (!any_jitter) {
        context_.diagnostics.general(
            "these are the sender's intervals: they carry no jitter or loss; capture the "
            "receiver (iperf3 -R on the client, or the server's --json)");
      }
    }
  }

 private:
  ParseContext& context_;
  std::string protocol_;
  std::vector<unsigned> seen_;  // Field bits per interval
  UnreadableRecords unreadable_;
};

}  // namespace

void parse_iperf3_json(ChunkSource& source, std::string_view first, ParseContext& context) {
  Iperf3Visitor visitor(context);
  const bool ok = parse_json(source, first, context, visitor);
  context.trace.sessions = context.trace.intervals.empty() ? 0 : 1;
  if (!ok) return;
  visitor.finish();
  if (context.trace.intervals.empty()) {
    context.diagnostics.general("no intervals: \"intervals\" is missing or empty");
  }
}

}  // namespace shaper::trace_detail
