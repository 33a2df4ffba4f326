// Column captures written by scripts and other tools.
//
// epoch-rtt: "<epoch seconds> <rtt ms>" separated by blanks, one probe per line, in probe order.
//   1732971234.123456 12.3
//   1732971235.123456 -1          lost (so are "-", "nan", "lost", "timeout" and a missing RTT)
//   # comments and blank lines are skipped; one leading header line of words ("epoch rtt") too.
//
// csv: comma-, tab- or semicolon-separated, with a header naming the columns (kColumnNames below;
// case, spaces and parentheses ignored: "RTT (ms)" is rtt_ms). A column has a role (send time,
// RTT, sequence, lost flag) and a unit: seconds for plain time names (or ISO 8601), milliseconds
// for plain RTT names, other units by suffix (_ms, _us, _ns, _s). Other columns are ignored.
// Without a header, a row of two numbers is read as (time s, rtt ms). The names and units are
// tabled in docs/capture-formats.md.
#include <array>
#include <string>
#include <vector>

#include "trace_parser.hpp"
#include "trace_scan.hpp"
#include "trace_series.hpp"

namespace shaper::trace_detail {

namespace {

constexpr std::size_t kTypicalColumnLineBytes = 24;

// Words that mean "no reply" in an RTT field.
constexpr std::array<std::string_view, 8> kLostWords{"-1",  "-",    "nan",     "NaN",
                                                     "NAN", "lost", "timeout", "null"};

bool is_lost_word(std::string_view text) {
  if (text.empty() || text.size() > 7) return false;
  for (const std::string_view word : kLostWords) {
    if (text == word) return true;
  }
  return false;
}

std::optional<bool> parse_flag(std::string_view text) {
  std::string lower;
  for (const char c : trim(text)) {
    lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  for (const std::string_view yes : {"1", "true", "yes", "y", "t", "lost"}) {
    if (lower == yes) return true;
  }
  for (const std::string_view no : {"0", "false", "no", "n", "f", ""}) {
    if (lower == no) return false;
  }
  return std::nullopt;
}

enum class Role { kTime, kRtt, kSeq, kLost };

struct ColumnName {
  std::string_view name;
  Role role;
  int scale;  // decimal digits from the column's unit to nanoseconds: s 9, ms 6, us 3, ns 0
};

constexpr std::array<ColumnName, 61> kColumnNames{{
    {"time", Role::kTime, 9},
    {"timestamp", Role::kTime, 9},
    {"epoch", Role::kTime, 9},
    {"ts", Role::kTime, 9},
    {"unix_time", Role::kTime, 9},
    {"unixtime", Role::kTime, 9},
    {"datetime", Role::kTime, 9},
    {"date_time", Role::kTime, 9},
    {"send_time", Role::kTime, 9},
    {"sent_at", Role::kTime, 9},
    {"time_s", Role::kTime, 9},
    {"timestamp_s", Role::kTime, 9},
    {"epoch_s", Role::kTime, 9},
    {"unix_time_s", Role::kTime, 9},
    {"timestamp_ms", Role::kTime, 6},
    {"epoch_ms", Role::kTime, 6},
    {"unix_time_ms", Role::kTime, 6},
    {"send_time_ms", Role::kTime, 6},
    {"timestamp_us", Role::kTime, 3},
    {"epoch_us", Role::kTime, 3},
    {"send_time_us", Role::kTime, 3},
    {"timestamp_ns", Role::kTime, 0},
    {"epoch_ns", Role::kTime, 0},
    {"send_time_ns", Role::kTime, 0},
    {"rtt", Role::kRtt, 6},
    {"rtt_ms", Role::kRtt, 6},
    {"latency", Role::kRtt, 6},
    {"latency_ms", Role::kRtt, 6},
    {"time_ms", Role::kRtt, 6},
    {"delay", Role::kRtt, 6},
    {"delay_ms", Role::kRtt, 6},
    {"ping", Role::kRtt, 6},
    {"ping_ms", Role::kRtt, 6},
    {"ms", Role::kRtt, 6},
    {"rtt_us", Role::kRtt, 3},
    {"latency_us", Role::kRtt, 3},
    {"delay_us", Role::kRtt, 3},
    {"time_us", Role::kRtt, 3},
    {"rtt_s", Role::kRtt, 9},
    {"latency_s", Role::kRtt, 9},
    {"delay_s", Role::kRtt, 9},
    {"rtt_ns", Role::kRtt, 0},
    {"latency_ns", Role::kRtt, 0},
    {"delay_ns", Role::kRtt, 0},
    {"seq", Role::kSeq, 0},
    {"icmp_seq", Role::kSeq, 0},
    {"sequence", Role::kSeq, 0},
    {"seq_no", Role::kSeq, 0},
    {"seqno", Role::kSeq, 0},
    {"seq_num", Role::kSeq, 0},
    {"sequence_number", Role::kSeq, 0},
    {"lost", Role::kLost, 0},
    {"loss", Role::kLost, 0},
    {"is_lost", Role::kLost, 0},
    {"dropped", Role::kLost, 0},
    {"timeout", Role::kLost, 0},
    {"timed_out", Role::kLost, 0},
    {"rtt_msec", Role::kRtt, 6},
    {"latency_msec", Role::kRtt, 6},
    {"time_msec", Role::kRtt, 6},
    {"unix_ms", Role::kTime, 6},
}};

// "RTT (ms)" -> "rtt_ms", "\"Time\"" -> "time".
std::string normalise_name(std::string_view raw) {
  std::string name;
  for (const char c : trim(raw)) {
    if (c == '"' || c == '\'' || c == '(' || c == ')' || c == '[' || c == ']') continue;
    char lower = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    if (lower == ' ' || lower == '-' || lower == '.') lower = '_';
    if (lower == '_' && (name.empty() || name.back() == '_')) continue;
    name += lower;
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name;
}

std::optional<ColumnName> column_named(std::string_view raw) {
  const std::string name = normalise_name(raw);
  for (const auto& known : kColumnNames) {
    if (known.name == name) return known;
  }
  return std::nullopt;
}

struct Field {
  std::size_t at;  // offset in the line
  std::string_view text;
};

// Splits on `separator` into `fields` (cleared first; reused so that rows cost no allocation); a
// field in double quotes may hold the separator ("" is a quote). Quoted fields are returned without
// their quotes (escaped quotes stay doubled: no column we read contains one).
void split_fields(std::string_view line, char separator, std::vector<Field>& fields) {
  fields.clear();
  std::size_t position = 0;
  while (true) {
    std::size_t begin = position;
    while (begin < line.size() && is_blank(line[begin]) && line[begin] != separator) ++begin;
    if (begin < line.size() && line[begin] == '"') {
      std::size_t end = begin + 1;
      while (end < line.size()) {
        if (line[end] == '"' && end + 1 < line.size() && line[end + 1] == '"') {
          end += 2;
        } else if (line[end] == '"') {
          break;
        } else {
          ++end;
        }
      }
      fields.push_back(Field{begin + 1, line.substr(begin + 1, end - begin - 1)});
      const std::size_t next = line.find(separator, end);
      if (next == std::string_view::npos) break;
      position = next + 1;
      continue;
    }
    const std::size_t next = line.find(separator, position);
    const std::size_t end = next == std::string_view::npos ? line.size() : next;
    const std::string_view raw = line.substr(position, end - position);
    const std::string_view text = trim(raw);
    fields.push_back(Field{position + static_cast<std::size_t>(text.data() - raw.data()), text});
    if (next == std::string_view::npos) break;
    position = next + 1;
  }
}

std::vector<Field> split_fields(std::string_view line, char separator) {
  std::vector<Field> fields;
  split_fields(line, separator, fields);
  return fields;
}

char separator_of(std::string_view header) {
  if (header.find('\t') != std::string_view::npos) return '\t';
  if (header.find(',') != std::string_view::npos) return ',';
  if (header.find(';') != std::string_view::npos) return ';';
  return ',';
}

// An RTT column's value in 10^-scale seconds (either decimal mark: in a comma-separated row a comma
// can only be inside quotes), from 0 to kMaxMeasuredRtt.
std::optional<Nanoseconds> parse_rtt(std::string_view text, int scale) {
  const auto value = parse_fixed(text, scale, DecimalMark::kPointOrComma);
  if (!value || *value < 0 || Nanoseconds{*value} > kMaxMeasuredRtt) return std::nullopt;
  return Nanoseconds{*value};
}

bool is_comment_or_blank(std::string_view line) {
  const std::string_view trimmed = trim(line);
  return trimmed.empty() || trimmed.front() == '#';
}

// --- epoch-rtt -----------------------------------------------------------------------------------

class EpochRttParser final : public LineParser {
 public:
  explicit EpochRttParser(ParseContext& context)
      : context_(context),
        series_(context, SeriesRules{0, std::chrono::seconds{1}, kTypicalColumnLineBytes}) {}

  void line(std::string_view text, std::uint64_t number) override {
    if (is_comment_or_blank(text)) return;
    // At most three fields matter (the third is an error): no allocation per line.
    std::array<Field, 3> fields{};
    std::size_t count = 0;
    std::size_t position = 0;
    while (position < text.size() && count < fields.size()) {
      while (position < text.size() && is_blank(text[position])) ++position;
      if (position >= text.size()) break;
      std::size_t end = position;
      while (end < text.size() && !is_blank(text[end])) ++end;
      fields[count++] = Field{position, text.substr(position, end - position)};
      position = end;
    }
    const auto epoch = parse_fixed(fields[0].text, 9, DecimalMark::kPointOrComma);
    if (!epoch || *epoch < 0) {
      const char first = fields[0].text.front();
      if (!seen_row_ && ((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z'))) {
        seen_row_ = true;  // a header of words: "epoch rtt_ms"
        return;
      }
      // A row without a readable send time: no probe number either, so leaving it out moves no
      // other probe.
      context_.unreadable(number, fields[0].at + 1,
                          "expected \"<epoch seconds> <rtt ms>\"" + std::string(kReplyLeftOut));
      return;
    }
    seen_row_ = true;
    if (count == 3) {
      context_.malformed(number, fields[2].at + 1,
                         "expected two columns, \"<epoch seconds> <rtt ms>\"");
      return;
    }
    Observation observation;
    observation.send_time = Nanoseconds{*epoch};
    if (count >= 2 && !is_lost_word(fields[1].text)) {
      const auto rtt = parse_rtt(fields[1].text, 6);
      if (!rtt) {
        context_.unreadable(number, fields[1].at + 1,
                            "expected an RTT in ms (0 to 24 h), or -1 for a lost probe" +
                                std::string(kReplyLeftOut));
        observation.unreadable = true;
      } else {
        observation.rtt = *rtt;
      }
    }
    series_.observe(observation, number);
  }

  void finish() override { series_.finish(); }

 private:
  ParseContext& context_;
  SeriesBuilder series_;
  bool seen_row_ = false;
};

// --- csv ---------------------------------------------------------------------------------------

class CsvParser final : public LineParser {
 public:
  explicit CsvParser(ParseContext& context)
      : context_(context),
        series_(context, SeriesRules{0, std::chrono::seconds{1}, kTypicalColumnLineBytes}) {}

  void line(std::string_view text, std::uint64_t number) override {
    if (is_comment_or_blank(text)) return;
    if (!header_done_) {
      header_done_ = true;
      separator_ = separator_of(text);
      if (header(text, number)) return;
    }
    if (!rtt_) {
      ++context_.trace.unrecognised_lines;  // the header diagnostic explains why
      return;
    }
    row(text, number);
  }

  void finish() override { series_.finish(); }

 private:
  struct Bound {
    std::size_t index;
    int scale;
    std::string name;
  };

  // Reads the header; false when the line is data (no header: columns assumed).
  bool header(std::string_view text, std::uint64_t number) {
    const std::vector<Field> fields = split_fields(text, separator_);
    bool any_known = false;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const auto column = column_named(fields[i].text);
      if (!column) continue;
      any_known = true;
      Bound bound{i, column->scale, std::string(trim(fields[i].text))};
      std::optional<Bound>* slot = column->role == Role::kTime  ? &time_
                                   : column->role == Role::kRtt ? &rtt_
                                   : column->role == Role::kSeq ? &seq_
                                                                : &lost_;
      if (!*slot) *slot = bound;
    }
    if (any_known) {
      if (!rtt_) {
        context_.malformed(number, 1,
                           "expected a column named rtt, rtt_ms, latency_ms or time_ms (RTT in "
                           "ms); no row can be read");
      }
      return true;
    }
    const bool numeric = !fields.empty() && !fields[0].text.empty() &&
                         (is_digit(fields[0].text.front()) || fields[0].text.front() == '.');
    if (!numeric) {
      context_.malformed(number, 1,
                         "expected a header naming the columns (time, rtt_ms, seq, lost); no row "
                         "can be read");
      return true;
    }
    if (fields.size() >= 2) {
      time_ = Bound{0, 9, "column 1"};
      rtt_ = Bound{1, 6, "column 2"};
      context_.diagnostics.at(number, 1,
                              "no header: reading column 1 as the send time (epoch seconds) and "
                              "column 2 as the RTT (ms)");
    } else {
      rtt_ = Bound{0, 6, "column 1"};
      context_.diagnostics.at(number, 1, "no header: reading column 1 as the RTT (ms)");
    }
    return false;
  }

  void row(std::string_view text, std::uint64_t number) {
    split_fields(text, separator_, fields_);
    const std::vector<Field>& fields = fields_;
    const auto field = [&](const std::optional<Bound>& bound) -> std::optional<Field> {
      if (!bound || bound->index >= fields.size()) return std::nullopt;
      return fields[bound->index];
    };
    // A row is one probe: a value that cannot be read makes it an unreadable record (reported,
    // neither delivered nor lost), never a gap in the sequence, which would be a loss.
    Observation observation;
    const auto unreadable = [&](std::size_t at, const std::string& expected) {
      context_.unreadable(number, at + 1, "expected " + expected + std::string(kReplyLeftOut));
      observation.unreadable = true;
    };
    if (const auto seq = field(seq_); seq && !seq->text.empty()) {
      const auto value = parse_unsigned(seq->text);
      if (!value) {
        unreadable(seq->at, seq_->name + " as a whole number");
        series_.unplaced_reply();
        return;
      }
      observation.seq = value;
    }
    if (const auto time = field(time_); time && !time->text.empty()) {
      std::optional<std::int64_t> ns =
          parse_fixed(time->text, time_->scale, DecimalMark::kPointOrComma);
      if (!ns && time_->scale == 9) {
        const auto civil = scan_civil_time(time->text, context_.options.utc_offset);
        if (civil && civil->length == time->text.size()) ns = civil->since_epoch.count();
      }
      if (ns) {
        observation.send_time = Nanoseconds{*ns};
      } else {
        unreadable(time->at, time_->name + " as " + unit_words(time_->scale, true));
      }
    }
    bool lost = false;
    if (const auto flag_field = field(lost_); flag_field && !observation.unreadable) {
      const auto flag = parse_flag(flag_field->text);
      if (flag) {
        lost = *flag;
      } else {
        unreadable(flag_field->at, lost_->name + " as 1/0, true/false or yes/no");
      }
    }
    const auto rtt = field(rtt_);
    if (!lost && !observation.unreadable && rtt && !rtt->text.empty() && !is_lost_word(rtt->text)) {
      if (const auto ns = parse_rtt(rtt->text, rtt_->scale)) {
        observation.rtt = *ns;
      } else {
        unreadable(rtt->at, rtt_->name + " as " + unit_words(rtt_->scale, false) +
                                " (0 to 24 h), or empty or -1 for a lost probe");
      }
    }
    series_.observe(observation, number);
  }

  static std::string unit_words(int scale, bool time) {
    const std::string unit = scale == 9   ? "seconds"
                             : scale == 6 ? "milliseconds"
                             : scale == 3 ? "microseconds"
                                          : "nanoseconds";
    return time ? unit + " since the epoch" + (scale == 9 ? " or an ISO 8601 time" : "") : unit;
  }

  ParseContext& context_;
  SeriesBuilder series_;
  bool header_done_ = false;
  char separator_ = ',';
  std::optional<Bound> time_, rtt_, seq_, lost_;
  std::vector<Field> fields_;  // of the current row
};

}  // namespace

bool looks_like_csv_header(std::string_view line) {
  const char separator = separator_of(line);
  if (line.find(separator) == std::string_view::npos && column_named(line) == std::nullopt) {
    return false;
  }
  for (const Field& field : split_fields(line, separator)) {
    if (const auto column = column_named(field.text); column && column->role == Role::kRtt) {
      return true;
    }
  }
  return false;
}

std::unique_ptr<LineParser> make_epoch_rtt_parser(ParseContext& context) {
  return std::make_unique<EpochRttParser>(context);
}

std::unique_ptr<LineParser> make_csv_parser(ParseContext& context) {
  return std::make_unique<CsvParser>(context);
}

}  // namespace shaper::trace_detail
