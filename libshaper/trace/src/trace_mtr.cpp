// mtr reports: per-hop summaries, never sample series.
//
// --report (text), new and old layouts, columns as the HOST: line names them (mtr -o can change
// them):
//   Start: 2024-11-30T12:00:00+0000
//   HOST: myhost                      Loss%   Snt   Last   Avg  Best  Wrst StDev
//     1.|-- 10.0.0.1                   0.0%    10    0.3   0.3   0.3   0.4   0.0     mtr >= 0.80
//     2. ???                          100.0    10    0.0   0.0   0.0   0.0   0.0     older
//       |  `|-- 10.0.0.2                                                           load balancing
// mtr writes each column at a fixed offset, so a value wider than its column loses its tail to
// the next one: "100.0%" loses the '%' (harmless), "3055.1" becomes "3055." (whole ms kept, with a
// diagnostic), "12345.6" becomes "12345" (digits may be gone: left out, with a diagnostic).
//
// --json: report.hubs[] with count, host, Loss%, Snt, Last, Avg, Best, Wrst, StDev (numbers, or
// strings in older mtr).
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "trace_json.hpp"
#include "trace_parser.hpp"
#include "trace_scan.hpp"

namespace shaper::trace_detail {

namespace {

enum class Column {
  kLoss,
  kDrop,
  kReceived,
  kSent,
  kLast,
  kBest,
  kAvg,
  kWorst,
  kStDev,
  kGmean,
  kJitter,
  kJitterAvg,
  kJitterMax,
  kJitterInterarrival
};

struct ColumnTitle {
  std::string_view title;
  Column column;
};

// mtr's data_fields titles (ui/mtr.c).
constexpr std::array<ColumnTitle, 14> kColumnTitles{{{"Loss%", Column::kLoss},
                                                     {"Drop", Column::kDrop},
                                                     {"Rcv", Column::kReceived},
                                                     {"Snt", Column::kSent},
                                                     {"Last", Column::kLast},
                                                     {"Best", Column::kBest},
                                                     {"Avg", Column::kAvg},
                                                     {"Wrst", Column::kWorst},
                                                     {"StDev", Column::kStDev},
                                                     {"Gmean", Column::kGmean},
                                                     {"Jttr", Column::kJitter},
                                                     {"Javg", Column::kJitterAvg},
                                                     {"Jmax", Column::kJitterMax},
                                                     {"Jint", Column::kJitterInterarrival}}};

// mtr's default columns, for hop lines that come without a HOST: line.
const std::vector<Column> kDefaultColumns{Column::kLoss, Column::kSent, Column::kLast,
                                          Column::kAvg,  Column::kBest, Column::kWorst,
                                          Column::kStDev};

std::optional<Column> column_named(std::string_view title) {
  for (const auto& known : kColumnTitles) {
    if (known.title == title) return known.column;
  }
  return std::nullopt;
}

std::string_view title_of(Column column) {
  for (const auto& known : kColumnTitles) {
    if (known.column == column) return known.title;
  }
  return "?";
}

std::optional<Nanoseconds>* time_field(HopSummary& hop, Column column) {
  switch (column) {
    case Column::kLast:
      return &hop.last;
    case Column::kBest:
      return &hop.best;
    case Column::kAvg:
      return &hop.avg;
    case Column::kWorst:
      return &hop.worst;
    case Column::kStDev:
      return &hop.stdev;
    case Column::kGmean:
      return &hop.geometric_mean;
    case Column::kJitter:
      return &hop.jitter;
    case Column::kJitterAvg:
      return &hop.jitter_avg;
    case Column::kJitterMax:
      return &hop.jitter_max;
    case Column::kJitterInterarrival:
      return &hop.jitter_interarrival;
    default:
      return nullptr;
  }
}

std::optional<std::uint64_t>* count_field(HopSummary& hop, Column column) {
  switch (column) {
    case Column::kDrop:
      return &hop.dropped;
    case Column::kReceived:
      return &hop.received;
    case Column::kSent:
      return &hop.sent;
    default:
      return nullptr;
  }
}

// "AS15169" or "AS???" (mtr -z): the first word of the host field.
bool is_asn(std::string_view word) {
  if (word.size() < 3 || word.substr(0, 2) != "AS") return false;
  const std::string_view rest = word.substr(2);
  if (rest == "???") return true;
  for (const char c : rest) {
    if (!is_digit(c)) return false;
  }
  return true;
}

struct Token {
  std::size_t at;  // offset in the line
  std::string_view text;
};

std::vector<Token> tokens_of(std::string_view text, std::size_t from) {
  std::vector<Token> tokens;
  std::size_t position = from;
  while (position < text.size()) {
    while (position < text.size() && is_blank(text[position])) ++position;
    if (position >= text.size()) break;
    std::size_t end = position;
    while (end < text.size() && !is_blank(text[end])) ++end;
    tokens.push_back(Token{position, text.substr(position, end - position)});
    position = end;
  }
  return tokens;
}

class MtrReportParser final : public LineParser {
 public:
  explicit MtrReportParser(ParseContext& context) : context_(context) {}

