#include "shaper/quantities.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

#include "shaper/diagnostics.hpp"

namespace shaper {

namespace {

struct Unit {
  std::string_view suffix;
  std::int64_t ns;
};
// Longest suffix first so that "ms" is not read as "s".
constexpr Unit kUnits[] = {{"ns", 1}, {"us", 1000}, {"ms", 1000000}, {"s", 1000000000}};
// Read but never written, so canonical forms (and digests) do not depend on them: leases and limits
// are easier to read as "10m" and "24h".
constexpr Unit kLongUnits[] = {{"m", 60 * std::int64_t{1000000000}},
                               {"h", 3600 * std::int64_t{1000000000}}};

}  // namespace

Probability Probability::checked(double value) {
  auto p = make(value);
  if (!p) {
    std::fprintf(stderr, "internal error: Probability::checked(%g) is outside [0, 1]\n", value);
    std::abort();
  }
  return *p;
}

std::string format_duration(Nanoseconds d) {
  const double ns = static_cast<double>(d.count());
  const double magnitude = std::fabs(ns);
  char buf[64];
  if (magnitude >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.9gs", ns / 1e9);
  } else if (magnitude >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.6gms", ns / 1e6);
  } else if (magnitude >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.3gus", ns / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%lldns", static_cast<long long>(d.count()));
  }
  return buf;
}

std::string format_probability(Probability p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g%%", p.value() * 100.0);
  return buf;
}

std::string to_string(const Diagnostics& diagnostics, const std::string& file) {
  std::string out;
  for (const auto& d : diagnostics) {
    if (!out.empty()) out += '\n';
    out += file.empty() ? d.to_string() : d.in_file(file);
  }
  return out;
}

std::string json_error_where(std::string_view text, std::size_t byte) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

std::string Diagnostic::in_file(const std::string& file) const {
  const auto colon = where.find(':');
  const auto digits = [](std::string_view s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
  };
  const std::string_view w = where;
  if (colon != std::string::npos && digits(w.substr(0, colon)) && digits(w.substr(colon + 1))) {
    return file + ":" + where + ": " + message;
  }
  return file + ": " + to_string();
}

std::optional<Nanoseconds> parse_duration(std::string_view text) {
  std::vector<Unit> units(std::begin(kUnits), std::end(kUnits));
  units.insert(units.end(), std::begin(kLongUnits), std::end(kLongUnits));
  for (const auto& unit : units) {
    if (text.size() <= unit.suffix.size() || !text.ends_with(unit.suffix)) continue;
    std::string_view number = text.substr(0, text.size() - unit.suffix.size());
    // "ms" also ends in "s"; a number part that ends in a letter belongs to a longer suffix.
    if (!number.empty() && (number.back() < '0' || number.back() > '9') && number.back() != '.')
      continue;
    const auto dot = number.find('.');
    std::string_view whole = number.substr(0, dot);
    std::string_view fraction =
        dot == std::string_view::npos ? std::string_view() : number.substr(dot + 1);
    if (whole.empty() && fraction.empty()) return std::nullopt;
    std::int64_t w = 0;
    if (!whole.empty()) {
      auto [p, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), w);
      if (ec != std::errc() || p != whole.data() + whole.size() || w < 0) return std::nullopt;
    }
    if (w > std::numeric_limits<std::int64_t>::max() / unit.ns) return std::nullopt;
    std::int64_t total = w * unit.ns;
    // The fraction must come out as a whole number of nanoseconds.
    std::int64_t scale = unit.ns;
    for (char c : fraction) {
      if (c < '0' || c > '9') return std::nullopt;
      if (scale % 10 != 0) {
        if (c != '0') return std::nullopt;
        continue;
      }
      scale /= 10;
      total += (c - '0') * scale;
    }
    if (dot != std::string_view::npos && fraction.empty()) return std::nullopt;
    return Nanoseconds(total);
  }
  return std::nullopt;
}

std::string duration_to_string(Nanoseconds d) {
  const std::int64_t ns = d.count();
  if (ns == 0) return "0ms";
  for (auto it = std::rbegin(kUnits); it != std::rend(kUnits); ++it) {
    if (ns % it->ns == 0) return std::to_string(ns / it->ns) + std::string(it->suffix);
  }
  return std::to_string(ns) + "ns";
}

}  // namespace shaper
