#include "trace_scan.hpp"

#include <charconv>
#include <cmath>
#include <limits>

namespace shaper::trace_detail {

namespace {

constexpr std::int64_t kPow10[] = {1,
                                   10,
                                   100,
                                   1000,
                                   10000,
                                   100000,
                                   1000000,
                                   10000000,
                                   100000000,
                                   1000000000,
                                   10000000000,
                                   100000000000,
                                   1000000000000,
                                   10000000000000,
                                   100000000000000,
                                   1000000000000000,
                                   10000000000000000,
                                   100000000000000000,
                                   1000000000000000000};

// Exactly `count` digits at text[at...]; -1 when they are not all digits.
int fixed_digits(std::string_view text, std::size_t at, std::size_t count) {
  if (at + count > text.size()) return -1;
  int value = 0;
  for (std::size_t i = at; i < at + count; ++i) {
    if (!is_digit(text[i])) return -1;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

// The years a capture can carry. Outside them int64 nanoseconds since 1970 would be close to
// overflowing (they span 1678..2262), and no capture is that old or that new.
constexpr int kFirstYear = 1900;
constexpr int kLastYear = 2200;

// Plausible epoch seconds in a stamp have 9 or 10 integer digits (1973..2286): fewer would make
// "64 bytes from" or a time of day look like a stamp.
constexpr std::size_t kMinEpochDigits = 9;
constexpr std::size_t kMaxEpochDigits = 10;

std::optional<Scanned> scan_epoch(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && is_digit(text[digits])) ++digits;
  if (digits < kMinEpochDigits || digits > kMaxEpochDigits) return std::nullopt;
  return scan_fixed(text, 9);
}

// The resolution of an epoch stamp of `length` bytes: 1 s without a fraction, 1 us for six digits.
Nanoseconds epoch_resolution(std::string_view text, std::size_t length) {
  const std::size_t dot = text.substr(0, length).find('.');
  if (dot == std::string_view::npos) return std::chrono::seconds{1};
  const std::size_t digits = length - dot - 1;
  return Nanoseconds{digits >= 9 ? 1 : kPow10[9 - digits]};
}

std::size_t skip_blanks(std::string_view text, std::size_t at) {
  while (at < text.size() && is_blank(text[at])) ++at;
  return at;
}

}  // namespace

std::string_view trim(std::string_view text) {
  std::size_t begin = 0;
  std::size_t end = text.size();
  while (begin < end && is_blank(text[begin])) ++begin;
  while (end > begin && is_blank(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

std::optional<Scanned> scan_fixed(std::string_view text, int scale, DecimalMark mark) {
  if (scale < 0 || scale > 18) return std::nullopt;
  const std::int64_t unit = kPow10[scale];
  std::size_t i = 0;
  std::int64_t integer = 0;
  bool any_digit = false;
  for (; i < text.size() && is_digit(text[i]); ++i) {
    if (integer > (std::numeric_limits<std::int64_t>::max() - 9) / 10) return std::nullopt;
    integer = integer * 10 + (text[i] - '0');
    any_digit = true;
  }
  std::int64_t fraction = 0;
  int fraction_digits = 0;
  bool round_up = false;
  const bool decimal_mark =
      i < text.size() && (text[i] == '.' || (text[i] == ',' && mark == DecimalMark::kPointOrComma));
  if (decimal_mark && i + 1 < text.size() && is_digit(text[i + 1])) {
    ++i;
    for (; i < text.size() && is_digit(text[i]); ++i) {
      if (fraction_digits < scale) {
        fraction = fraction * 10 + (text[i] - '0');
        ++fraction_digits;
      } else if (fraction_digits == scale) {
        round_up = text[i] >= '5';
        ++fraction_digits;  // later digits do not change a half-up rounding of this one
      }
    }
    any_digit = true;
  }
  if (!any_digit) return std::nullopt;
  if (integer > (std::numeric_limits<std::int64_t>::max() - unit) / unit) return std::nullopt;
  const int used = fraction_digits < scale ? fraction_digits : scale;
  std::int64_t value = integer * unit + fraction * kPow10[scale - used];
  if (round_up) ++value;
  return Scanned{value, i};
}

std::optional<std::int64_t> parse_fixed(std::string_view text, int scale, DecimalMark mark) {
  text = trim(text);
  bool negative = false;
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  const auto scanned = scan_fixed(text, scale, mark);
  if (!scanned || scanned->length != text.size()) return std::nullopt;
  return negative ? -scanned->value : scanned->value;
}

std::optional<Scanned> scan_rtt_ms(std::string_view text) {
  const auto scanned = scan_fixed(text, 6, DecimalMark::kPointOrComma);
  if (!scanned || Nanoseconds{scanned->value} > kMaxMeasuredRtt) return std::nullopt;
  return scanned;
}

std::optional<Scanned> scan_unsigned(std::string_view text) {
  constexpr std::size_t kMaxDigits = 18;  // stays below INT64_MAX: no overflow check per digit
  std::size_t i = 0;
  std::int64_t value = 0;
  for (; i < text.size() && is_digit(text[i]); ++i) {
    if (i == kMaxDigits) return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  if (i == 0) return std::nullopt;
  return Scanned{value, i};
}

std::optional<std::uint64_t> parse_unsigned(std::string_view text) {
  text = trim(text);
  const auto scanned = scan_unsigned(text);
  if (!scanned || scanned->length != text.size()) return std::nullopt;
  return static_cast<std::uint64_t>(scanned->value);
}

std::optional<double> parse_double(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<ScannedTime> scan_civil_time(std::string_view text, std::chrono::minutes utc_offset) {
  using namespace std::chrono;
  // YYYY-mm-dd?HH:MM:SS is 19 bytes. The separators first: most text this sees is not a date at
  // all (a ping line's "64 bytes from"), and they reject it at once.
  if (text.size() < 19 || text[4] != '-' || text[7] != '-' || text[13] != ':') return std::nullopt;
  const int year = fixed_digits(text, 0, 4);
  const int month = fixed_digits(text, 5, 2);
  const int day = fixed_digits(text, 8, 2);
  const int hour = fixed_digits(text, 11, 2);
  const int minute = fixed_digits(text, 14, 2);
  const int second = fixed_digits(text, 17, 2);
  if (year < 0 || month < 0 || day < 0 || hour < 0 || minute < 0 || second < 0) return std::nullopt;
  if (text[4] != '-' || text[7] != '-' || (text[10] != 'T' && text[10] != ' ') || text[13] != ':' ||
      text[16] != ':') {
    return std::nullopt;
  }
  if (year < kFirstYear || year > kLastYear || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  const year_month_day date{std::chrono::year{year},
                            std::chrono::month{static_cast<unsigned>(month)},
                            std::chrono::day{static_cast<unsigned>(day)}};
  if (!date.ok()) return std::nullopt;

  std::size_t at = 19;
  Nanoseconds fraction{0};
  Nanoseconds resolution{seconds{1}};
  if (at + 1 < text.size() && (text[at] == '.' || text[at] == ',') && is_digit(text[at + 1])) {
    ++at;
    std::int64_t ns = 0;
    int digits = 0;
    for (; at < text.size() && is_digit(text[at]); ++at) {
      if (digits < 9) {
        ns = ns * 10 + (text[at] - '0');
        ++digits;
      }
    }
    fraction = Nanoseconds{ns * kPow10[9 - digits]};
    resolution = Nanoseconds{kPow10[9 - digits]};
  }
  minutes offset = utc_offset;
  if (at < text.size() && text[at] == 'Z') {
    offset = minutes{0};
    ++at;
  } else if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
    const int zone_hours = fixed_digits(text, at + 1, 2);
    std::size_t minutes_at = at + 3;
    if (minutes_at < text.size() && text[minutes_at] == ':') ++minutes_at;
    const int zone_minutes = fixed_digits(text, minutes_at, 2);
    if (zone_hours >= 0 && zone_hours <= 23 && zone_minutes >= 0 && zone_minutes <= 59) {
      const minutes magnitude{zone_hours * 60 + zone_minutes};
      offset = text[at] == '-' ? -magnitude : magnitude;
      at = minutes_at + 2;
    }
  }
  const auto since_epoch = duration_cast<Nanoseconds>(sys_days{date}.time_since_epoch()) +
                           hours{hour} + minutes{minute} + seconds{second} + fraction - offset;
  return ScannedTime{since_epoch, at, resolution};
}

StampedLine strip_timestamp_prefixes(std::string_view line, std::chrono::minutes utc_offset) {
  StampedLine result;
  bool tool_stamp = false;
  // Two levels cover every tool we know of: an outer line stamp around a tool's own stamp.
  for (int depth = 0; depth < 2; ++depth) {
    const std::string_view rest = line.substr(result.body_offset);
    if (rest.empty()) break;
    if (rest.front() == '[') {
      const std::string_view inner = rest.substr(1);
      if (const auto epoch = scan_epoch(inner);
          epoch && epoch->length < inner.size() && inner[epoch->length] == ']') {
        result.stamp = Nanoseconds{epoch->value};
        result.resolution = epoch_resolution(inner, epoch->length);
        tool_stamp = true;
        result.body_offset = skip_blanks(line, result.body_offset + 2 + epoch->length);
        continue;
      }
      if (const auto civil = scan_civil_time(inner, utc_offset);
          civil && civil->length < inner.size() && inner[civil->length] == ']') {
        if (!tool_stamp) {
          result.stamp = civil->since_epoch;
          result.resolution = civil->resolution;
        }
        result.body_offset = skip_blanks(line, result.body_offset + 2 + civil->length);
        continue;
      }
      break;
    }
    if (!is_digit(rest.front())) break;
    if (const auto civil = scan_civil_time(rest, utc_offset)) {
      std::size_t at = skip_blanks(rest, civil->length);
      if (at < rest.size() && rest[at] == '|') at = skip_blanks(rest, at + 1);
      if (at == civil->length && at < rest.size()) break;  // glued to the text: not a prefix
      if (!tool_stamp && !result.stamp) {
        result.stamp = civil->since_epoch;
        result.resolution = civil->resolution;
      }
      result.body_offset += at;
      continue;
    }
    if (const auto epoch = scan_epoch(rest);
        epoch && epoch->length < rest.size() && rest[epoch->length] == ':') {
      if (!tool_stamp && !result.stamp) {
        result.stamp = Nanoseconds{epoch->value};
        result.resolution = epoch_resolution(rest, epoch->length);
      }
      result.body_offset = skip_blanks(line, result.body_offset + epoch->length + 1);
      continue;
    }
    break;
  }
  return result;
}

std::string quote_preview(std::string_view text, std::size_t limit) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  const std::size_t shown = text.size() < limit ? text.size() : limit;
  for (std::size_t i = 0; i < shown; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '"' || byte == '\\') {
      out += '\\';
      out += static_cast<char>(byte);
    } else if (byte < 0x20 || byte >= 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += static_cast<char>(byte);
    }
  }
  out += '"';
  if (shown < text.size()) out += "...";
  return out;
}

}  // namespace shaper::trace_detail