  void line(std::string_view text, std::uint64_t number) override;
  void finish() override;

 private:
  void header(std::string_view text, std::size_t at, std::uint64_t number);
  void hop(std::string_view text, std::size_t at, std::uint64_t number);
  void start_report();

  ParseContext& context_;
  std::vector<Column> columns_ = kDefaultColumns;
  std::size_t reports_ = 0;     // reports begun ("Start:" or "HOST:")
  bool start_pending_ = false;  // a "Start:" line opened a report whose HOST: line is next
};

void MtrReportParser::start_report() {
  ++reports_;
}

void MtrReportParser::line(std::string_view text, std::uint64_t number) {
  const std::string_view trimmed = trim(text);
  if (trimmed.empty()) return;
  const std::size_t at = static_cast<std::size_t>(trimmed.data() - text.data());
  if (starts_with(trimmed, "Start:")) {
    start_report();
    start_pending_ = true;
    return;
  }
  if (starts_with(trimmed, "HOST:")) {
    if (!start_pending_) start_report();
    start_pending_ = false;
    header(text, at, number);
    return;
  }
  if (starts_with(trimmed, "mtr: ") || starts_with(trimmed, "[MPLS")) return;
  if (trimmed.front() == '|') {
    // "|  `|-- 10.0.0.2" / "|   |-- 10.0.0.3": another address at the previous hop's TTL;
    // "|  |+-- [MPLS: ...]" / "|   +-- [MPLS: ...]": labels, not kept.
    const std::size_t branch = trimmed.find("|-- ");
    if (trimmed.find("[MPLS") != std::string_view::npos) return;
    if (branch != std::string_view::npos && !context_.trace.hops.empty()) {
      context_.trace.hops.back().other_hosts.emplace_back(trim(trimmed.substr(branch + 4)));
      return;
    }
  }
  if (is_digit(trimmed.front())) {
    hop(text, at, number);
    return;
  }
  if (const std::vector<Token> words = tokens_of(trimmed, 0);
      words.size() == 2 && is_asn(words[0].text) && !context_.trace.hops.empty()) {
    // mtr -z: a further address at the previous hop's TTL is "AS64500  203.0.113.5".
    context_.trace.hops.back().other_hosts.emplace_back(words[1].text);
    return;
  }
  context_.unrecognised(number, text, "mtr report line");
}

void MtrReportParser::header(std::string_view text, std::size_t at, std::uint64_t number) {
  // "HOST: <local host name>  <titles...>": the titles are the trailing known words.
  const std::vector<Token> tokens = tokens_of(text, at + 5);
  std::size_t first_title = tokens.size();
  while (first_title > 0 && column_named(tokens[first_title - 1].text)) --first_title;
  if (first_title == tokens.size()) {
    context_.malformed(number, text.size() + 1,
                       "expected column titles after the host name (Loss% Snt Last Avg Best "
                       "Wrst StDev)");
    return;
  }
  columns_.clear();
  for (std::size_t i = first_title; i < tokens.size(); ++i)
    columns_.push_back(*column_named(tokens[i].text));
}

void MtrReportParser::hop(std::string_view text, std::size_t at, std::uint64_t number) {
  // "<n>.|-- <host> <values...>" or "<n>. <host> <values...>"
  const auto ttl = scan_unsigned(text.substr(at));
  std::size_t position = at + (ttl ? ttl->length : 0);
  if (!ttl || position >= text.size() || text[position] != '.') {
    context_.unrecognised(number, text, "mtr report line");
    return;
  }
  ++position;
  if (starts_with(text.substr(position), "|--")) position += 3;
  const std::vector<Token> tokens = tokens_of(text, position);
  const std::size_t values = columns_.size();
  if (tokens.size() < values + 1) {
    std::string titles;
    for (const Column column : columns_) {
      if (!titles.empty()) titles += ' ';
      titles += title_of(column);
    }
    context_.malformed(
        number, text.size() + 1,
        "expected a host and " + std::to_string(values) + " values (" + titles + ")");
    return;
  }
  if (reports_ == 0) start_report();

  HopSummary summary;
  summary.hop = static_cast<std::size_t>(ttl->value);
  summary.report = reports_ - 1;
  const std::size_t host_tokens = tokens.size() - values;
  std::size_t host_begin = 0;
  if (host_tokens >= 2 && is_asn(tokens[0].text)) {
    summary.asn = std::string(tokens[0].text);
    host_begin = 1;
  }
  const Token& last_host_token = tokens[host_tokens - 1];
  summary.host = std::string(
      text.substr(tokens[host_begin].at,
                  last_host_token.at + last_host_token.text.size() - tokens[host_begin].at));

  // A value that cannot be read is left out of the hop (nullopt, as a column mtr did not print),
  // never the hop itself: the hops after it keep their places and a missing Loss% is not 100 %.
  bool unreadable = false;
  const auto bad_value = [&](std::size_t column_number, const std::string& message) {
    context_.diagnostics.at(number, column_number, message + "; left out of this hop");
    unreadable = true;
  };
  for (std::size_t i = 0; i < values; ++i) {
    const Token& token = tokens[host_tokens + i];
    const Column column = columns_[i];
    const std::size_t column_number = token.at + 1;
    if (column == Column::kLoss) {
      std::string_view percent = token.text;
      if (!percent.empty() && percent.back() == '%') percent.remove_suffix(1);
      // Percent with up to 6 decimals, in millionths: "1,5" under a decimal-comma locale too.
      const auto millionths = parse_fixed(percent, 6, DecimalMark::kPointOrComma);
      const auto loss =
          millionths ? Probability::make(static_cast<double>(*millionths) / 1e8) : std::nullopt;
      if (!loss) {
        bad_value(column_number, "expected Loss% from 0 to 100");
        continue;
      }
      summary.loss = loss;
    } else if (auto* count = count_field(summary, column)) {
      const auto value = parse_unsigned(token.text);
      if (!value) {
        bad_value(column_number,
                  "expected " + std::string(title_of(column)) + " as a count of probes");
        continue;
      }
      *count = value;
    } else if (auto* time = time_field(summary, column)) {
      std::string_view digits = token.text;
      const bool cut_decimal = digits.size() > 1 && (digits.back() == '.' || digits.back() == ',');
      if (cut_decimal) digits.remove_suffix(1);
      const auto ns = parse_fixed(digits, 6, DecimalMark::kPointOrComma);
      if (!ns || *ns < 0 || Nanoseconds{*ns} > kMaxMeasuredRtt) {
        bad_value(column_number,
                  "expected " + std::string(title_of(column)) + " in ms (\"12.3\") up to 24 h");
        continue;
      }
      const std::string title(title_of(column));
      if (cut_decimal) {
        // "3055.": the decimal was overwritten, the whole milliseconds are all there.
        context_.diagnostics.at(number, column_number,
                                title + " \"" + std::string(token.text) +
                                    "\" lost its decimal to mtr's column width; read as whole ms");
      } else if (token.text.find_first_of(".,") == std::string_view::npos && i + 1 < values) {
        // No decimal point left: the next column overwrote an unknown number of digits.
        context_.diagnostics.at(number, column_number,
                                title + " \"" + std::string(token.text) +
                                    "\" is wider than mtr's column and was cut by the next one; "
                                    "left out (mtr --json has the whole value)");
        continue;
      }
      *time = Nanoseconds{*ns};
    }
  }
  if (unreadable) ++context_.trace.unreadable_records;
  context_.trace.hops.push_back(std::move(summary));
}

void MtrReportParser::finish() {
  context_.trace.sessions = context_.trace.hops.empty() ? 0 : reports_;
  if (context_.trace.hops.empty()) context_.diagnostics.general("no hop lines in this mtr report");
}

// --json ---------------------------------------------------------------------------------------

Nanoseconds from_ms(double ms) {
  return Nanoseconds{std::llround(ms * 1e6)};
}

// A time in ms that fits Nanoseconds with room to spare (a day, kMaxMeasuredRtt).
constexpr double kMaxHopMs = 86400e3;

// mtr probes at most 255 TTLs (its MaxHost - 1): more hubs is not an mtr report, and reading them
// all would let a document of a few GB hold that many HopSummary values.
constexpr std::size_t kMaxJsonHops = 256;

class MtrJsonVisitor final : public JsonVisitor {
 public:
  explicit MtrJsonVisitor(ParseContext& context) : context_(context), unreadable_(context.trace) {}

