#include "text_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>

namespace jitterctl {

namespace {

constexpr const char* kColumnGap = "  ";

// `value` (in [1, 1000) of `unit` when called) with three significant digits, or "" when it rounds
// up to 1000 and so belongs to the next unit.
std::string three_digits(double value, const char* unit) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g", value);
  if (std::string(buf).find('e') != std::string::npos || std::atof(buf) >= 1000.0) return {};
  return std::string(buf) + " " + unit;
}

std::string two_units(std::int64_t big, const char* big_unit, std::int64_t small,
                      const char* small_unit) {
  std::string out = std::to_string(big) + " " + big_unit;
  if (small != 0) out += " " + std::to_string(small) + " " + small_unit;
  return out;
}

}  // namespace

std::size_t display_width(const std::string& text) {
  std::size_t width = 0;
  // Continuation bytes (10xxxxxx) belong to the character before them.
  for (const char c : text) width += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return width;
}

void TextTable::print(std::ostream& out) const {
  std::vector<std::size_t> widths;
  for (const auto& c : columns_) widths.push_back(display_width(c.header));
  for (const auto& row : rows_) {
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], display_width(row[i]));
    }
  }
  auto print_row = [&](auto cell_at) {
    std::string line;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const std::string cell = cell_at(i);
      const std::string pad(widths[i] - display_width(cell), ' ');
      if (i > 0) line += kColumnGap;
      line += columns_[i].right_aligned ? pad + cell : cell + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  };
  print_row([&](std::size_t i) { return columns_[i].header; });
  for (const auto& row : rows_) {
    print_row([&](std::size_t i) { return i < row.size() ? row[i] : std::string(); });
  }
}

std::string format_human_duration(shaper::Nanoseconds d) {
  const std::int64_t signed_ns = d.count();
  if (signed_ns < 0) {
    // -INT64_MIN does not exist; one nanosecond does not show anyway.
    return "-" + format_human_duration(
                     shaper::Nanoseconds(signed_ns == INT64_MIN ? INT64_MAX : -signed_ns));
  }
  const std::int64_t ns = signed_ns;
  if (ns < 1000) return std::to_string(ns) + " ns";
  const double v = static_cast<double>(ns);
  for (const auto& [scale, unit] : {std::pair{1e3, "µs"}, std::pair{1e6, "ms"}}) {
    if (std::string s = three_digits(v / scale, unit); !s.empty()) return s;
  }
  constexpr std::int64_t kMinute = 60, kHour = 60 * kMinute, kDay = 24 * kHour;
  if (v < 59.95e9) return three_digits(v / 1e9, "s");
  const std::int64_t s = std::llround(v / 1e9);
  if (s < kHour) return two_units(s / kMinute, "min", s % kMinute, "s");
  if (s < kDay) return two_units(s / kHour, "h", s % kHour / kMinute, "min");
  return two_units(s / kDay, "d", s % kDay / kHour, "h");
}

std::string format_local_time(std::int64_t realtime_ns, bool date, int fraction_digits) {
  constexpr std::int64_t kNsPerSecond = 1'000'000'000;
  // Floor division, so that instants before 1970 keep a fraction in [0, 1 s).
  std::int64_t seconds = realtime_ns / kNsPerSecond;
  std::int64_t fraction = realtime_ns % kNsPerSecond;
  if (fraction < 0) {
    fraction += kNsPerSecond;
    --seconds;
  }
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm local{};
  if (!localtime_r(&t, &local)) return std::to_string(realtime_ns) + " ns";
  char buf[64];
  std::strftime(buf, sizeof buf, date ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S", &local);
  std::string out = buf;
  if (fraction_digits > 0) {
    char digits[16];
    std::snprintf(digits, sizeof digits, "%09lld", static_cast<long long>(fraction));
    out += "." + std::string(digits, static_cast<std::size_t>(std::min(fraction_digits, 9)));
  }
  return out;
}

}  // namespace jitterctl
