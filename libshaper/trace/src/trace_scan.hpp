#pragma once
// Hand-written scanning for the trace parsers: fixed-point decimals straight to integer
// nanoseconds (no floating point, so "12.345 ms" is exactly 12345000 ns), wall-clock stamps, and
// the timestamp prefixes that ping -D, fping -D and line-stamping tools (moreutils ts, shell
// loops) put in front of a line. No allocation, no locale, no std::regex.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shaper/quantities.hpp"

namespace shaper::trace_detail {

inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
inline bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

// `text` without leading and trailing spaces and tabs.
std::string_view trim(std::string_view text);

// Case-sensitive prefix test and removal.
inline bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// A number read from the front of a string: its value and how many bytes it took.
struct Scanned {
  std::int64_t value = 0;
  std::size_t length = 0;
};

// Which characters may separate a number's integer digits from its fraction. Tools that print
// with printf("%f") under a locale with a decimal comma (de_DE, fr_FR...) write "time=1,5 ms";
// where a value stands alone in its field (ping's time=, an RTT column, mtr's columns) a comma
// followed by digits cannot be anything else and is read. Where a comma may separate fields
// (stamps, summaries) only the point is. A number with both ("1.234,5") is never read.
enum class DecimalMark { kPoint, kPointOrComma };

// An unsigned decimal ("12", "12.345", ".5") at the front of `text`, as an integer count of
// 10^-scale units: scale 6 reads milliseconds into nanoseconds, scale 9 seconds into nanoseconds.
// Digits beyond `scale` round half up. nullopt when there is no digit or the value overflows.
std::optional<Scanned> scan_fixed(std::string_view text, int scale,
                                  DecimalMark mark = DecimalMark::kPoint);

// The whole of `text` (trimmed) as scan_fixed, with an optional leading '-'.
std::optional<std::int64_t> parse_fixed(std::string_view text, int scale,
                                        DecimalMark mark = DecimalMark::kPoint);

// The longest RTT (or per-hop time, jitter) read as a measurement: a day. iputils prints a reply
// whenever it arrives, but a value beyond this is a corrupt line, not a network's delay, and
// keeps send_time = stamp - RTT far from overflowing. The JSON formats use the same bound.
inline constexpr Nanoseconds kMaxMeasuredRtt{std::chrono::hours{24}};

// An RTT in milliseconds at the front of `text` ("12.3", "123", "1,5"), read with either decimal
// mark; nullopt when there is none or it exceeds kMaxMeasuredRtt.
std::optional<Scanned> scan_rtt_ms(std::string_view text);

// Unsigned decimal integer at the front of `text` (at most 19 digits).
std::optional<Scanned> scan_unsigned(std::string_view text);
std::optional<std::uint64_t> parse_unsigned(std::string_view text);

// A finite double in the whole of `text` (trimmed); std::from_chars, so no locale.
std::optional<double> parse_double(std::string_view text);

// "YYYY-mm-dd[T ]HH:MM:SS[.fraction][Z|+hh:mm|+hhmm]" at the front of `text`, as time since the
// epoch. Without a zone the stamp is local time at `utc_offset` from UTC.
struct ScannedTime {
  Nanoseconds since_epoch{0};
  std::size_t length = 0;
  Nanoseconds resolution{std::chrono::seconds{1}};  // of the last digit printed
};
std::optional<ScannedTime> scan_civil_time(std::string_view text, std::chrono::minutes utc_offset);

// Timestamp prefixes in front of a tool's line. Recognised, possibly two deep ("ts" around ping
// -D):
//   [1732971234.123456]            ping -D, fping -D (when the probe's reply was printed)
//   1732971234.123456:             <epoch>: from a shell loop or ts '%.s:'
//   2024-11-30 12:00:01 |          moreutils ts '%Y-%m-%d %H:%M:%S |' (fraction optional: %.S)
//   [2024-11-30 12:00:01.123456]   bracketed wall clock
// When both a tool's own [epoch] stamp and an outer one are present the tool's wins: it is finer.
struct StampedLine {
  std::optional<Nanoseconds> stamp;
  Nanoseconds resolution{0};    // of the stamp's last digit: 1 s for "12:00:01", 1 us for ping -D
  std::size_t body_offset = 0;  // where the tool's own text starts
};
StampedLine strip_timestamp_prefixes(std::string_view line, std::chrono::minutes utc_offset);

// A short, printable quotation of a line for diagnostics: at most `limit` bytes, control and
// non-ASCII bytes as \xHH, "..." when cut.
std::string quote_preview(std::string_view text, std::size_t limit = 48);

}  // namespace shaper::trace_detail