  bool scalar(JsonPath path, const JsonScalar& value) override {
    if (path.size() == 3 && path[0].is("report") && path[1].is("mtr") && path[2].is("dst") &&
        value.kind == JsonScalar::Kind::kString) {
      context_.trace.host = std::string(value.string);
      return true;
    }
    if (path.size() != 4 || !path[0].is("report") || !path[1].is("hubs") || !path[2].is_index ||
        path[3].is_index) {
      return true;
    }
    auto& hops = context_.trace.hops;
    const std::size_t index = path[2].index;
    if (index > hops.size()) return true;  // cannot happen in JSON: indices grow one at a time
    if (index == kMaxJsonHops) {
      context_.diagnostics.at_pointer(json_pointer(path.first(3)),
                                      "more than " + std::to_string(kMaxJsonHops) +
                                          " hubs (mtr probes at most 255 TTLs); read the first " +
                                          std::to_string(kMaxJsonHops));
      return false;
    }
    if (index == hops.size()) {
      hops.emplace_back();
      hops.back().hop = index + 1;
    }
    HopSummary& hop = hops[index];
    const std::string_view key = path[3].key;
    const auto bad = [&](std::string_view expected) {
      context_.diagnostics.at_pointer(
          json_pointer(path), "expected " + std::string(expected) + "; left out of this hop");
      unreadable_.mark(index);
      return true;
    };
    if (key == "host") {
      if (value.kind != JsonScalar::Kind::kString) return bad("a string");
      hop.host = std::string(value.string);
    } else if (key == "ASN") {
      if (value.kind == JsonScalar::Kind::kString) hop.asn = std::string(value.string);
    } else if (key == "count") {
      const auto count = value.as_count();
      if (!count || *count == 0) return bad("the hop number (1, 2, ...)");
      hop.hop = static_cast<std::size_t>(*count);
    } else if (key == "Loss%") {
      const auto percent = value.as_number();
      const auto loss = percent ? Probability::make(*percent / 100.0) : std::nullopt;
      if (!loss) return bad("a loss percentage from 0 to 100");
      hop.loss = loss;
    } else if (const auto column = column_named(key)) {
      if (auto* count = count_field(hop, *column)) {
        const auto value_count = value.as_count();
        if (!value_count) return bad("a count of probes");
        *count = value_count;
      } else if (auto* time = time_field(hop, *column)) {
        const auto ms = value.as_number();
        if (!ms || *ms < 0 || *ms > kMaxHopMs) return bad("a time in ms up to 24 h");
        *time = from_ms(*ms);
      }
    }
    return true;
  }

 private:
  ParseContext& context_;
  UnreadableRecords unreadable_;
};

}  // namespace

std::unique_ptr<LineParser> make_mtr_report_parser(ParseContext& context) {
  return std::make_unique<MtrReportParser>(context);
}

void parse_mtr_json(ChunkSource& source, std::string_view first, ParseContext& context) {
  MtrJsonVisitor visitor(context);
  const bool ok = parse_json(source, first, context, visitor);
  context.trace.sessions = context.trace.hops.empty() ? 0 : 1;
  if (ok && context.trace.hops.empty()) {
    context.diagnostics.general("no hops: report.hubs is missing or empty");
  }
}

}  // namespace shaper::trace_detail
